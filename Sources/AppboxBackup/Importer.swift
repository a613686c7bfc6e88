// `import`: replace an app's Documents and Library with an untrusted archive's contents (a tar
// in any compression libarchive reads, or an Xcode `.xcappdata` package, as a directory or a
// tar of one).
//
// Algorithm, in two passes over the source:
// 1. Plan (ImportPlan): read every header, skipping data. Place each member in the home
//    (ImportLayout: skip the bundle, tmp and Library/Caches of a whole-home tar; unwrap an
//    xcappdata package), judge it (ImportValidator: paths, types, modes, links, and the caps
//    on members, apparent size and free space), and keep a fingerprint of what libarchive
//    reported. Then the rule for damaged data: any warning libarchive gave refuses the import
//    unless the caller is lenient (then each is reported, and counted), and a source with
//    nothing to import refuses unless empty imports are allowed. Nothing has been written yet:
//    a disk bomb or a damaged archive stops here.
// 2. Build (ImportBuild): read the source again into a staging directory beside the homes.
//    Every member must be the one planned (same fingerprint, same order, same count), so what
//    is built is what was judged; each is judged again and created through TreeWriter
//    (descriptors only, O_EXCL | O_NOFOLLOW, nothing followed). File data is written at its
//    offsets, so the holes of a sparse member stay holes, and whole 4 KiB blocks of zeros are
//    not written either (a member of zeros, compressed to nothing, cannot fill the disk).
//    Symlinks come after the last member
//    (no member can be written through one); directory modes and times are applied last.
// 3. The staging directory replaces the home's contents through the journaled swap, carrying
//    over everything but Documents and Library (the bundle, tmp, the metadata file).
// A refusal or error at any point discards the staging directory: the home never changed, and
// nothing was written anywhere else.

import AppboxArchive
import AppboxContainer
import AppboxCore
import Foundation
import Glibc

/// How an import treats what it reads.
public struct ImportOptions: Sendable {
  /// Caps on members and apparent size; nil uses the defaults (or APPBOX_IMPORT_MAX_*).
  public var limits: ImportLimits?
  /// Import even when libarchive warned about the archive (each warning is reported).
  public var lenient: Bool
  /// Accept a source with nothing to import: the app's Documents and Library become empty.
  public var allowEmpty: Bool

  public init(limits: ImportLimits? = nil, lenient: Bool = false, allowEmpty: Bool = false) {
    self.limits = limits
    self.lenient = lenient
    self.allowEmpty = allowEmpty
  }
}

/// What kind of source an import read.
public enum ImportFormat: String, Sendable {
  /// A tar of Documents and Library, or of a whole home.
  case archive
  /// An Xcode app-data package, as a directory or as a tar.
  case xcappdata
}

/// What an import wrote.
public struct ImportReport: Sendable {
  public var files: Int
  public var directories: Int
  /// Bytes of file data written (holes of sparse files excluded).
  public var bytes: Int64
  public var format: ImportFormat
  /// Parts of a home that were in the source but are never imported, with member counts.
  public var skipped: [ImportSkip]
  /// What libarchive warned about (imported anyway, because the import was lenient).
  public var warnings: [String]
}

/// Members of one part of a home that import skipped.
public struct ImportSkip: Sendable, Equatable {
  public var path: String
  public var members: Int
}

extension DeviceSession {
  /// Replaces `app`'s Documents and Library with the archive or package at `path`, all or
  /// nothing.
  public func importData(
    into app: AppRecord, from path: String, options: ImportOptions = ImportOptions(),
    observer: EngineObserver = SilentObserver()
  ) throws -> ImportReport {
    let running = try holdNotRunning(app, session: self)
    defer { withExtendedLifetime(running) {} }
    observer.engine(.started(operation: "import", app: app.bundleIdentifier))
    let source = try ImportSource.at(path)
    let limits = options.limits ?? ImportLimits.from(environment: environment)
    let room = try freeSpaceForImport()

    observer.engine(.stage("plan"))
    let plan = try refusing(path) { try ImportPlan.make(source, limits: limits, room: room) }
    try plan.check(options, path: path)
    for warning in plan.warnings {
      observer.engine(.warning(path: nil, message: "imported despite a damaged archive: \(warning)"))
    }
    if !plan.skipped.isEmpty {
      observer.engine(
        .warning(path: nil, message: "skipped what import does not replace: \(plan.skipped.summary)"))
    }
    observer.engine(.planned(entries: plan.fingerprints.count, files: plan.files, bytes: plan.dataBytes))

    let staging = try HomeStagingArea.create(in: self)
    var report: ImportReport
    do {
      observer.engine(.stage("extract"))
      var build = ImportBuild(staging: staging.descriptor, limits: limits, room: room, observer: observer)
      try refusing(path) { try build.run(source, plan: plan) }
      report = build.report
    } catch {
      staging.discard()
      throw error
    }
    report.format = plan.format
    report.skipped = plan.skipped.groups.map { ImportSkip(path: $0.name, members: $0.count) }
    report.warnings = plan.warnings.map(\.description)
    observer.engine(.stage("swap"))
    try HomeSwap.swap(staging, into: app, carrying: .allButData, session: self)
    observer.engine(.finished(operation: "import", app: app.bundleIdentifier))
    return report
  }

