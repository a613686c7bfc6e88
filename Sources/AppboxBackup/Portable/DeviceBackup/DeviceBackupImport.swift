// import-backup: a domain of an iOS device backup becomes a snapshot in a repository.
//
// Algorithm, per subject (an app's domain, or an app group's):
// 1. Take the subject's writer lock and the repository's (shared), as a backup does.
// 2. Plan: one scan of the domain's Manifest.db rows, judged by import's rules
//    (DeviceBackupPlan.swift); the room is the repository's free space (less 64 MiB) for a
//    local one. Nothing is written before the whole domain has been judged.
// 3. Archive: the content reader (DeviceBackupContent.swift) walks the planned directories
//    depth-first and reads, decrypts and hashes each file once on its thread; the backup
//    engine's Archiver writes the members into a staged archive on this one, as for a full
//    backup (nothing deduplicated: the archive stands alone), and has each directory's tree
//    built (TreeBuilder) once its subtree is done. Trees and blob locations go to a spool on
//    disk (ManifestSpool), as a backup's do.
// 4. The manifest member (streamed from the spool), then the archive is committed and the
//    snapshot recorded (Repository.commit), exactly as a backup commits.
// The snapshot is a full one, tagged "ios-backup", recording the backup's device UDID. An app
// that is installed gets its container id, version, bundle directory and seal; one that is
// not gets only its bundle id (and the version the backup names): the snapshot waits for it,
// and `restore` names the bundle to install. A group's snapshot records the group's container
// and team on this device. Files the manifest lists but the folder lacks are left out and
// make the snapshot incomplete; protection classes become each file's protection record.
//
// Invariants: all or nothing per subject: any refusal or error abandons the staged archive
// and records nothing; nothing is written outside the repository (Manifest.db is read into
// memory, never copied to disk); the backup folder is only read.

import AppboxArchive
import AppboxContainer
import AppboxCore
import AppboxPipeline
import AppboxPlist
import AppboxRepository
import Foundation
import Glibc

/// What a domain becomes on import.
public enum DeviceBackupSubject: Sendable {
  /// An app's domain; `installed` is the app when this device has it.
  case app(String, installed: AppRecord?)
  /// An app group's domain, for the group of that identifier on this device.
  case group(GroupRecord)

  var domain: DeviceBackupDomain {
    switch self {
    case .app(let identifier, _): return .app(identifier)
    case .group(let group): return .group(group.identifier)
    }
  }

  var name: String {
    switch self {
    case .app(let identifier, _): return identifier
    case .group(let group): return group.identifier
    }
  }
}

/// One app, group or extension domain of a backup, counted.
public struct DeviceBackupDomainSummary: Sendable, Equatable {
  public enum Kind: String, Sendable { case app, group, plugin }
  public var kind: Kind
  public var identifier: String
  /// Files and symlinks, directories, and the files' bytes.
  public var files: Int
  public var directories: Int
  public var bytes: Int64
}

/// What a backup holds.
public struct DeviceBackupListing: Sendable {
  public var domains: [DeviceBackupDomainSummary]
  /// Domains of the system (HomeDomain, …) and their rows: never imported.
  public var systemDomains: Int
  public var systemEntries: Int
}

/// What importing one domain made.
public struct DeviceBackupImportResult: Sendable {
  public var snapshot: Snapshot
  public var archivePath: String
  public var domain: String
  /// The app is not installed: the snapshot waits for its bundle.
  public var isWaiting: Bool
  /// Rows left out, by part of the container (Library/Caches, …).
  public var skipped: [ImportSkip]
}

extension DeviceBackup {
  /// The domains Manifest.db names (at most 100,000), as Swift values.
  public func domains() throws -> [String] {
    var names: [String] = []
    let statement = try database.prepare("SELECT DISTINCT domain FROM Files")
    while try statement.step() {
      names.append(String(decoding: statement.blob(0), as: UTF8.self))
      guard names.count <= 100_000 else {
        throw Self.refusal(path, "Manifest.db names more than 100,000 domains")
      }
    }
    return names.sorted()
  }

