import AppboxCore
import Foundation
import Glibc

/// Finds files that still mention a home's old absolute path after an update — the
/// container path changes on every update, a classic source of bugs. Looks at every
/// preference plist and at small text-like files in Documents and Library (not Caches),
/// in UTF-8 and in UTF-16 (binary plists store non-ASCII strings that way).
enum StalePathScanner {
  static let maxFileSize: Int64 = 256 * 1024
  static let maxFiles = 5_000
  static let textExtensions: Set<String> = [
    "plist", "json", "txt", "xml", "strings", "conf", "cfg", "ini", "yaml", "yml", "csv", "html", "md", "log",
  ]

  static func scan(home: String, oldHome: String) -> [String] {
    let needles = [Array(oldHome.utf8), Array(oldHome.utf16.flatMap { [UInt8($0 >> 8), UInt8($0 & 0xFF)] })]
    var found: [String] = []
    var examined = 0
    for area in ["Library", "Documents"] {
      guard let enumerator = FileManager.default.enumerator(atPath: home + "/" + area) else { continue }
      while let relative = enumerator.nextObject() as? String, examined < maxFiles {
        if area == "Library" && (relative == "Caches" || relative.hasPrefix("Caches/")) {
          enumerator.skipDescendants()
          continue
        }
        let isPreference = area == "Library" && relative.hasPrefix("Preferences/")
        let ext = (relative as NSString).pathExtension.lowercased()
        guard isPreference || textExtensions.contains(ext) else { continue }
        let path = home + "/" + area + "/" + relative
        var st = stat()
        guard lstat(path, &st) == 0, FileStatus(st).type == .regular, Int64(st.st_size) <= maxFileSize,
          let fd = try? FileDescriptor.open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK)
        else { continue }
        examined += 1
        let bytes = (try? fd.readAll(limit: Int(maxFileSize))) ?? []
        fd.close()
        if needles.contains(where: { !$0.isEmpty && contains(bytes, $0) }) {
          found.append(area + "/" + relative)
        }
      }
    }
    return found.sorted()
  }

  static func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
    guard haystack.count >= needle.count, let first = needle.first else { return false }
    var index = 0
    while index <= haystack.count - needle.count {
      if haystack[index] == first && haystack[index..<index + needle.count].elementsEqual(needle) {
        return true
      }
      index += 1
    }
    return false
  }
}
