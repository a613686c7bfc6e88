// Restore, step 2: create a plan's entries beneath a target directory, through descriptors only.
//
// Every entry is created relative to an open descriptor of its parent, which was itself
// created by this writer and reached from the target by name, one level at a time
// (O_DIRECTORY | O_NOFOLLOW, through a PlanCursor): nothing is ever followed, nothing can land
// outside the target, no chdir happens, and no path is resolved from the top, so a tree of
// any depth costs O(entries). Files are created with O_CREAT | O_EXCL | O_NOFOLLOW, so an
// existing entry (a symlink planted in the target, say) is an error, never overwritten or
// followed. Directories start as 0700 so their contents can be written whatever their final
// mode; their mode, attributes and times are applied last, each as a depth-first walk leaves
// it (creating entries inside a directory would move its mtime again). Symlinks are created
// after all files, so no write can pass through one.

import AppboxContainer
import AppboxCore
import AppboxRepository
import Glibc

final class TreeWriter {
  let target: FileDescriptor
  /// The batch being written (RestorePlanner): its directories are every batch's so far.
  var plan: RestorePlan
  /// Creates the files a snapshot recorded as protected under their class; nil: every file
  /// is created unprotected.
  var protectedFiles: ProtectedFileWriter?
  /// Where entries are created; a second one for the other end of a hard link.
  private let cursor: PlanCursor
  private let linkSource: PlanCursor

  /// Writes `plan` beneath `target`, which the caller keeps open and closes.
  init(target: FileDescriptor, plan: RestorePlan) {
    self.target = target
    self.plan = plan
    cursor = PlanCursor(target: target)
    linkSource = PlanCursor(target: target)
  }

  deinit { closeAll() }

  func closeAll() {
    cursor.closeAll()
    linkSource.closeAll()
  }

  /// An open descriptor of directory `index` of the plan (-1: the target); valid until the
  /// writer's next call.
  func directory(_ index: Int32) throws -> FileDescriptor { try cursor.directory(index, in: plan) }

  /// Creates directory `index` of the plan (mode 0700 until `finishDirectories`).
  func makeDirectory(_ index: Int) throws {
    let item = plan.directories[index]
    try directory(item.parent).makeDirectory(rawName: plan.name(of: item), mode: 0o700)
  }

  /// Creates `item`'s regular file, empty, open for writing, under its protection class when
  /// it has one and `protectedFiles` is set.
  func createFile(_ item: RestoreItem) throws -> FileDescriptor {
    let parent = try directory(item.parent)
    let name = plan.name(of: item)
    guard item.protectionClass != .none, let protectedFiles else {
      return try parent.open(rawName: name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode: 0o600)
    }
    return try protectedFiles.createFile(rawName: name, in: parent, class: item.protectionClass, mode: 0o600)
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
    let directory = try directory(item.parent)
    let name = plan.name(of: item)
    try directory.makeSymlink(rawName: name, target: item.linkTarget ?? [])
    try directory.setTimes(ofRawName: name, modification: Timespec(totalNanoseconds: item.modificationTime))
  }

  func makeFIFO(_ item: RestoreItem) throws {
    let directory = try directory(item.parent)
    let name = plan.name(of: item)
    try directory.makeFIFO(rawName: name, mode: mode_t(item.permissions & 0o777))
    let fd = try directory.open(rawName: name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW)
    try fd.closeAfter { try TreeWriter.applyMetadata(item, to: $0) }
  }

  /// Makes `item` a hard link to the already written `primary`.
  func link(_ item: RestoreItem, to primary: LinkPrimary) throws {
    let source = try linkSource.directory(primary.parent, in: plan)
    let destination = try directory(item.parent)
    try source.link(rawName: primary.name, to: plan.name(of: item), in: destination)
  }

  /// Applies every directory's final metadata, giving the app's data to `owner` first when one
  /// is given: a depth-first walk that finishes each directory as it leaves it, so a
  /// directory's time is set after everything inside it.
  func finishDirectories(owner: UInt32?) throws {
    cursor.closeAll()
    let finish = { [plan] (index: Int32, fd: FileDescriptor) throws in
      let item = plan.directories[Int(index)]
      if let owner, item.isData { try fd.setOwner(owner, owner) }
      try TreeWriter.applyMetadata(item, to: fd)
    }
    for index in plan.directories.indices {
      // Moving to the next directory in depth-first order leaves (and finishes) every
      // directory whose subtree is done.
      _ = try cursor.directory(Int32(index), in: plan, leaving: finish)
    }
    try cursor.ascend(toDepth: 0, leaving: finish)
  }

  /// Gives `item` (not following it) to `owner`, through its parent's descriptor.
  func handOver(_ item: RestoreItem, to owner: UInt32) throws {
    try DataOwnership.handOver(rawName: plan.name(of: item), in: directory(item.parent), to: owner)
  }

  /// Gives the entry at `path` (a short path of the home's standard directories, not
  /// following it) to `owner`.
  func handOver(path: [UInt8], to owner: UInt32) throws {
    guard let slash = path.lastIndex(of: UInt8(ascii: "/")) else {
      try DataOwnership.handOver(rawName: path, in: target, to: owner)
      return
    }
    let parent = try target.openBeneath(Array(path[..<slash]), O_RDONLY | O_DIRECTORY)
    try parent.closeAfter {
      try DataOwnership.handOver(rawName: Array(path[(slash + 1)...]), in: $0, to: owner)
    }
  }

  /// The parent's path and the last name of `path`.
  static func split(_ path: [UInt8]) -> (parent: [UInt8], name: [UInt8]) {
    guard let slash = lastSlash(in: path) else { return ([], path) }
    return (Array(path[..<slash]), Array(path[(slash + 1)...]))
  }
}
