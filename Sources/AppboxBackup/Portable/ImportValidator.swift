// The rules an imported archive must follow. It is untrusted input: one bad member refuses
// the whole archive (exit 65), before the home changes.
//
// Per member, in archive order (paths already placed in the home by ImportLayout):
// - the path (after libarchive applied any pax `path` override, so overrides are judged by
//   their effect) is relative, has no empty, `.` or `..` component, and starts with
//   Documents or Library, which must themselves be directories;
// - the type is a directory, regular file, symlink or hard link: no devices, FIFOs, sockets;
// - no setuid or setgid bit; extended attributes only in the `user.` namespace;
// - no path appears twice, except a directory repeated as a directory;
// - every parent is a directory seen or implied earlier: never a symlink (that would write
//   through a link) nor a file;
// - a hard link names an earlier regular file of the archive;
// - a symlink's target is not empty. It is data, stored as it is and never followed by
//   appbox (files are created through descriptors beneath the staging directory), so an
//   absolute or climbing target is accepted: an app can make such a link itself, and its
//   export must import back;
// - the member count and the sum of apparent sizes (a sparse file counts its full size) stay
//   within the limits, and the bytes of data (holes excluded) within the free space: a bomb
//   stops at the first header past them, before anything is written.

import AppboxCore
import AppboxRepository
import Foundation

/// Bounds on what an import accepts.
public struct ImportLimits: Sendable {
  /// The most members an archive may have (skipped ones count too): `--max-members`.
  public var maxEntries: Int
  /// The most bytes the imported files may add up to, by apparent size (a sparse file counts
  /// its full length, holes included): `--max-size`. Data actually written is also capped by
  /// the free space.
  public var maxBytes: Int64

  public static let defaultMaxEntries = 1_000_000
  public static let defaultMaxBytes: Int64 = 64 << 30

  public init(maxEntries: Int = defaultMaxEntries, maxBytes: Int64 = defaultMaxBytes) {
    self.maxEntries = maxEntries
    self.maxBytes = maxBytes
  }

  /// The defaults, overridden by APPBOX_IMPORT_MAX_ENTRIES and APPBOX_IMPORT_MAX_BYTES.
  public static func from(environment: [String: String]) -> ImportLimits {
    var limits = ImportLimits()
    if let entries = environment["APPBOX_IMPORT_MAX_ENTRIES"].flatMap(Int.init), entries > 0 {
      limits.maxEntries = entries
    }
    if let bytes = environment["APPBOX_IMPORT_MAX_BYTES"].flatMap(Int64.init), bytes > 0 {
      limits.maxBytes = bytes
    }
    return limits
  }
}

/// A directory the validator has admitted or implied: its entries by name, and (for the build
/// pass) the metadata to give it at the end.
final class ImportDirectory {
  enum Child {
    case directory(ImportDirectory)
    case file
    case symlink
  }
  var children: [[UInt8]: Child] = [:]
  /// The latest member's metadata (a repeated directory), or the default of an implied one.
  var metadata: TreeEntry?
  /// Whether the build pass created it in the staging directory.
  var isCreated = false
}

struct ImportValidator {
  enum Kind { case directory, file, symlink }
  /// What to do with an admitted member.
  enum Admission {
    case directory
    case file
    case symlink
    case hardlink(target: [UInt8])
  }

  /// What `admit` decided about a member.
  struct Admitted {
    var admission: Admission
    /// How many of the member's parent directories, counted from its parent upwards, are new
    /// (implied by this member): the caller creates them first, shallowest first.
    var impliedCount: Int
    /// The member's directory, for a directory member.
    var directory: ImportDirectory?
  }