  /// The app, group and extension domains with their counts, after one scan of Manifest.db.
  public func listing() throws -> DeviceBackupListing {
    var summaries: [String: DeviceBackupDomainSummary] = [:]
    var systemDomains: Set<String> = []
    var systemEntries = 0
    let statement = try database.prepare("SELECT domain, flags, file FROM Files")
    do {
      while try statement.step() {
        let name = String(decoding: statement.blob(0), as: UTF8.self)
        let kind: DeviceBackupDomainSummary.Kind
        let identifier: String
        switch DeviceBackupDomain(name) {
        case .app(let id): (kind, identifier) = (.app, id)
        case .group(let id): (kind, identifier) = (.group, id)
        case .plugin(let id): (kind, identifier) = (.plugin, id)
        case .system:
          if systemDomains.count < 100_000 { systemDomains.insert(name) }
          systemEntries += 1
          continue
        }
        var summary =
          summaries[name]
          ?? DeviceBackupDomainSummary(kind: kind, identifier: identifier, files: 0, directories: 0, bytes: 0)
        switch statement.int64(1) {
        case DeviceBackupEntryKind.directory.rawValue:
          summary.directories += 1
        case DeviceBackupEntryKind.file.rawValue:
          summary.files += 1
          let record = try MBFileRecord.decode(statement.blob(2))
          summary.bytes += max(0, min(record.size, Int64.max - summary.bytes))
        default:
          summary.files += 1
        }
        summaries[name] = summary
        guard summaries.count <= 100_000 else {
          throw Self.refusal(path, "Manifest.db names more than 100,000 domains")
        }
      }
    } catch let error as PropertyListError {
      throw Self.refusal(path, "Manifest.db holds a damaged MBFile: \(error.description)")
    } catch let error as BackupError
      where error.code == .refusedArchive && !error.message.hasPrefix("Refused")
    {
      throw Self.refusal(path, "Manifest.db holds a damaged MBFile: \(error.message)")
    }
    let order: [DeviceBackupDomainSummary.Kind: Int] = [.app: 0, .group: 1, .plugin: 2]
    return DeviceBackupListing(
      domains: summaries.values.sorted {
        (order[$0.kind]!, $0.identifier) < (order[$1.kind]!, $1.identifier)
      },
      systemDomains: systemDomains.count, systemEntries: systemEntries)
  }
}

