// Import, pass 2: build the planned tree in the staging directory (see Importer.swift for the
// whole algorithm).
//
// The source is read again from its start; every member must be the one the plan recorded at
// that position (same fingerprint: path, type, size, modes, times, link target, attributes,
// sparse map), and the count must match at the end, so what is built is what was judged. Each
// member is judged again by a fresh validator and created through TreeWriter (descriptors
// only, O_EXCL | O_NOFOLLOW, nothing followed): data at its offsets, zero blocks left as holes,
// symlinks after the last member, directory metadata deepest first. The caller owns the
// staging directory and discards it on any error.

import AppboxArchive
import AppboxContainer
import AppboxCore
import AppboxRepository
import Foundation
import Glibc

/// Pass 2: builds the planned tree in the staging directory.
struct ImportBuild {
  let staging: FileDescriptor
  /// Where the build is: the parent directory of the member being created. Members come in
  /// archive order, usually grouped by directory, so moving between them costs the names that
  /// differ, never a walk from the top (a tree 10,000 levels deep builds in linear time).
  let cursor: DirectoryCursor
  var validator: ImportValidator
  let observer: EngineObserver
  var report = ImportReport(files: 0, directories: 0, bytes: 0, format: .archive, skipped: [], warnings: [])

  init(staging: FileDescriptor, limits: ImportLimits, room: Int64, observer: EngineObserver) {
    self.staging = staging
    cursor = DirectoryCursor(base: staging)
    validator = ImportValidator(maxEntries: limits.maxEntries, maxBytes: limits.maxBytes, maxDataBytes: room)
    self.observer = observer
  }

  mutating func run(_ source: ImportSource, plan: ImportPlan) throws {
    defer { cursor.closeAll() }
    let reader = try source.open()
    var layout = ImportLayout()
    var skipped = SkippedMembers()
    var links: [(path: [UInt8], target: [UInt8], time: Int64)] = []
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
    defer { buffer.deallocate() }
    var index = 0
    while let entry = try reader.nextMember() {
      guard index < plan.fingerprints.count, ImportPlan.fingerprint(entry) == plan.fingerprints[index] else {
        throw BackupError(
          .refusedArchive,
          "member \(index + 1) ('\(entry.displayPath)') reads differently from when it was checked "
            + "(the archive changed, or is damaged)")
      }
      index += 1
      try validator.count()
      guard let member = try placed(entry, layout: &layout, skipped: &skipped) else { continue }
      let admitted = try validator.admit(ArchiveEntryFacts(member))
      let name = TreeWriter.split(member.path).name
      // To the member's parent: through the directories that exist, then creating the ones
      // it implies.
      try cursor.move(toParentOf: member.path, creating: admitted.impliedCount)
      if admitted.impliedCount > 0 {
        let now = Int64(Date().timeIntervalSince1970 * 1e9)
        for directory in validator.trail.suffix(admitted.impliedCount) {
          directory.isCreated = true
          directory.metadata = TreeEntry(
            name: [], type: .directory, permissions: 0o755, modificationTime: now)
        }
      }
      let metadata = treeEntry(member)
      switch admitted.admission {
      case .directory:
        let directory = admitted.directory!
        if !directory.isCreated {
          try cursor.current.makeDirectory(rawName: name, mode: 0o700)
          directory.isCreated = true
          report.directories += 1
        }
        directory.metadata = metadata
      case .file:
        let fd = try cursor.current.open(rawName: name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode: 0o600)
        try fd.closeAfter { fd in
          try writeData(of: member, from: reader, to: fd, buffer: buffer)
          try TreeWriter.applyMetadata(RestoreItem(entry: metadata), to: fd)
        }
        report.files += 1
        observer.engine(.progress(files: report.files, bytes: report.bytes))
      case .hardlink(let target):
        // The target's directory, resolved beneath the staging directory (never following a
        // link): a path of the archive's own, so its cost is the member's length.
        let split = TreeWriter.split(target)
        let source = try staging.openBeneath(split.parent, FileDescriptor.pathOnlyFlag | O_DIRECTORY)
        try source.closeAfter { try $0.link(rawName: split.name, to: name, in: cursor.current) }
        report.files += 1
      case .symlink:
        links.append((member.path, member.linkTarget ?? [], metadata.modificationTime))
      }
    }
    guard index == plan.fingerprints.count, reader.warnings.count == plan.warnings.count else {
      throw BackupError(
        .refusedArchive,
        "it read differently from when it was checked (\(index) members, not \(plan.fingerprints.count))")
    }
    for link in links {
      let name = TreeWriter.split(link.path).name
      try cursor.move(toParentOf: link.path)
      try cursor.current.makeSymlink(rawName: name, target: link.target)
      try cursor.current.setTimes(ofRawName: name, modification: Timespec(totalNanoseconds: link.time))
      report.files += 1
    }
    cursor.closeAll()
    for path in ["Documents", "Library", "Library/Preferences", "Library/Caches"]
    where try staging.status(ofRawName: Array(path.utf8)) == nil {
      try staging.makeDirectory(path, mode: 0o755)
    }
    try finishDirectories()
  }

