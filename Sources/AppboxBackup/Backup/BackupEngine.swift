// The backup pipeline: scan → change detection → archive → trees → catalog commit.
//
// Algorithm for one subject (an app's home or an app group's container: BackupSubject.swift):
// 1. Take the subject's writer lock and the repository lock (shared), removing debris first
//    when no one else writes (local repositories; an S3 repository's writers take no lock).
// 2. Pick the parent: the subject's latest snapshot from this device (change detection trusts
//    inode numbers and ctimes only there), else its latest from anywhere (for the bundle).
// 3. Scan the directory with two workers, comparing with the parent's trees (Scanner), a
//    little ahead of step 4, which takes the directories one at a time in depth-first order.
//    An app's bundle is not scanned when a snapshot recorded the same seal: its entry is reused.
// 4. Archive what changed into a staged archive (Repository.stageArchive: a temp file, or a
//    multipart upload; sealed when the repository is encrypted): one thread walks the scan and
//    reads and hashes (ContentReader), this one writes (Archiver) and builds each directory's
//    tree once its subtree is done (TreeBuilder), then releases it. New trees and blob
//    locations go to a spool on disk (ManifestSpool), so memory follows the largest directory,
//    not the number of files. Then the keychain member if any, then the manifest (streamed
//    from the spool) as the last member.
// 6. Commit the archive (fsync and rename, or complete the upload), then the snapshot object,
//    the manifest object (the commit point), and the catalog rows (Repository.commit). On a
//    shared store, a backup that ran longer than half the grace period first checks that no
//    archive it reuses content from has been marked for deletion meanwhile; if one has, it
//    leaves its archive as debris and runs once more, reusing nothing marked.
// Invariants: a crash before the manifest object leaves only debris (a temp file, an archive
// or snapshot object without a manifest) that the next writer (or S3 forget) removes; every
// earlier snapshot is untouched. A full backup stores everything and deduplicates nothing, so its archive
// stands alone; an incremental one stores only content the repository lacks.

import AppboxArchive
import AppboxContainer
import AppboxCore
import AppboxPipeline
import AppboxCrypto
import AppboxRepository
import Foundation
import Glibc
import Synchronization

/// How to take a snapshot.
public struct BackupOptions: Sendable {
  /// Re-read and store all the data instead of only what changed (the bundle still follows
  /// its own rule: stored again only when its seal changed).
  public var full: Bool
  /// `.zstd` writes a framed archive (compressed per content, read in place like an
  /// uncompressed one); `.gzip` compresses it as one stream (read from its start).
  public var compression: ArchiveCompression
  /// How a framed archive is cut and compressed (measuring other choices); nil with `.zstd`
  /// writes one zstd stream, as appbox did before frames (tests of such archives).
  package var framing: FrameOptions? = .standard
  /// A label recorded with the snapshot ("pre-update").
  public var tag: String?
  /// Exports the app's keychain items into the snapshot, when given.
  public var keychain: (any KeychainSnapshotting)?
  /// Tests: runs after each reading of a changed file (path, attempt).
  var afterRead: (@Sendable ([UInt8], Int) -> Void)?
  /// Tests: where content is hashed (true: the reader, false: the archiver); nil adapts.
  var hashOnReader: Bool?
  /// Tests: give files with holes the plain identity, as appbox did before the sparse one
  /// (a repository written then, to read back).
  var plainSparseIdentity = false

  /// What `backup` writes unless told otherwise (docs/performance.md, "Bytes per incremental").
  public static let defaultCompression = ArchiveCompression.zstd

