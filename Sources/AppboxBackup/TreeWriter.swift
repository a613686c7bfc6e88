// Restore, step 2: create entries beneath a target directory, through descriptors only.
//
// Every entry is created relative to an open descriptor of its parent, which was itself
// created by this writer or opened with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) from
// the target: nothing is ever followed, nothing can land outside the target, and no chdir
// happens. Files are created with O_CREAT | O_EXCL | O_NOFOLLOW, so an existing entry (a
// symlink planted in the target, say) is an error, never overwritten or followed.
// Directories start as 0700 so their contents can be written whatever their final mode;
// their mode, attributes and times are applied last, deepest first (creating entries inside
// a directory would move its mtime again). Symlinks are created after all files, so no
// write can pass through one.

import AppboxContainer
import AppboxCore
import Glibc

final class TreeWriter {
  let target: FileDescriptor
  /// Creates the files a snapshot recorded as protected under their class; nil: every file
  /// is created unprotected.
  var protectedFiles: ProtectedFileWriter?
  /// Open parent directories by path; bounded, since a tree may have many thousands.
  private var cache: [[UInt8]: FileDescriptor] = [:]
  private static let cacheLimit = 256

  /// Writes beneath `target`, which the caller keeps open and closes.
  init(target: FileDescriptor) { self.target = target }

  deinit { closeAll() }

  func closeAll() {
    for descriptor in cache.values { descriptor.close() }
    cache.removeAll()
  }

  /// An open descriptor of directory `path` ("" is the target); the writer owns it.
  func directory(_ path: [UInt8]) throws -> FileDescriptor {
    if path.isEmpty { return target }
    if let open = cache[path] { return open }
    if cache.count >= TreeWriter.cacheLimit { closeAll() }
    let descriptor = try target.openBeneath(path, O_RDONLY | O_DIRECTORY)
    cache[path] = descriptor
    return descriptor
  }

  /// The parent's path and the last name of `path`.
  static func split(_ path: [UInt8]) -> (parent: [UInt8], name: [UInt8]) {
    guard let slash = path.lastIndex(of: UInt8(ascii: "/")) else { return ([], path) }
    return (Array(path[..<slash]), Array(path[(slash + 1)...]))
  }

  /// Creates directory `path` (mode 0700 until `finishDirectory`).
  func makeDirectory(_ path: [UInt8]) throws {
    let (parent, name) = TreeWriter.split(path)
    try directory(parent).makeDirectory(rawName: name, mode: 0o700)
  }

  /// Creates regular file `path`, empty, open for writing.
  func createFile(_ path: [UInt8]) throws -> FileDescriptor {
    let (parent, name) = TreeWriter.split(path)
    return try directory(parent).open(rawName: name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode: 0o600)
  }

  /// Creates `item`'s regular file, empty, open for writing, under its protection class when
  /// it has one and `protectedFiles` is set.
  func createFile(_ item: RestoreItem) throws -> FileDescriptor {
    guard item.protectionClass != .none, let protectedFiles else { return try createFile(item.path) }
    let (parent, name) = TreeWriter.split(item.path)
    return try protectedFiles.createFile(
      rawName: name, in: directory(parent), class: item.protectionClass, mode: 0o600)
  }

  /// Applies mode, `user.*` attributes and times to an open file or directory.
  static func applyMetadata(_ item: RestoreItem, to descriptor: FileDescriptor) throws {
    for attribute in item.attributes {
      try descriptor.setExtendedAttribute(attribute.name, attribute.value)
    }
    try descriptor.setPermissions(mode_t(item.permissions))
    let time = Timespec(totalNanoseconds: item.modificationTime)
    try descriptor.setTimes(access: time, modification: time)
  }

  func makeSymlink(_ item: RestoreItem) throws {
    let (parent, name) = TreeWriter.split(item.path)
    let directory = try directory(parent)
    try directory.makeSymlink(rawName: name, target: item.linkTarget ?? [])
    try directory.setTimes(
      ofRawName: name, modification: Timespec(totalNanoseconds: item.modificationTime))
  }

  func makeFIFO(_ item: RestoreItem) throws {
    let (parent, name) = TreeWriter.split(item.path)
    let directory = try directory(parent)
    try directory.makeFIFO(rawName: name, mode: mode_t(item.permissions & 0o777))
    let fd = try directory.open(rawName: name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW)
    try fd.closeAfter { try TreeWriter.applyMetadata(item, to: $0) }
  }

  /// Makes `item` a hard link to the already written `primary`.
  func link(_ item: RestoreItem, to primary: RestoreItem) throws {
    let (fromParent, fromName) = TreeWriter.split(primary.path)
    let (toParent, toName) = TreeWriter.split(item.path)
    let source = try directory(fromParent)
    let destination = try directory(toParent)
    try source.link(rawName: fromName, to: toName, in: destination)
  }

  /// Applies a directory's final metadata.
  /// Applies a directory's final metadata, giving it to `owner` first when one is given.
  func finishDirectory(_ item: RestoreItem, owner: UInt32? = nil) throws {
    let descriptor = try target.openBeneath(item.path, O_RDONLY | O_DIRECTORY)
    try descriptor.closeAfter {
      if let owner { try $0.setOwner(owner, owner) }
      try TreeWriter.applyMetadata(item, to: $0)
    }
  }

  /// Gives the entry at `path` (not following it) to `owner`, through its parent's descriptor.
  func handOver(_ path: [UInt8], to owner: UInt32) throws {
    let (parent, name) = TreeWriter.split(path)
    try DataOwnership.handOver(rawName: name, in: directory(parent), to: owner)
  }
}