  /// Every path admitted so far, as a tree from the home.
  let root = ImportDirectory()
  /// The parent directories of the previous member (`trail[i]` is the directory of its first
  /// `i + 1` components) and their names: consecutive members usually share most of their
  /// parents (a tar lists a directory's entries together), so each member costs its own
  /// length, not one lookup per level from the top.
  private(set) var trail: [ImportDirectory] = []
  /// The previous member's path, and where each of its parents' names ends in it.
  private var trailPath: [UInt8] = []
  private var trailEnds: [Int] = []
  /// A reusable key for dictionary lookups (no allocation per lookup).
  private var key: [UInt8] = []
  private var entries = 0
  /// Apparent bytes of the files admitted, and bytes of their data (holes excluded).
  private(set) var bytes: Int64 = 0
  private(set) var dataBytes: Int64 = 0
  let maxEntries: Int
  let maxBytes: Int64
  /// The most data bytes that fit (free space less a reserve).
  let maxDataBytes: Int64

  /// The names a path may start with (nil: any, as in an app group's container).
  let allowedTopLevel: Set<[UInt8]>?

  init(
    maxEntries: Int, maxBytes: Int64, maxDataBytes: Int64 = .max, allowedTopLevel: Set<[UInt8]>? = topLevel
  ) {
    self.maxEntries = maxEntries
    self.maxBytes = maxBytes
    self.maxDataBytes = maxDataBytes
    self.allowedTopLevel = allowedTopLevel
  }

  static let topLevel: Set<[UInt8]> = [Array("Documents".utf8), Array("Library".utf8)]

  static func refuse(_ path: [UInt8], _ reason: String) -> BackupError {
    BackupError(.refusedArchive, "member '\(display(path))' \(reason)")
  }

  /// Counts one member read from the archive, imported or skipped.
  mutating func count() throws {
    entries += 1
    guard entries <= maxEntries else {
      throw BackupError(
        .refusedArchive, "it has more than \(maxEntries) members (--max-members raises the limit)")
    }
  }

  private mutating func child(_ name: ArraySlice<UInt8>, of directory: ImportDirectory) -> ImportDirectory
    .Child?
  {
    key.removeAll(keepingCapacity: true)
    key.append(contentsOf: name)
    return directory.children[key]
  }

  private mutating func setChild(
    _ name: ArraySlice<UInt8>, of directory: ImportDirectory, to child: ImportDirectory.Child
  ) {
    directory.children[Array(name)] = child
  }

  /// The kind of what the archive put at `path` so far, if anything.
  mutating func kind(of path: [UInt8]) -> Kind? {
    var directory = root
    let components = componentRanges(of: path)
    for (index, range) in components.enumerated() {
      switch child(path[range], of: directory) {
      case .directory(let next)?:
        if index == components.count - 1 { return .directory }
        directory = next
      case .file?: return index == components.count - 1 ? .file : nil
      case .symlink?: return index == components.count - 1 ? .symlink : nil
      case nil: return nil
      }
    }
    return nil
  }

