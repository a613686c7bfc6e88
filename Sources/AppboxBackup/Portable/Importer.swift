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
import AppboxRepository
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
  /// The data was imported, but cleaning up after the swap failed (the next command does it).
  public var cleanupWarnings: [String] = []
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

    observer.engine(.phase(.checking))
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
      observer.engine(.phase(.writing))
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
    observer.engine(.phase(.swapping))
    observer.engine(.stage("swap"))
    report.cleanupWarnings = try HomeSwap.swap(staging, into: app, carrying: .allButData, session: self)
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
    case .notFound: throw BackupError(.notFound, "No archive at '\(path)'")
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
      plan.fingerprints.append(fingerprint(entry))
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

  /// What the build pass must find again for a member: everything libarchive reported about
  /// it, hashed (paths and targets as raw bytes, in one call each: a deep tree's members are
  /// long).
  static func fingerprint(_ entry: ArchiveEntry) -> Int {
    var hasher = Hasher()
    entry.path.withUnsafeBytes { hasher.combine(bytes: $0) }
    hasher.combine(entry.path.count)
    hasher.combine(entry.type)
    hasher.combine(entry.permissions)
    hasher.combine(entry.uid)
    hasher.combine(entry.gid)
    hasher.combine(entry.userName)
    hasher.combine(entry.groupName)
    hasher.combine(entry.size)
    hasher.combine(entry.modificationTime)
    if let target = entry.linkTarget {
      target.withUnsafeBytes { hasher.combine(bytes: $0) }
      hasher.combine(target.count)
    } else {
      hasher.combine(-1)
    }
    hasher.combine(entry.extendedAttributes)
    hasher.combine(entry.sparseRegions)
    return hasher.finalize()
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
func placed(
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
