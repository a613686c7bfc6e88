import AppboxCore
import Foundation
import Glibc

/// One walk over a tree with descriptors, never following a symlink (a symlink counts as a
/// file of its own length): counts files and bytes, optionally the entries carrying the
/// exclude-from-backup attribute, and optionally finds small text-like files that contain
/// any of some byte strings (the update's stale-path warning). No per-entry allocation
/// beyond the names of matches.
struct TreeMeasure {
  var files = 0
  var bytes: Int64 = 0
  var excluded = 0
  /// Paths (relative to the walked directory) of files that contain a searched string.
  var matches: [String] = []

  /// What to look for in file contents, and in which files.
  struct Search {
    var needles: [[UInt8]]
    /// Files whose name ends with one of these (lower case, with the dot) are searched…
    var extensions: [String]
    /// …and every file below these top-level subdirectories ("Preferences").
    var everyFileBelow: Set<String>
    var maxFileSize: Int64
    var maxFiles: Int
  }

  static func measure(
    _ path: String, skipping: Set<String> = [], countExcluded: Bool = false, search: Search? = nil
  ) -> TreeMeasure {
    var result = TreeMeasure()
    guard let top = try? FileDescriptor.open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW) else { return result }
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 8)
    defer { buffer.deallocate() }
    var searched = 0
    // Each frame: a directory, its path relative to `path`, and whether every file below is searched.
    var stack: [(FileDescriptor, String, Bool)] = [(top, "", false)]
    while let (directory, relative, searchAll) = stack.popLast() {
      defer { directory.close() }
      try? directory.forEachEntry(buffer: buffer) { name, length, _ in
        let bytes = UnsafeRawBufferPointer(start: name, count: length)
        if relative.isEmpty && !skipping.isEmpty && skipping.contains(String(decoding: bytes, as: UTF8.self))
        {
          return
        }
        guard let status = try? directory.status(ofCName: name) else { return }
        if countExcluded && status.type != .symlink
          && directory.entryHasExtendedAttribute(Array(bytes), excludeFromBackupAttribute)
        {
          result.excluded += 1
        }
        switch status.type {
        case .directory:
          let child = Glibc.openat(directory.rawValue, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
          guard child >= 0 else { return }
          let childPath = relative.isEmpty ? String(cString: name) : relative + "/" + String(cString: name)
          let below = searchAll || (relative.isEmpty && search?.everyFileBelow.contains(childPath) == true)
          stack.append((FileDescriptor(rawValue: child), childPath, below))
        default:
          result.files += 1
          result.bytes += status.size
          if let search, status.type == .regular, status.size <= search.maxFileSize,
            searched < search.maxFiles,
            searchAll || search.hasSearchedExtension(bytes)
          {
            searched += 1
            if search.fileContainsNeedle(name, in: directory, size: Int(status.size)) {
              result.matches.append(
                relative.isEmpty ? String(cString: name) : relative + "/" + String(cString: name))
            }
          }
        }
      }
    }
    result.matches.sort()
    return result
  }
}

extension TreeMeasure.Search {
  func hasSearchedExtension(_ name: UnsafeRawBufferPointer) -> Bool {
    guard let dot = name.lastIndex(of: 0x2E) else { return false }
    let ext = String(decoding: name[dot...], as: UTF8.self).lowercased()
    return extensions.contains(ext)
  }

  /// Reads the file (it is small) and looks for each needle.
  func fileContainsNeedle(_ name: UnsafePointer<CChar>, in directory: FileDescriptor, size: Int) -> Bool {
    let fd = Glibc.openat(directory.rawValue, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
    guard fd >= 0 else { return false }
    defer { Glibc.close(fd) }
    let capacity = max(size, 1)
    let content = UnsafeMutableRawBufferPointer.allocate(byteCount: capacity, alignment: 8)
    defer { content.deallocate() }
    var filled = 0
    while filled < capacity {
      let n = Glibc.read(fd, content.baseAddress! + filled, capacity - filled)
      if n <= 0 { break }
      filled += n
    }
    let haystack = UnsafeRawBufferPointer(rebasing: content[0..<filled])
    return needles.contains { needle in needle.withUnsafeBytes { Self.contains(haystack, $0) } }
  }

  /// Whether `needle` occurs in `haystack`: `memchr(3)` to each candidate first byte, then `memcmp(3)`.
  static func contains(_ haystack: UnsafeRawBufferPointer, _ needle: UnsafeRawBufferPointer) -> Bool {
    guard let first = needle.first, needle.count <= haystack.count, let base = haystack.baseAddress else {
      return false
    }
    var offset = 0
    let last = haystack.count - needle.count
    while offset <= last {
      guard let hit = memchr(base + offset, Int32(first), last - offset + 1) else { return false }
      let index = base.distance(to: UnsafeRawPointer(hit))
      if memcmp(base + index, needle.baseAddress!, needle.count) == 0 { return true }
      offset = index + 1
    }
    return false
  }
}
