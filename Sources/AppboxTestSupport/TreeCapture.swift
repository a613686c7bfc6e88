import AppboxCore
import Foundation
import Glibc

/// What a test compares about one file system entry: everything a backup must preserve.
public struct CapturedEntry: Equatable, CustomStringConvertible, Sendable {
  public var type: FileType
  public var permissions: mode_t
  public var size: Int64
  public var modificationTime: Int64
  public var content: [UInt8]?
  public var linkTarget: [UInt8]?
  public var attributes: [String: [UInt8]]
  /// The other paths of the tree that are hard links to this one, sorted.
  public var hardLinks: [[UInt8]]

  public var description: String {
    "\(type) \(String(permissions, radix: 8)) \(size)B mtime \(modificationTime)"
      + (linkTarget.map { " -> \(String(decoding: $0, as: UTF8.self))" } ?? "")
      + (attributes.isEmpty ? "" : " xattrs \(attributes.keys.sorted())")
      + (hardLinks.isEmpty ? "" : " links \(hardLinks.map { String(decoding: $0, as: UTF8.self) })")
  }
}

/// Every entry below `root` by raw relative path, never following symlinks. Top-level names
/// (or relative paths) in `skipping` are left out with everything below them.
public func captureTree(_ root: String, skipping: Set<String> = []) throws -> [[UInt8]: CapturedEntry] {
  let top = try FileDescriptor.open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
  var result: [[UInt8]: CapturedEntry] = [:]
  var inodes: [UInt64: [[UInt8]]] = [:]
  var stack: [(FileDescriptor, [UInt8])] = [(top, [])]
  let skipped = Set(skipping.map { Array($0.utf8) })
  while let (directory, path) = stack.popLast() {
    defer { directory.close() }
    for entry in try directory.entries() {
      let relative = path.isEmpty ? entry.name : path + [UInt8(ascii: "/")] + entry.name
      if skipped.contains(relative) { continue }
      guard let status = try directory.status(ofRawName: entry.name) else { continue }
      var captured = CapturedEntry(
        type: status.type, permissions: status.permissions, size: status.type == .regular ? status.size : 0,
        modificationTime: status.modificationTime.totalNanoseconds, content: nil, linkTarget: nil,
        attributes: [:],
        hardLinks: [])
      switch status.type {
      case .symlink:
        captured.linkTarget = try directory.readLink(rawName: entry.name)
      case .regular:
        let fd = try directory.open(rawName: entry.name, O_RDONLY | O_NOFOLLOW)
        try fd.closeAfter { fd in
          captured.content = try fd.readAll()
          for (name, value) in try fd.userExtendedAttributes() { captured.attributes[name] = value }
        }
        if status.linkCount > 1 { inodes[status.inode, default: []].append(relative) }
      case .directory:
        let fd = try directory.open(rawName: entry.name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
        for (name, value) in try fd.userExtendedAttributes() { captured.attributes[name] = value }
        stack.append((fd, relative))
      default:
        break
      }
      result[relative] = captured
    }
  }
  for paths in inodes.values where paths.count > 1 {
    for path in paths {
      result[path]?.hardLinks = paths.filter { $0 != path }.sorted { $0.lexicographicallyPrecedes($1) }
    }
  }
  return result
}

/// Human-readable differences between two captures (empty when equal).
public func differences(_ expected: [[UInt8]: CapturedEntry], _ actual: [[UInt8]: CapturedEntry]) -> [String]
{
  var lines: [String] = []
  let paths = Set(expected.keys).union(actual.keys).sorted { $0.lexicographicallyPrecedes($1) }
  for path in paths {
    let name = String(decoding: path, as: UTF8.self)
    switch (expected[path], actual[path]) {
    case (let a?, let b?) where a != b: lines.append("\(name): expected \(a), found \(b)")
    case (_?, nil): lines.append("\(name): missing")
    case (nil, let b?): lines.append("\(name): unexpected \(b)")
    default: break
    }
  }
  return lines
}
