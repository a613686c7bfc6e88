import AppboxCore
import Foundation
import Glibc

/// Finds files that still mention a home's old absolute path after an update — the
/// container path changes on every update, a classic source of bugs. Looks at every
/// preference plist and at small text-like files in Documents and Library (not Caches),
/// in UTF-8 and in UTF-16 (binary plists store non-ASCII strings that way).
enum StalePathScanner {
  static let textExtensions = [
    ".plist", ".json", ".txt", ".xml", ".strings", ".conf", ".cfg", ".ini", ".yaml", ".yml", ".csv", ".html",
    ".md", ".log",
  ]

  /// Measures Documents and Library of `home` and scans them for any of `oldHomes` (the
  /// old home's host path, and its path in the jail, which apps see); one walk each.
  static func survey(home: String, oldHomes: [String]) -> (files: Int, bytes: Int64, stale: [String]) {
    let needles = oldHomes.flatMap { oldHome in
      [Array(oldHome.utf8), oldHome.utf16.flatMap { [UInt8($0 >> 8), UInt8($0 & 0xFF)] }]
    }
    var search = TreeMeasure.Search(
      needles: needles, extensions: textExtensions, everyFileBelow: ["Preferences"],
      maxFileSize: 256 * 1024, maxFiles: 5_000)
    let library = TreeMeasure.measure(home + "/Library", skipping: ["Caches"], search: search)
    let caches = TreeMeasure.measure(home + "/Library/Caches")
    search.everyFileBelow = []
    search.maxFiles = max(0, 5_000 - library.matches.count)
    let documents = TreeMeasure.measure(home + "/Documents", search: search)
    return (
      documents.files + library.files + caches.files, documents.bytes + library.bytes + caches.bytes,
      library.matches.map { "Library/" + $0 } + documents.matches.map { "Documents/" + $0 }
    )
  }
}
