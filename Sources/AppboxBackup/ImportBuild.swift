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
import Foundation
import Glibc

/// Pass 2: builds the planned tree in the staging directory.
struct ImportBuild {
  let writer: TreeWriter
  var validator: ImportValidator
  let observer: EngineObserver
  /// Directory metadata to apply at the end (the latest member's, for a repeated directory).
  var directories: [[UInt8]: TreeEntry] = [:]
  var report = ImportReport(files: 0, directories: 0, bytes: 0, format: .archive, skipped: [], warnings: [])

  init(staging: FileDescriptor, limits: ImportLimits, room: Int64, observer: EngineObserver) {
    writer = TreeWriter(target: staging)
    validator = ImportValidator(maxEntries: limits.maxEntries, maxBytes: limits.maxBytes, maxDataBytes: room)
    self.observer = observer
  }

  mutating func run(_ source: ImportSource, plan: ImportPlan) throws {
    defer { writer.closeAll() }
    let reader = try source.open()
    var layout = ImportLayout()
    var skipped = SkippedMembers()
    var links: [(path: [UInt8], target: [UInt8], time: Int64)] = []
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
    defer { buffer.deallocate() }
    var index = 0
    while let entry = try reader.nextMember() {
      guard index < plan.fingerprints.count, entry.hashValue == plan.fingerprints[index] else {
        throw BackupError(
          .refusedArchive,
          "member \(index + 1) ('\(entry.displayPath)') reads differently from when it was checked "
            + "(the archive changed, or is damaged)")
      }
      index += 1
      try validator.count()
      guard let member = try placed(entry, layout: &layout, skipped: &skipped) else { continue }
      let (admission, implied) = try validator.admit(ArchiveEntryFacts(member))
      for directory in implied {
        try writer.makeDirectory(directory)
        directories[directory] = TreeEntry(
          name: [], type: .directory, permissions: 0o755,
          modificationTime: Int64(Date().timeIntervalSince1970 * 1e9))
      }
      let metadata = treeEntry(member)
      switch admission {
      case .directory:
        if directories[member.path] == nil {
          try writer.makeDirectory(member.path)
          report.directories += 1
        }
        directories[member.path] = metadata
      case .file:
        let fd = try writer.createFile(member.path)
        try fd.closeAfter { fd in
          try writeData(of: member, from: reader, to: fd, buffer: buffer)
          try TreeWriter.applyMetadata(RestoreItem(path: member.path, entry: metadata), to: fd)
        }
        report.files += 1
        observer.engine(.progress(files: report.files, bytes: report.bytes))
      case .hardlink(let target):
        try writer.link(
          RestoreItem(path: member.path, entry: metadata), to: RestoreItem(path: target, entry: metadata))
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
      var entry = TreeEntry(name: [], type: .symlink, permissions: 0o777, modificationTime: link.time)
      entry.linkTarget = link.target
      try writer.makeSymlink(RestoreItem(path: link.path, entry: entry))
      report.files += 1
    }
    writer.closeAll()
    let staging = writer.target
    for path in ["Documents", "Library", "Library/Preferences", "Library/Caches"]
    where try staging.status(ofRawName: Array(path.utf8)) == nil {
      try staging.makeDirectory(path, mode: 0o755)
    }
    // Deepest first, so setting a directory's time is not undone by work inside it.
    for (path, entry) in directories.sorted(by: { $0.key.count > $1.key.count }) {
      try writer.finishDirectory(RestoreItem(path: path, entry: entry))
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