  /// Applies each created directory's metadata after everything inside it is done (setting a
  /// directory's time is then not undone by work inside it): a walk of the admitted tree that
  /// finishes each directory as it leaves it.
  private func finishDirectories() throws {
    func subdirectories(_ directory: ImportDirectory) -> [(name: [UInt8], directory: ImportDirectory)] {
      directory.children.compactMap { name, child in
        if case .directory(let subdirectory) = child, subdirectory.isCreated { return (name, subdirectory) }
        return nil
      }
    }
    let walk = DirectoryCursor(base: staging)
    defer { walk.closeAll() }
    var stack = [(directory: validator.root, pending: subdirectories(validator.root))]
    while let top = stack.last {
      if let next = top.pending.last {
        stack[stack.count - 1].pending.removeLast()
        try walk.descend(next.name)
        stack.append((next.directory, subdirectories(next.directory)))
        continue
      }
      stack.removeLast()
      if stack.isEmpty { break }
      try walk.ascend { fd in
        if let metadata = top.directory.metadata {
          try TreeWriter.applyMetadata(RestoreItem(entry: metadata), to: fd)
        }
      }
    }
  }

  /// Writes a member's data at its offsets (holes stay holes) and gives the file its length.
  private mutating func writeData(
    of member: ArchiveEntry, from reader: ImportMemberReader, to fd: FileDescriptor,
    buffer: UnsafeMutableRawBufferPointer
  ) throws {
    var end: Int64 = 0
    while let chunk = try reader.readChunk(into: buffer) {
      try writeSkippingZeroBlocks(
        UnsafeRawBufferPointer(rebasing: buffer[0..<chunk.count]), at: chunk.offset, to: fd)
      end = chunk.offset + Int64(chunk.count)
      report.bytes += Int64(chunk.count)
    }
    // A sparse member's trailing hole; a dense member is as long as the data it holds (an old
    // GNU header may claim more through its `realsize` field, which GNU tar ignores too).
    let length = reader.deliveredLength
    guard length <= member.size, end <= length else {
      throw ImportValidator.refuse(member.path, "holds more data than its header declares")
    }
    try fd.truncate(to: length)
  }

  /// Writes `data` at `offset`, leaving every 4 KiB block of zeros (aligned to the file, or the
  /// part of one a chunk holds) unwritten: it stays a hole, so a member that is mostly zeros,
  /// sparse in the archive or not, takes no disk space for them. The file is new, so what is
  /// not written reads as zeros, and `truncate` gives it its length at the end.
  private func writeSkippingZeroBlocks(
    _ data: UnsafeRawBufferPointer, at offset: Int64, to fd: FileDescriptor
  )
    throws
  {
    let block = 4096
    var start = 0
    var pending: Range<Int>?
    while start < data.count {
      // Up to the next block boundary of the file.
      let boundary = Int(((offset + Int64(start)) / Int64(block) + 1) * Int64(block) - offset)
      let end = min(boundary, data.count)
      // A new file reads zeros wherever nothing was written: any zero piece can be left out
      // (a partial one at a chunk's edge too, or the block would be allocated for it).
      if isAllZero(UnsafeRawBufferPointer(rebasing: data[start..<end])) {
        if let run = pending {
          try fd.writeAll(UnsafeRawBufferPointer(rebasing: data[run]), at: offset + Int64(run.lowerBound))
          pending = nil
        }
      } else {
        pending = (pending?.lowerBound ?? start)..<end
      }
      start = end
    }
    if let run = pending {
      try fd.writeAll(UnsafeRawBufferPointer(rebasing: data[run]), at: offset + Int64(run.lowerBound))
    }
  }

  private func treeEntry(_ entry: ArchiveEntry) -> TreeEntry {
    TreeEntry(
      name: [], type: .file, permissions: entry.permissions & 0o1777, size: entry.size,
      modificationTime: entry.modificationTime.seconds &* 1_000_000_000
        &+ Int64(entry.modificationTime.nanoseconds),
      extendedAttributes: entry.extendedAttributes.map { ExtendedAttribute(name: $0.name, value: $0.value) }
        .sorted { $0.name < $1.name })
  }
}