  /// Checks one member; returns how to create it and how many parent directories it implies
  /// (which the caller creates first).
  mutating func admit(_ entry: ArchiveEntryFacts) throws -> Admitted {
    let path = entry.path
    if path.first == UInt8(ascii: "/") { throw Self.refuse(path, "has an absolute path") }
    if hasEmptyOrDotComponent(path) {
      if componentRanges(of: path).contains(where: {
        $0.count == 2 && path[$0.lowerBound] == UInt8(ascii: ".")
      }) {
        throw Self.refuse(path, "climbs out with '..'")
      }
      throw Self.refuse(path, "has an empty or '.' component")
    }
    let firstEnd = nextSlash(in: path, from: 0) ?? path.count
    guard allowedTopLevel?.contains(Array(path[..<firstEnd])) ?? true else {
      throw Self.refuse(path, "is outside Documents and Library")
    }
    if allowedTopLevel != nil && firstEnd == path.count && entry.kind != .directory {
      throw Self.refuse(path, "must be a directory")
    }
    switch entry.kind {
    case .other: throw Self.refuse(path, "is a device file, FIFO or socket")
    default: break
    }
    if entry.permissions & 0o6000 != 0 { throw Self.refuse(path, "has the setuid or setgid bit") }
    if let attribute = entry.attributeNames.first(where: { !$0.hasPrefix("user.") }) {
      throw Self.refuse(path, "carries the extended attribute '\(attribute)' (only user.* are accepted)")
    }
    // The parents: those shared with the previous member are known directories (found by a
    // binary search of prefix comparisons); the rest are looked up (or implied) one by one.
    let shared = sharedParentComponents(of: path, with: trailPath, ends: trailEnds)
    trail.removeSubrange(shared...)
    trailEnds.removeSubrange(shared...)
    trailPath = path
    var start = shared == 0 ? 0 : trailEnds[shared - 1] + 1
    var newParents: [Range<Int>] = []
    while let slash = nextSlash(in: path, from: start) {
      newParents.append(start..<slash)
      start = slash + 1
    }
    let parents = shared + newParents.count
    var implied = 0
    for (offset, range) in newParents.enumerated() {
      let component = path[range]
      let parent = trail.last ?? root
      let directory: ImportDirectory
      switch child(component, of: parent) {
      case .directory(let existing)?:
        directory = existing
      case .symlink?:
        let prefix = Array(path[..<range.upperBound])
        throw Self.refuse(path, "would be written through the symbolic link '\(display(prefix))'")
      case .file?:
        let prefix = Array(path[..<range.upperBound])
        throw Self.refuse(path, "is inside '\(display(prefix))', which is a file")
      case nil:
        directory = ImportDirectory()
        setChild(component, of: parent, to: .directory(directory))
        if implied == 0 { implied = newParents.count - offset }
      }
      trail.append(directory)
      trailEnds.append(range.upperBound)
    }
    let parent = parents == 0 ? root : trail[parents - 1]
    let name = path[start...]
    let kind: Kind
    let admission: Admission
    switch entry.kind {
    case .directory:
      kind = .directory
      admission = .directory
    case .regular:
      guard entry.size >= 0, entry.size <= maxBytes - bytes else {
        throw BackupError(
          .refusedArchive,
          "member '\(display(path))' would make the files add up to more than \(maxBytes) bytes "
            + "(a disk bomb? --max-size raises the limit)")
      }
      let data = min(max(entry.dataSize, 0), entry.size)
      guard data <= maxDataBytes - dataBytes else {
        throw BackupError(
          .refusedArchive,
          "member '\(display(path))' would need more than the \(maxDataBytes) bytes of free space left")
      }
      bytes += entry.size
      dataBytes += data
      kind = .file
      admission = .file
    case .symlink(let target):
      if target.isEmpty { throw Self.refuse(path, "is a symbolic link with an empty target") }
      if target.contains(0) { throw Self.refuse(path, "is a symbolic link whose target holds a NUL byte") }
      kind = .symlink
      admission = .symlink
    case .hardlink(let target):
      guard self.kind(of: target) == .file else {
        throw Self.refuse(
          path, "is a hard link to '\(display(target))', which is not an earlier file of the archive")
      }
      kind = .file
      admission = .hardlink(target: target)
    case .other:
      throw Self.refuse(path, "is a device file, FIFO or socket")
    }
    var directory: ImportDirectory?
    switch child(name, of: parent) {
    case .directory(let existing)?:
      guard kind == .directory else { throw Self.refuse(path, "appears twice in the archive") }
      directory = existing
    case .file?, .symlink?:
      throw Self.refuse(path, "appears twice in the archive")
    case nil:
      switch kind {
      case .directory:
        let made = ImportDirectory()
        setChild(name, of: parent, to: .directory(made))
        directory = made
      case .file: setChild(name, of: parent, to: .file)
      case .symlink: setChild(name, of: parent, to: .symlink)
      }
    }
    return Admitted(admission: admission, impliedCount: implied, directory: directory)
  }
}

/// The facts about a member the validator judges, independent of libarchive's types.
struct ArchiveEntryFacts {
  enum Kind: Equatable {
    case directory, regular
    case symlink([UInt8])
    case hardlink([UInt8])
    case other
  }
  var path: [UInt8]
  var kind: Kind
  var permissions: UInt32
  var size: Int64
  /// Bytes of data the archive holds for a regular file: its size, or less when sparse.
  var dataSize: Int64
  var attributeNames: [String]
}
