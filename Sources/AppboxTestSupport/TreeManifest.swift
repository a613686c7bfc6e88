import AppboxCore
import Foundation
import Glibc

/// A comparable description of a tree: for every entry below `path` (relative path →
/// type, permissions, size, mtime in ns, content or link target, user xattrs, and which
/// entries share an inode). Two trees with equal manifests hold the same data.
public func treeManifest(_ path: String, skipping: Set<String> = []) throws -> [String: String] {
  var result: [String: String] = [:]
  var inodes: [UInt64: String] = [:]
  func visit(_ directory: String, relative: String) throws {
    let fd = try FileDescriptor.open(directory, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    defer { fd.close() }
    for entry in try fd.entries().sorted(by: { $0.name.lexicographicallyPrecedes($1.name) }) {
      let name = entry.name.map {
        $0 >= 0x20 && $0 < 0x7F ? String(UnicodeScalar($0)) : String(format: "\\x%02x", $0)
      }
      .joined()
      let rel = relative.isEmpty ? name : relative + "/" + name
      if skipping.contains(rel) { continue }
      let full = Array((directory + "/").utf8) + entry.name
      var st = stat()
      guard withCName(full, { lstat($0, &st) }) == 0 else { throw SystemError("stat", path: rel) }
      let status = FileStatus(st)
      var line =
        "\(status.type) \(String(status.permissions, radix: 8)) mtime=\(status.modificationTime.totalNanoseconds)"
      switch status.type {
      case .regular:
        let file = try withCName(full) { cName -> FileDescriptor in
          let raw = open(cName, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
          guard raw >= 0 else { throw SystemError("open", path: rel) }
          return FileDescriptor(rawValue: raw)
        }
        let content = try file.readAll()
        let names = try file.extendedAttributeNames().filter { $0.hasPrefix("user.") }
        let xattrs = try names.map {
          "\($0)=\((try file.extendedAttribute($0) ?? []).map { String($0) }.joined(separator: ","))"
        }
        file.close()
        var hash: UInt64 = 1_469_598_103_934_665_603
        for byte in content { hash = (hash ^ UInt64(byte)) &* 1_099_511_628_211 }
        line += " size=\(content.count) fnv=\(hash) xattrs=[\(xattrs.joined(separator: ";"))]"
        if status.linkCount > 1 {
          if let first = inodes[status.inode] {
            line += " hardlink-of=\(first)"
          } else {
            inodes[status.inode] = rel
          }
        }
      case .symlink:
        let target = withCName(full) { cName -> String in
          var buffer = [CChar](repeating: 0, count: 4096)
          let n = readlink(cName, &buffer, buffer.count)
          return String(decoding: buffer[0..<max(n, 0)].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
        line = "symlink -> \(target)"
      case .directory:
        line = "directory \(String(status.permissions, radix: 8))"
        result[rel] = line
        try visit(String(decoding: full, as: UTF8.self), relative: rel)
        continue
      default: break
      }
      result[rel] = line
    }
  }
  try visit(path, relative: "")
  return result
}

/// Fills a home's Documents and Library with the awkward cases: modes, a symlink, a hard
/// link, xattrs, an empty directory, names differing only in case, a name that is not UTF-8.
public func populateAwkwardData(home: String) throws {
  let documents = home + "/Documents"
  try FileManager.default.createDirectory(
    atPath: documents + "/folder/empty", withIntermediateDirectories: true)
  try Data("lower".utf8).write(to: URL(fileURLWithPath: documents + "/a.txt"))
  try Data("UPPER".utf8).write(to: URL(fileURLWithPath: documents + "/A.txt"))
  try Data(repeating: 0xAB, count: 300_000).write(to: URL(fileURLWithPath: documents + "/folder/big.bin"))
  chmod(documents + "/folder/big.bin", 0o600)
  try Data("script".utf8).write(to: URL(fileURLWithPath: documents + "/run.sh"))
  chmod(documents + "/run.sh", 0o755)
  symlink("folder/big.bin", documents + "/link-to-big")
  link(documents + "/a.txt", documents + "/folder/hardlink-to-a")
  let fd = try FileDescriptor.open(documents + "/A.txt", O_RDONLY)
  try fd.setExtendedAttribute("user.color", Array("blue".utf8) + [0, 255])
  fd.close()
  let raw: [UInt8] = Array((documents + "/caf").utf8) + [0xE9, 0xFF]
  _ = withCName(raw) { creat($0, 0o644) }
  try FileManager.default.createDirectory(
    atPath: home + "/Library/Application Support", withIntermediateDirectories: true)
  try Data("db".utf8).write(to: URL(fileURLWithPath: home + "/Library/Application Support/store.db"))
  try Data("pref".utf8).write(to: URL(fileURLWithPath: home + "/Library/Preferences/com.example.notes.plist"))
  try Data("cache".utf8).write(to: URL(fileURLWithPath: home + "/Library/Caches/c.bin"))
  var times = [
    timespec(tv_sec: 1_600_000_000, tv_nsec: 123_456_789),
    timespec(tv_sec: 1_600_000_000, tv_nsec: 123_456_789),
  ]
  utimensat(AT_FDCWD, documents + "/folder/big.bin", &times, 0)
}
