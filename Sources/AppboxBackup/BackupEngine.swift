// The backup pipeline: scan → change detection → archive → trees → catalog commit.
//
// Algorithm for one subject (an app's home or an app group's container: BackupSubject.swift):
// 1. Take the subject's writer lock and the repository lock (shared), removing debris first
//    when no one else writes.
// 2. Pick the parent: the subject's latest snapshot from this device (change detection trusts
//    inode numbers and ctimes only there), else its latest from anywhere (for the bundle).
// 3. Scan the directory with two workers, comparing with the parent's trees (Scanner).
//    An app's bundle is not scanned when a snapshot recorded the same seal: its entry is reused.
// 4. Archive what changed into `archives/.tmp-<id>.tar`: one thread reads and hashes
//    (ContentReader), this one writes (Archiver) and checksums the archive stream.
// 5. Build the trees bottom-up (TreeBuilder); add the keychain member if any, then the
//    manifest as the last member.
// 6. fsync the archive, rename it to `<id>.tar`, fsync the directory, and only then commit
//    the catalog rows (archive, new trees, new blobs, snapshot) in one transaction.
// Invariants: a crash before step 6's commit leaves only debris (a temp file or an archive
// the catalog does not name) that the next writer removes; every earlier snapshot is
// untouched. A full backup stores everything and deduplicates nothing, so its archive
// stands alone; an incremental one stores only content the repository lacks.

import AppboxArchive
import AppboxContainer
import AppboxCore
import AppboxCrypto
import Foundation
import Glibc

/// How to take a snapshot.
public struct BackupOptions: Sendable {
  /// Re-read and store all the data instead of only what changed (the bundle still follows
  /// its own rule: stored again only when its seal changed).
  public var full: Bool
  public var compression: ArchiveCompression
  /// A label recorded with the snapshot ("pre-update").
  public var tag: String?
  /// Exports the app's keychain items into the snapshot, when given.
  public var keychain: (any KeychainSnapshotting)?
  /// Tests: runs after each reading of a changed file (path, attempt).
  var afterRead: (@Sendable ([UInt8], Int) -> Void)?
  /// Tests: where content is hashed (true: the reader, false: the archiver); nil adapts.
  var hashOnReader: Bool?

  public init(
    full: Bool = false, compression: ArchiveCompression = .none, tag: String? = nil,
    keychain: (any KeychainSnapshotting)? = nil
  ) {
    self.full = full
    self.compression = compression
    self.tag = tag
    self.keychain = keychain
  }
}

/// What a backup made.
public struct BackupResult: Sendable {
  public var snapshot: Snapshot
  /// The archive's absolute path.
  public var archivePath: String
  /// Trees and blobs this snapshot added to the catalog.
  public var newTrees: Int
  public var newBlobs: Int
  public var warnings: [String]
}

extension Repository {
  /// Takes a snapshot of `app`'s home on the device of `session`.
  public func backup(
    _ app: AppRecord, in session: DeviceSession, options: BackupOptions = BackupOptions(),
    observer: EngineObserver = SilentObserver()
  ) throws -> BackupResult {
    try backup(.app(app, in: session), in: session, options: options, observer: observer)
  }

  /// Takes a snapshot of `subject` (an app's home, or an app group's container: the caller
  /// holds the group's lock) on the device of `session`.
  public func backup(
    _ subject: BackupSubject, in session: DeviceSession, options: BackupOptions = BackupOptions(),
    observer: EngineObserver = SilentObserver()
  ) throws -> BackupResult {
    let subjectLock = try lockApp(subject.name)
    let repositoryLock = try lockForWriting()
    defer { withExtendedLifetime((subjectLock, repositoryLock)) {} }
    observer.engine(.started(operation: "backup", app: subject.name))
    let result = try BackupRun(
      repository: self, subject: subject, session: session, options: options, observer: observer
    )
    .run()
    observer.engine(.finished(operation: "backup", app: subject.name))
    return result
  }
}

/// One backup, start to finish.
private struct BackupRun {
  let repository: Repository
  let subject: BackupSubject
  let session: DeviceSession
  let options: BackupOptions
  let observer: EngineObserver

  init(
    repository: Repository, subject: BackupSubject, session: DeviceSession, options: BackupOptions,
    observer: EngineObserver
  ) {
    self.repository = repository
    self.subject = subject
    self.session = session
    self.options = options
    self.observer = observer
  }