  public init(
    full: Bool = false, compression: ArchiveCompression = BackupOptions.defaultCompression,
    tag: String? = nil,
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
    let result: BackupResult
    do {
      result = try BackupRun(
        repository: self, subject: subject, session: session, options: options, observer: observer
      )
      .run()
    } catch let error as ReusedContentMarked {
      // A forget marked content this backup reused: once more, from a fresh view.
      observer.engine(.warning(path: "", message: error.description))
      try self.sync()
      result = try BackupRun(
        repository: self, subject: subject, session: session, options: options, observer: observer
      )
      .run()
    }
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

  /// What the archive is about to need: the bytes of the files to read, plus room for the
  /// catalog (a full disk says how much was wanted).
  private let needed = NeededSpace()

  func run() throws -> BackupResult {
    do {
      return try backUp()
    } catch {
      throw NoSpaceError.from(error, path: repository.path, needed: needed.bytes) ?? error
    }
  }

  private func backUp() throws -> BackupResult {
    let startedAt = ContinuousClock.now
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
    let staged = try repository.stageArchive(archiveName)
    var written = try writeArchive(
      to: staged.output, home: home.borrowed, scanner: scanner, name: archiveName, id: id, parent: parent,
      bundleEntry: bundleEntry, start: start, sealed: sealed)
    observer.engine(.stage("sync"))
    let stored = try staged.commit { CrashPoint.hit("backup.archive-synced") }
    written.record.size = stored.size
    written.record.checksum = stored.checksum
    CrashPoint.hit("backup.archive-renamed")
    if repository.store.isShared, startedAt.duration(to: .now) > .seconds(repository.pruneGrace / 2) {
      observer.engine(.stage("re-check"))
      try repository.checkReusedContent(of: written.snapshot, manifest: written.manifest)
    }
    do {
      observer.engine(.stage("commit"))
      try repository.commit(
        record: written.record, manifest: written.manifest, snapshot: written.snapshot, crashPoints: true)
    } catch {
      // Renamed but not recorded (layout 1): the archive is debris; remove it now rather than later.
      if repository.isLegacy { try? repository.store.delete(["archives/" + archiveName]) }
      throw error
    }
    CrashPoint.hit("backup.committed")
    // The catalog's commits are not synced (a cache of the objects): a checkpoint that fails
    // is a write that did not reach the disk, and fails the backup here, before anything
    // (an update) builds on it.
    try repository.catalog.database.checkpoint()
    for warning in written.warnings {
      observer.engine(.warning(path: warning.path, message: warning.message))
    }
    return BackupResult(
      snapshot: written.snapshot, archivePath: repository.archivePath(archiveName),
      newTrees: written.manifest.treeCount,
      newBlobs: written.manifest.blobCount, warnings: written.warnings.map { "'\($0.path)' \($0.message)" })
  }

  private struct Written {
    var snapshot: Snapshot
    /// Size and checksum are the stored archive's, filled in once it is committed.
    var record: ArchiveRecord
    var manifest: ManifestSpool
    var warnings: [(path: String, message: String)]
  }

  /// Writes the whole archive to `output` and returns what the catalog will record.
  private func writeArchive(
    to output: ArchiveOutput, home: FileDescriptor, scanner: Scanner, name: String, id: String,
    parent: Snapshot?,
    bundleEntry: TreeEntry?, start: Date, sealed: [[UInt8]: Digest]
  ) throws -> Written {
    let writer = try ArchiveWriter(
      output: output, compression: options.compression, name: repository.archivePath(name),
      framing: options.compression == .zstd ? options.framing : nil)
    let kind: SnapshotKind = parent == nil ? .full : .incremental
    let content = try archiveContent(
      writer: writer, home: home, scanner: scanner, name: name, kind: kind, bundleEntry: bundleEntry,
      start: start, sealed: sealed)
    var keychainOffset: Int64?
    if let keychain = options.keychain, let app = subject.app,
      let items = try keychain.exportItems(for: app, portableKey: repository.key?.keychainKey)
    {
      keychainOffset = writer.uncompressedOffset
      try writer.writeHeader(metadataMember(Manifest.keychainMemberPath, size: items.count, time: start))
      try writer.writeData(items)
      try writer.finishEntry()
    }
    let snapshot = Snapshot(
      id: id, app: subject.name, device: session.identity.udid, containerID: subject.containerID,
      version: subject.version, bundleDirectoryName: subject.bundleDirectoryName, seal: subject.seal,
      time: start,
      kind: kind,
      tag: options.tag, parent: parent?.id, rootTree: content.root, files: content.files,
      bytes: content.bytes,
      bytesAdded: content.bytesAdded, archive: name, keychainOffset: keychainOffset,
      warnings: content.warnings.count, unreadable: content.unreadableCount,
      unreadablePaths: Snapshot.keptPaths(content.unreadable.map(\.path)), team: subject.team,
      torn: content.tornCount,
      tornPaths: Snapshot.keptPaths(content.torn.sorted { $0.lexicographicallyPrecedes($1) }))
    observer.engine(.stage("manifest"))
    let manifest = content.manifest
    manifest.snapshot = snapshot
    if writer.isFramed {
      // The manifest starts a frame: everything before it is in the index it carries.
      try writer.endFrame()
      manifest.frames = writer.frameIndex
    }
    try writer.writeHeader(metadataMember(Manifest.memberPath, size: manifest.encodedSize, time: start))
    try manifest.encode { try writer.writeData($0) }
    try writer.finishEntry()
    try writer.finish()
    let record = ArchiveRecord(
      name: name, size: 0, checksum: 0, compression: options.compression, created: start)
    return Written(snapshot: snapshot, record: record, manifest: manifest, warnings: content.warnings)
  }

  /// What scanning and archiving produced.
  private struct ArchivedContent {
    var root: Digest
    var files: Int
    var bytes: Int64
    /// The new trees and blob locations (on disk), with the chunks and chunk lists (in digest
    /// order, so the manifest's bytes do not depend on hashing order).
    var manifest: ManifestSpool
    var bytesAdded: Int64
    var warnings: [(path: String, message: String)]
    /// What could not be read, sorted by path (the first ones), and how many in all.
    var unreadable: [UnreadableEntry]
    var unreadableCount: Int
    /// What kept changing while it was read (the first paths), and how many in all.
    var torn: [[UInt8]]
    var tornCount: Int
  }

  /// Scans the home, writes the new and changed content, and builds the trees.
  private func archiveContent(
    writer: ArchiveWriter, home: FileDescriptor, scanner: Scanner, name: String, kind: SnapshotKind,
    bundleEntry: TreeEntry?, start: Date, sealed: [[UInt8]: Digest]
  ) throws -> ArchivedContent {
    observer.engine(.phase(.scanning))
    let spool = try ManifestSpool(directory: splitPath(repository.catalogPath).directory, archive: name)
    let trees = TreeBuilder(catalog: repository.catalog, bundleEntry: bundleEntry, sink: spool)
    let pool = BufferPool(count: 16, bufferSize: ContentReader.wholeReadLimit)
    let archiver = Archiver(
      writer: writer, catalog: repository.catalog, archiveName: name, deduplicate: kind == .incremental,
      full: kind == .full, pool: pool, observer: observer, time: start, blobs: spool, trees: trees,
      earlierVersion: { [repository] in try repository.earlierVersion(ofContent: $0, size: $1) })
    let queue = HandoffQueue<ContentMessage>(capacity: 16 << 20)
    // Tests: `APPBOX_PAUSE_AT=backup.file-read` stops the process after each reading of a
    // file, before it is checked for changes (a test rewrites it there: a torn file).
    let hook = options.afterRead
    let afterRead: (@Sendable ([UInt8], Int) -> Void)? =
      CrashPoint.isArmed("backup.file-read")
      ? { @Sendable path, attempt in
        hook?(path, attempt)
        CrashPoint.hit("backup.file-read")
      } : hook
    // Chunks are read where they lie: only archives read in place (uncompressed, or framed) hold them.
    let readsInPlace =
      options.compression == .none || (options.compression == .zstd && options.framing != nil)
    let reader = ContentReader(
      scanner: scanner, queue: queue, pool: pool, afterRead: afterRead,
      hashOnReader: options.hashOnReader, protectionClasses: try session.protectionClassesByKey(),
      chunking: (readsInPlace && repository.readsDirectly, kind == .incremental),
      sealed: sealed, plainSparseIdentity: options.plainSparseIdentity)
    let readerThread = WorkerThread(name: "appbox-read") { try reader.run() }
    do {
      try archiver.run(queue)
    } catch {
      needed.bytes = archiver.neededBytes + (1 << 20)
      try? readerThread.join()
      throw error
    }
    needed.bytes = archiver.neededBytes + (1 << 20)
    try readerThread.join()
    observer.engine(.phase(.committing))
    guard let root = trees.root else { throw BackupError(.corruptCatalog, "The home itself was not scanned") }
    spool.chunks = archiver.chunkLocations
    spool.foreignChunks = archiver.foreignChunkLocations
    spool.chunkLists = archiver.chunkLists.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
    return ArchivedContent(
      root: root, files: trees.files, bytes: trees.bytes, manifest: spool, bytesAdded: archiver.bytesAdded,
      warnings: scanner.warnings + archiver.warnings,
      unreadable: (scanner.unreadable + archiver.unreadable).sorted {
        $0.path.lexicographicallyPrecedes($1.path)
      },
      unreadableCount: scanner.unreadableCount + archiver.unreadableCount, torn: archiver.torn,
      tornCount: archiver.tornCount)
  }
}

/// A backup's estimate of the space it needs, set once its archive is written (or fails).
private final class NeededSpace: Sendable {
  private let value = Mutex<Int64>(1 << 20)
  var bytes: Int64 {
    get { value.withLock { $0 } }
    set { value.withLock { $0 = newValue } }
  }
}