extension Repository {
  /// Makes `subject`'s domain of `backup` a snapshot (the caller holds the app's or group's
  /// lock on the device).
  public func importSnapshot(
    of subject: DeviceBackupSubject, from backup: DeviceBackup, in session: DeviceSession,
    limits: ImportLimits = ImportLimits(), observer: EngineObserver = SilentObserver()
  ) throws -> DeviceBackupImportResult {
    let subjectLock = try lockApp(subject.name)
    let repositoryLock = try lockForWriting()
    defer { withExtendedLifetime((subjectLock, repositoryLock)) {} }
    observer.engine(.started(operation: "import-backup", app: subject.name))
    let start = Date()
    observer.engine(.phase(.checking))
    observer.engine(.stage("plan"))
    let plan = try backup.plan(for: subject.domain, limits: limits, room: try roomForImport(), time: start)
    observer.engine(.planned(entries: plan.rowCount, files: plan.fileCount, bytes: plan.fileBytes))
    if !plan.skipped.isEmpty {
      observer.engine(
        .warning(
          path: nil,
          message: "\(subject.domain.name): left out what a snapshot does not keep: \(plan.skipped.summary)"))
    }

    let id = try newSnapshotID()
    // Named and written as a backup names and writes its archives (`<id>.tar.zst`, framed, by
    // default): the snapshot object is checked for the name.
    let compression = BackupOptions.defaultCompression
    let archiveName = id + compression.fileSuffix
    let staged = try stageArchive(archiveName)
    let writer = try ArchiveWriter(
      output: staged.output, compression: compression, name: archivePath(archiveName),
      framing: compression == .zstd ? FrameOptions.standard : nil)
    observer.engine(.phase(.archiving))
    let spool = try ManifestSpool(directory: splitPath(catalogPath).directory, archive: archiveName)
    let trees = TreeBuilder(catalog: catalog, bundleEntry: nil, sink: spool)
    let pool = BufferPool(count: 16, bufferSize: ContentReader.wholeReadLimit)
    let archiver = Archiver(
      writer: writer, catalog: catalog, archiveName: archiveName, deduplicate: false, full: true, pool: pool,
      observer: observer, time: start, blobs: spool, trees: trees)
    let queue = HandoffQueue<ContentMessage>(capacity: 16 << 20)
    let reader = try DeviceBackupContentReader(
      backup: backup, plan: plan, domain: subject.domain.name, queue: queue, pool: pool)
    let readerThread = WorkerThread(name: "appbox-read-backup") { try reader.run() }
    do {
      try archiver.run(queue)
    } catch {
      try? readerThread.join()
      throw error
    }
    try readerThread.join()

    observer.engine(.phase(.committing))
    guard let root = trees.root else {
      throw BackupError(.corruptCatalog, "The domain's root was not archived")
    }
    spool.chunks = archiver.chunkLocations
    spool.chunkLists = archiver.chunkLists.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
    let waiting: Bool
    var snapshot = Snapshot(
      id: id, app: subject.name, device: backup.deviceIdentifier, containerID: "", version: "",
      bundleDirectoryName: "", seal: "", time: start, kind: .full, tag: "ios-backup", parent: nil,
      rootTree: root, files: trees.files, bytes: trees.bytes, bytesAdded: archiver.bytesAdded,
      archive: archiveName,
      keychainOffset: nil, warnings: archiver.warnings.count, unreadable: archiver.unreadableCount,
      unreadablePaths: Snapshot.keptPaths(
        archiver.unreadable.map(\.path).sorted { $0.lexicographicallyPrecedes($1) }))
    switch subject {
    case .app(let identifier, let installed):
      if let installed {
        let described = BackupSubject.app(installed, in: session)
        snapshot.containerID = described.containerID
        snapshot.version = described.version
        snapshot.bundleDirectoryName = described.bundleDirectoryName
        snapshot.seal = described.seal
      } else {
        snapshot.version = backup.version(ofApp: identifier)
      }
      waiting = installed == nil
    case .group(let group):
      snapshot.containerID = group.containerID
      snapshot.team = group.teamIdentifier
      waiting = false
    }
    observer.engine(.stage("manifest"))
    spool.snapshot = snapshot
    if writer.isFramed {
      try writer.endFrame()
      spool.frames = writer.frameIndex
    }
    try writer.writeHeader(metadataMember(Manifest.memberPath, size: spool.encodedSize, time: start))
    try spool.encode { try writer.writeData($0) }
    try writer.finishEntry()
    try writer.finish()
    observer.engine(.stage("sync"))
    let stored = try staged.commit()
    let record = ArchiveRecord(
      name: archiveName, size: stored.size, checksum: stored.checksum, compression: compression,
      created: start)
    do {
      observer.engine(.stage("commit"))
      try commit(record: record, manifest: spool, snapshot: snapshot)
    } catch {
      if isLegacy { try? store.delete(["archives/" + archiveName]) }
      throw error
    }
    for warning in archiver.warnings {
      observer.engine(.warning(path: warning.path, message: warning.message))
    }
    for entry in archiver.unreadable.prefix(Snapshot.unreadablePathLimit) {
      observer.engine(.warning(path: display(entry.path), message: "not imported: \(entry.reason)"))
    }
    observer.engine(.finished(operation: "import-backup", app: subject.name))
    return DeviceBackupImportResult(
      snapshot: snapshot, archivePath: archivePath(archiveName), domain: subject.domain.name,
      isWaiting: waiting,
      skipped: plan.skipped.groups.map { ImportSkip(path: $0.name, members: $0.count) })
  }

  /// Free space for an import's archive: the local repository's less a reserve for its
  /// catalog and the rest of the device (64 MiB, or an eighth on a small file system);
  /// unbounded for an object store, which reports none.
  private func roomForImport() throws -> Int64 {
    guard case .directory = location else { return .max }
    let archives = try FileDescriptor.open(archivesPath, O_RDONLY | O_DIRECTORY)
    defer { archives.close() }
    let available = try archives.availableSpace()
    return max(0, available - min(64 << 20, available / 8))
  }
}

extension Repository {
  /// Refuses (66) to restore `snapshot` for an app this device lacks when the snapshot holds
  /// no bundle to install it from, as a snapshot imported from a device backup does: the
  /// message names the bundle to install first.
  func requireBundle(toInstallFrom snapshot: Snapshot) throws {
    if !snapshot.bundleDirectoryName.isEmpty,
      let entry = try catalog.tree(snapshot.rootTree).entry(named: Array(snapshot.bundleDirectoryName.utf8)),
      entry.type == .directory
    {
      return
    }
    let bundle = snapshot.bundleDirectoryName.isEmpty ? "" : " (\(snapshot.bundleDirectoryName))"
    let origin = snapshot.tag == "ios-backup" ? " (it was imported from a device backup)" : ""
    throw BackupError(
      .notFound,
      "\(snapshot.app) is not installed, and snapshot \(snapshot.id) holds no bundle to install it from\(origin): "
        + "install the bundle of \(snapshot.app)\(bundle) first ('appbox install <Name>.app'), then restore it"
    )
  }
}