  func run() throws -> BackupResult {
    if let app = subject.app { try session.requireProtectedDataAvailable(of: app, for: "back up") }
    let catalog = repository.catalog
    let device = session.identity.udid
    let history = try catalog.snapshots(app: subject.name)
    let parent = options.full ? nil : (history.last { $0.device == device } ?? history.last)
    let detectChanges = parent?.device == device
    let bundleName = Array(subject.bundleDirectoryName.utf8)
    // The platform's rule: the bundle is stored on the app's first snapshot and again only
    // when its seal changes, not on every backup (not on a --full one either, which re-reads
    // and stores all the data).
    var bundleEntry: TreeEntry?
    if subject.hasBundle,
      let holder = history.last(where: {
        $0.seal == subject.seal && $0.bundleDirectoryName == subject.bundleDirectoryName
      }),
      let entry = try catalog.tree(holder.rootTree).entry(named: bundleName), entry.type == .directory
    {
      bundleEntry = entry
    }
    let start = Date()
    let home = try OwnedFileDescriptor.open(subject.path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)

    let rules = subject.scanRules(includeBundle: bundleEntry == nil)
    // The bundle is stored again after an update: its files' digests come from its seal, and
    // those the repository already holds are not read (most of a new version's files are).
    var sealed: [[UInt8]: Digest] = [:]
    if bundleEntry == nil, let app = subject.app,
      let digests = Seal.sealedDigests(bundleAt: session.home(of: app).bundlePath, expectedDigest: app.seal)
    {
      for (path, digest) in digests where try catalog.hasBlob(digest) || catalog.chunkList(digest) != nil {
        sealed[Array((app.bundleDirectoryName + "/" + path).utf8)] = digest
      }
    }
    let scanner = Scanner(
      home: home.borrowed, rules: rules, catalogPath: repository.catalogPath,
      previousRoot: detectChanges ? parent?.rootTree : nil,
      trustedBefore: parent.map { Int64($0.time.timeIntervalSince1970 * 1e9) } ?? 0, observer: observer)

    let id = try repository.newSnapshotID()
    let archiveName = id + options.compression.fileSuffix
    let archives = try OwnedFileDescriptor.open(repository.archivesPath, O_RDONLY | O_DIRECTORY)
    let staged = try StagedFile(
      archiveName, in: archives.borrowed, temporaryName: Repository.temporaryPrefix + archiveName, mode: 0o600
    )
    let written = try writeArchive(
      to: staged.descriptor, home: home.borrowed, scanner: scanner, name: archiveName, id: id, parent: parent,
      bundleEntry: bundleEntry, start: start, sealed: sealed)
    observer.engine(.stage("sync"))
    try staged.commit(flags: .noReplace) { CrashPoint.hit("backup.archive-synced") }
    CrashPoint.hit("backup.archive-renamed")
    do {
      observer.engine(.stage("commit"))
      try catalog.database.inTransaction {
        try catalog.insert(written.record)
        for tree in written.trees { try catalog.insertTree(tree, archive: archiveName) }
        try catalog.insertBlobs(written.blobs)
        try catalog.insertChunks(written.chunks)
        for (digest, list) in written.chunkLists {
          try catalog.insertChunkList(digest, list, archive: archiveName)
        }
        try catalog.insert(written.snapshot)
      }
    } catch {
      // Renamed but not recorded: the archive is debris; remove it now rather than later.
      try? archives.borrowed.remove(archiveName)
      throw error
    }
    CrashPoint.hit("backup.committed")
    for warning in written.warnings {
      observer.engine(.warning(path: warning.path, message: warning.message))
    }
    return BackupResult(
      snapshot: written.snapshot, archivePath: repository.archivePath(archiveName),
      newTrees: written.trees.count,
      newBlobs: written.blobs.count, warnings: written.warnings.map { "'\($0.path)' \($0.message)" })
  }

  private struct Written {
    var snapshot: Snapshot
    var record: ArchiveRecord
    var trees: [StoredTree]
    var blobs: [BlobLocation]
    var chunks: [ChunkLocation]
    var chunkLists: [(digest: Digest, list: ChunkList)]
    var warnings: [(path: String, message: String)]
  }