  /// Free space beside the homes, less a reserve for everything else the device needs.
  private func freeSpaceForImport() throws -> Int64 {
    let applicationRoot = try FileDescriptor.open(root.applicationRoot, O_RDONLY | O_DIRECTORY)
    defer { applicationRoot.close() }
    return max(0, try applicationRoot.availableSpace() - (64 << 20))
  }
}

/// Runs `body`, naming the source in refusals; other errors (I/O, no space) pass unchanged.
private func refusing<T>(_ path: String, _ body: () throws -> T) throws -> T {
  do {
    return try body()
  } catch let failure as BackupError where failure.code == .refusedArchive {
    throw BackupError(.refusedArchive, "Refused to import '\(path)': \(failure.message)")
  } catch let failure as ArchiveError {
    switch failure.kind {
    case .notFound: throw BackupError(.snapshotNotFound, "No archive at '\(path)'")
    case .badData: throw BackupError(.refusedArchive, "Refused to import '\(path)': \(failure.message)")
    default: throw failure
    }
  }
}

/// Pass 1: what the source holds, judged before anything is written.
struct ImportPlan {
  /// One per member read, in order: what the build pass must read again.
  var fingerprints: [Int] = []
  var warnings: [ArchiveWarning] = []
  var skipped = SkippedMembers()
  /// Members that go into the home, regular files among them, and their data bytes.
  var imported = 0
  var files = 0
  var dataBytes: Int64 = 0
  var format = ImportFormat.archive

  static func make(_ source: ImportSource, limits: ImportLimits, room: Int64) throws -> ImportPlan {
    let reader = try source.open()
    var layout = ImportLayout()
    var validator = ImportValidator(
      maxEntries: limits.maxEntries, maxBytes: limits.maxBytes, maxDataBytes: room)
    var plan = ImportPlan()
    while let entry = try reader.nextMember() {
      try validator.count()
      plan.fingerprints.append(entry.hashValue)
      guard let member = try placed(entry, layout: &layout, skipped: &plan.skipped) else { continue }
      _ = try validator.admit(ArchiveEntryFacts(member))
      plan.imported += 1
      if member.type == .regular { plan.files += 1 }
    }
    plan.dataBytes = validator.dataBytes
    plan.warnings = reader.warnings
    if case .package = layout.kind { plan.format = .xcappdata }
    return plan
  }

  /// The rule for damaged data, and for empty sources.
  func check(_ options: ImportOptions, path: String) throws {
    if let first = warnings.first, !options.lenient {
      let more = warnings.count > 1 ? " (and \(warnings.count - 1) more)" : ""
      throw BackupError(
        .refusedArchive,
        "Refused to import '\(path)': the archive is damaged: \(first)\(more); --lenient imports what can be read"
      )
    }
    if imported == 0 && !options.allowEmpty {
      let what =
        fingerprints.isEmpty
        ? "it has no members" : "none of its \(fingerprints.count) members goes into Documents or Library"
      throw BackupError(
        .refusedArchive,
        "Refused to import '\(path)': \(what), so the app's data would be erased; --allow-empty does that")
    }
  }
}

/// Places `entry` in the home: nil for a member skipped (counted) or ignored; otherwise the
/// entry with its home path, and a hard link's target placed the same way.
private func placed(
  _ entry: ArchiveEntry, layout: inout ImportLayout, skipped: inout SkippedMembers
) throws -> ArchiveEntry? {
  var member = entry
  switch layout.place(entry.path, isDirectory: entry.type == .directory) {
  case .home(let path): member.path = path
  case .skipped(let group):
    skipped.add(group)
    return nil
  case .ignored: return nil
  case .outside:
    throw ImportValidator.refuse(entry.path, "is outside Documents and Library")
  }
  if entry.type == .hardlink, let target = entry.linkTarget {
    var targetLayout = layout
    guard case .home(let placedTarget) = targetLayout.place(target) else {
      throw ImportValidator.refuse(
        entry.path, "is a hard link to '\(display(target))', which is not imported")
    }
    member.linkTarget = placedTarget
  }
  return member
}

extension ArchiveEntryFacts {
  init(_ entry: ArchiveEntry) {
    let kind: Kind
    switch entry.type {
    case .directory: kind = .directory
    case .regular: kind = .regular
    case .symlink: kind = .symlink(entry.linkTarget ?? [])
    case .hardlink: kind = .hardlink(entry.linkTarget ?? [])
    case .other: kind = .other
    }
    let data = entry.sparseRegions.map { $0.reduce(Int64(0)) { $0 + max($1.length, 0) } } ?? entry.size
    self.init(
      path: entry.path, kind: kind, permissions: entry.permissions, size: entry.size, dataSize: data,
      attributeNames: entry.extendedAttributes.map(\.name))
  }
}

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