  /// Writes the whole archive to `file` and returns what the catalog will record.
  private func writeArchive(
    to file: FileDescriptor, home: FileDescriptor, scanner: Scanner, name: String, id: String,
    parent: Snapshot?,
    bundleEntry: TreeEntry?, start: Date, sealed: [[UInt8]: Digest]
  ) throws -> Written {
    nonisolated(unsafe) var checksum = CRC32C()
    nonisolated(unsafe) var size: Int64 = 0
    nonisolated(unsafe) var flushed: Int64 = 0
    let writer = try ArchiveWriter(
      fileDescriptor: file.rawValue, compression: options.compression, name: repository.archivePath(name),
      outputObserver: { block in
        checksum.update(block)
        // Start writeback of what is already written every 8 MiB, so the fsync before the
        // commit does not find the whole archive still in memory.
        if size - flushed >= 8 << 20 {
          file.startWriteback(offset: flushed, length: size - flushed)
          flushed = size
        }
        size += Int64(block.count)
      })
    let kind: SnapshotKind = parent == nil ? .full : .incremental
    let content = try archiveContent(
      writer: writer, home: home, scanner: scanner, name: name, kind: kind, bundleEntry: bundleEntry,
      start: start, sealed: sealed)
    var keychainOffset: Int64?
    if let keychain = options.keychain, let app = subject.app, let items = try keychain.exportItems(for: app)
    {
      keychainOffset = writer.uncompressedOffset
      try writer.writeHeader(metadataMember(Manifest.keychainMemberPath, size: items.count, time: start))
      try writer.writeData(items)
      try writer.finishEntry()
    }
    let blobs = content.blobs
    let trees = content.trees
    let snapshot = Snapshot(
      id: id, app: subject.name, device: session.identity.udid, containerID: subject.containerID,
      version: subject.version, bundleDirectoryName: subject.bundleDirectoryName, seal: subject.seal,
      time: start,
      kind: kind,
      tag: options.tag, parent: parent?.id, rootTree: trees.root, files: trees.files, bytes: trees.bytes,
      bytesAdded: content.bytesAdded, archive: name, keychainOffset: keychainOffset,
      warnings: content.warnings.count, unreadable: content.unreadableCount,
      unreadablePaths: Snapshot.keptPaths(content.unreadable.map(\.path)))
    observer.engine(.stage("manifest"))
    let manifest = Manifest(
      snapshot: snapshot, trees: trees.newTrees, blobs: blobs, chunks: content.chunks,
      chunkLists: content.chunkLists)
    try writer.writeHeader(metadataMember(Manifest.memberPath, size: manifest.encodedSize, time: start))
    try manifest.encode { try writer.writeData($0) }
    try writer.finishEntry()
    try writer.finish()
    let record = ArchiveRecord(
      name: name, size: size, checksum: checksum.value, compression: options.compression, created: start)
    return Written(
      snapshot: snapshot, record: record, trees: trees.newTrees, blobs: blobs, chunks: content.chunks,
      chunkLists: content.chunkLists, warnings: content.warnings)
  }

  /// What scanning and archiving produced, without the scan itself (which is large and
  /// released when this is returned).
  private struct ArchivedContent {
    var trees: TreeBuildResult
    var blobs: [BlobLocation]
    var chunks: [ChunkLocation]
    /// In digest order, so the manifest's bytes do not depend on hashing order.
    var chunkLists: [(digest: Digest, list: ChunkList)]
    var bytesAdded: Int64
    var warnings: [(path: String, message: String)]
    /// What could not be read, sorted by path (the first ones), and how many in all.
    var unreadable: [UnreadableEntry]
    var unreadableCount: Int
  }

  /// Scans the home, writes the new and changed content, and builds the trees.
  private func archiveContent(
    writer: ArchiveWriter, home: FileDescriptor, scanner: Scanner, name: String, kind: SnapshotKind,
    bundleEntry: TreeEntry?, start: Date, sealed: [[UInt8]: Digest]
  ) throws -> ArchivedContent {
    let plan = ArchivePlan(directories: try scanner.scan(), full: kind == .full)
    observer.engine(
      .planned(
        entries: plan.directories.reduce(0) { $0 + $1.entries.count }, files: plan.fileCount,
        bytes: plan.fileBytes))
    let pool = BufferPool(count: 16, bufferSize: ContentReader.wholeReadLimit)
    let archiver = Archiver(
      plan: plan, writer: writer, catalog: repository.catalog, archiveName: name,
      deduplicate: kind == .incremental,
      pool: pool, observer: observer, time: start)
    let queue = HandoffQueue<ContentMessage>(capacity: 16 << 20)
    let reader = ContentReader(
      home: home, plan: plan, queue: queue, pool: pool, afterRead: options.afterRead,
      hashOnReader: options.hashOnReader, protectionClasses: try session.protectionClassesByKey(),
      chunking: (options.compression == .none, kind == .incremental), sealed: sealed)
    let readerThread = WorkerThread(name: "appbox-read") { try reader.run() }
    do {
      try archiver.run(queue)
    } catch {
      try? readerThread.join()
      throw error
    }
    try readerThread.join()
    observer.engine(.stage("trees"))
    let trees = try TreeBuilder(
      plan: plan, results: archiver.results, catalog: repository.catalog, bundleEntry: bundleEntry
    ).build()
    return ArchivedContent(
      trees: trees, blobs: archiver.blobLocations(), chunks: archiver.chunkLocations,
      chunkLists: archiver.chunkLists.sorted { $0.key < $1.key }.map { ($0.key, $0.value) },
      bytesAdded: archiver.bytesAdded,
      warnings: scanner.warnings + archiver.warnings,
      unreadable: (scanner.unreadable + archiver.unreadable).sorted {
        $0.path.lexicographicallyPrecedes($1.path)
      },
      unreadableCount: scanner.unreadableCount + archiver.unreadableCount)
  }
}

/// A member for appbox's own data (`.appbox/...`), private to the owner.
func metadataMember(_ path: [UInt8], size: Int, time: Date) -> ArchiveEntry {
  let seconds = time.timeIntervalSince1970
  return ArchiveEntry.file(
    path, size: Int64(size), permissions: 0o600,
    modificationTime: ArchiveTimestamp(seconds: Int64(seconds), nanoseconds: 0))
}
