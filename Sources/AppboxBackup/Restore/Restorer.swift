// Restore, step 3: build a snapshot (its data, or its bundle) in an empty directory.
//
// Algorithm:
// 1. Plan from the trees (RestorePlan) and look up where each needed content lives.
// 2. Check that every archive needed (those holding content, and the snapshot's own) exists
//    with its recorded size; then start a thread that compares the CRC-32C of those that hold
//    no needed content (the content archives are checked file by file in step 3).
// 3. Create the directories, then read each archive once, in offset order (seeking straight
//    to the first member needed when it is uncompressed), and write every member's data to
//    all the files that have those bytes. Each chunk is handed to a hashing thread that
//    checks it against the digest the tree recorded.
// 4. Create empty files, hard links, FIFOs and symlinks; apply directory metadata deepest
//    first.
// 5. Wait for both checking threads. Any mismatch, missing member or short archive throws
//    `.corruptArchive` (exit 65).
// Invariants: nothing outside the target is touched (TreeWriter); the target holds a complete,
// verified copy when this returns, and unspecified partial content when it throws (callers
// build in a staging directory and discard it).

import AppboxArchive
import AppboxContainer
import AppboxCore
import AppboxPipeline
import AppboxCrypto
import AppboxRepository
import Foundation
import Glibc

/// Which part of a snapshot to build.
public enum SnapshotPart: Sendable {
  /// Everything but the bundle: Documents, Library, other top-level items.
  case data
  /// The bundle directory's contents.
  case bundle
}

/// What building a snapshot wrote.
public struct MaterializeReport: Sendable {
  public var files: Int
  public var bytes: Int64
  public var warnings: [String]
}

extension Repository {
  /// Builds `part` of `snapshot` in `directory`, which must be empty, verifying every byte.
  /// With `standardDirectories`, the home's standard directories the snapshot lacks
  /// (Library/Caches and tmp, always) are created empty, before directory times are set.
  /// With `protectingOn`, files the snapshot recorded as protected are created under their
  /// class on that device (see Protection+Backup.swift). Trees in `overlay` are read before
  /// the catalog's (Browse/PartialRestore.swift prunes the snapshot's trees this way).
  public func materialize(
    _ snapshot: Snapshot, part: SnapshotPart, into directory: FileDescriptor,
    standardDirectories: Bool = false, protectingOn session: DeviceSession? = nil, owner: UInt32? = nil,
    overlay: [Digest: [UInt8]] = [:], observer: EngineObserver = SilentObserver()
  ) throws -> MaterializeReport {
    try materialize(
      snapshot, part: part, into: directory, standardDirectories: standardDirectories, protectingOn: session,
      owner: owner, overlay: overlay, observer: observer, batchFiles: RestorePlanner.defaultBatchFiles)
  }

  /// `materialize` in batches of about `batchFiles` files (RestorePlanner; tests give small ones).
  func materialize(
    _ snapshot: Snapshot, part: SnapshotPart, into directory: FileDescriptor,
    standardDirectories: Bool, protectingOn session: DeviceSession?, owner: UInt32?,
    overlay: [Digest: [UInt8]], observer: EngineObserver, batchFiles: Int
  ) throws -> MaterializeReport {
    let bundleName = Array(snapshot.bundleDirectoryName.utf8)
    let root: Digest
    let skipping: Set<[UInt8]>
    switch part {
    case .data:
      root = snapshot.rootTree
      skipping = [bundleName]
    case .bundle:
      guard let entry = try catalog.tree(snapshot.rootTree).entry(named: bundleName),
        entry.type == .directory,
        let digest = entry.digest
      else { throw BackupError(.notFound, "Snapshot \(snapshot.id) holds no bundle") }
      root = digest
      skipping = []
    }
    observer.engine(.phase(.planning))
    observer.engine(.stage("plan"))
    let dataTopLevel = owner == nil ? [] : DataOwnership.dataDirectories
    func planner(batchFiles: Int) -> RestorePlanner {
      RestorePlanner(
        catalog: catalog, root: root, skippingTopLevel: skipping, dataTopLevel: dataTopLevel,
        overlay: overlay, batchFiles: batchFiles)
    }
    let batches = planner(batchFiles: batchFiles)
    var (plan, sources) = try catalog.reading { () throws -> (RestorePlan, ContentSources) in
      let plan = try batches.next() ?? RestorePlan()
      observer.engine(.stage("locate content"))
      return (plan, try contentSources(for: plan))
    }
    // The totals before anything is written: the first batch's, or when there are more,
    // those of a walk that counts (the trees read twice: a small part of such a restore).
    var totals = (
      entries: plan.files.count + plan.directories.count + plan.symlinks.count, files: plan.files.count,
      bytes: plan.totalBytes
    )
    if batches.hasMore {
      totals = (0, 0, 0)
      let counting = planner(batchFiles: batchFiles)
      try catalog.reading {
        while let batch = try counting.next() {
          totals.files += batch.files.count
          totals.bytes += batch.totalBytes
          totals.entries += batch.files.count + batch.symlinks.count
        }
        totals.entries += counting.directoryCount
      }
    }
    observer.engine(.planned(entries: totals.entries, files: totals.files, bytes: totals.bytes))
    var report = MaterializeReport(files: 0, bytes: 0, warnings: [])
    var protectedCount = 0
    var protectedFiles: ProtectedFileWriter?
    defer { protectedFiles?.close() }
    let writer = TreeWriter(target: directory, plan: plan)
    defer { writer.closeAll() }
    // Archives that hold content are verified by the per-file SHA-256 of everything taken
    // from them (a second whole-file pass would only re-read them); the others (the
    // snapshot's own, when it holds only the manifest and keychain items) get their CRC-32C.
    var readArchives: Set<String> = []
    var checked: [String: ArchiveRecord] = [:]
    let extractor = ContentExtractor(plan: plan, writer: writer, observer: observer)
    var filesBefore = 0
    var bytesBefore: Int64 = 0
    observer.engine(.phase(.writing))
    observer.engine(.stage("extract"))
    while true {
      for record in try checkPresence(of: sources.archives.filter { checked[$0] == nil }.sorted()) {
        checked[record.name] = record
      }
      readArchives.formUnion(sources.archives)
      report.warnings += plan.warnings
      let protection = try protectedFileWriter(for: plan, session: session, writer: protectedFiles)
      protectedFiles = protection.writer
      protectedCount += protection.unprotected
      writer.protectedFiles = protectedFiles
      writer.plan = plan
      extractor.begin(plan)
      for index in plan.newDirectories { try writer.makeDirectory(index) }
      let direct = try DirectExtractor(plan: plan, work: sources.direct, target: directory, owner: owner)
      try direct.run(workers: 2, protectedFiles: protectedFiles) { files, bytes in
        observer.engine(.progress(files: filesBefore + files, bytes: bytesBefore + bytes))
      }
      for (name, locations) in sources.streamed.sorted(by: { $0.key < $1.key }) {
        guard let record = checked[name] else { continue }
        try extractor.extract(from: openArchive(record), locations: locations)
      }
      for (index, item) in plan.files.enumerated() {
        if direct.written[index] { continue }
        if extractor.written[index] {
          if let owner, item.isData { try writer.handOver(item, to: owner) }
          continue
        }
        guard plan.sizes[index] == 0 else {
          throw BackupError(.corruptCatalog, "No content was found for '\(display(plan.path(of: item)))'")
        }
        let fd = try writer.createFile(item)
        try fd.closeAfter {
          if let owner, item.isData { try $0.setOwner(owner, owner) }
          try TreeWriter.applyMetadata(item, to: $0)
        }
      }
      for (item, primary) in plan.hardLinks { try writer.link(item, to: primary) }
      for item in plan.fifos {
        try writer.makeFIFO(item)
        if let owner, item.isData { try writer.handOver(item, to: owner) }
      }
      for item in plan.symlinks {
        try writer.makeSymlink(item)
        if let owner, item.isData { try writer.handOver(item, to: owner) }
      }
      report.files += plan.entryCount
      report.bytes += plan.totalBytes
      filesBefore += plan.files.count
      bytesBefore += plan.totalBytes
      observer.engine(.progress(files: filesBefore, bytes: bytesBefore))
      // The next batch; this one's plan and work are let go first.
      plan = RestorePlan()
      sources = ContentSources()
      guard
        let next = try catalog.reading({ () throws -> (RestorePlan, ContentSources)? in
          guard let plan = try batches.next() else { return nil }
          return (plan, try contentSources(for: plan))
        })
      else { break }
      (plan, sources) = next
    }
    if protectedCount > 0 {
      report.warnings.append(
        "\(protectedCount) file\(protectedCount == 1 ? " was" : "s were") protected when backed up; this device "
          + "has no passcode (or no file encryption), so they were restored unprotected")
    }
    var unreadNames: Set<String> = [snapshot.archive]
    unreadNames.subtract(readArchives)
    let unread = try checkPresence(of: unreadNames.sorted()).map { openArchive($0) }
    nonisolated(unsafe) let unreadSources = unread
    let verifier = WorkerThread(name: "appbox-verify-archives") {
      for source in unreadSources { try source.verifyChecksum() }
    }
    do {
      observer.engine(.phase(.verifying))
      observer.engine(.stage("verify"))
      try extractor.finish()
      observer.engine(.stage("links and times"))
      writer.closeAll()
      if standardDirectories {
        let added = try addStandardDirectories(in: directory)
        if let owner { for path in added { try writer.handOver(path: Array(path.utf8), to: owner) } }
        writer.closeAll()
      }
      try writer.finishDirectories(owner: owner)
    } catch {
      try? verifier.join()
      throw error
    }
    try verifier.join()
    return report
  }

  /// Where the contents a plan needs are stored: read in place (uncompressed and framed
  /// archives with recorded data offsets, and chunks), or streamed member by member through
  /// libarchive.
  private struct ContentSources {
    var direct = DirectWork()
    var streamed: [String: [BlobLocation]] = [:]
    /// Every archive holding needed content.
    var archives: Set<String> = []
  }

  /// Finds every needed content: a blob, or a chunk list whose chunks all have locations.
  private func contentSources(for plan: RestorePlan) throws -> ContentSources {
    var sources = ContentSources()
    let ordered = try catalog.archives()
    let records = Dictionary(ordered.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
    let rank = Dictionary(ordered.enumerated().map { ($1.name, $0) }, uniquingKeysWith: { first, _ in first })
    var archiveIndex: [String: Int32] = [:]
    /// Whether each archive (by name) can be read in place, with its frame index when framed.
    var inPlace: [String: FrameIndex??] = [:]
    func layout(_ name: String) throws -> FrameIndex?? {
      if let known = inPlace[name] { return known }
      var found: FrameIndex?? = nil
      if readsDirectly, let record = records[name] {
        let frames = try frameIndex(of: record)
        if record.compression == .none || frames != nil { found = .some(frames) }
      }
      inPlace[name] = found
      return found
    }
    func index(_ name: String) throws -> Int32 {
      if let known = archiveIndex[name] { return known }
      let next = Int32(sources.direct.archives.count)
      archiveIndex[name] = next
      guard let record = records[name], case .some(let frames) = try layout(name) else {
        throw BackupError(.corruptCatalog, "The catalog does not know archive '\(name)'")
      }
      sources.direct.archives.append(
        DirectWork.Archive(path: archivePath(name), record: record, frames: frames))
      return next
    }
    // Where each content's copy is. Restoring most of what the repository holds, one pass over
    // the blobs is cheaper than a lookup per content; otherwise look each up, in digest order
    // (the lookups then walk the B-tree from one end to the other). Either way each position
    // goes straight into the work (no table of positions by digest: a million of them would
    // cost more than the plan), and only which contents were found is kept, by first file.
    var found = [Bool](repeating: false, count: plan.files.count)
    func place(_ digest: Digest, first: Int32, archive: String, size: Int64, dataOffset: Int64?) throws {
      found[Int(first)] = true
      sources.archives.insert(archive)
      // A sparse identity is verified from the member's map (its holes are not hashed).
      if let dataOffset, !plan.hasSparseIdentity(digest), try layout(archive) != nil {
        sources.direct.blobs.append(
          DirectWork.Blob(digest: digest, archive: try index(archive), dataOffset: dataOffset, size: size))
      } else if let location = try catalog.blob(digest) {
        sources.streamed[location.archive, default: []].append(location)
      }
    }
    if plan.contentCount * 4 >= (try catalog.count("blobs")) {
      try catalog.forEachBlobPosition { digest, archive, _, size, dataOffset in
        if let first = plan.firstFile(withContent: digest), !found[Int(first)] {
          try place(digest, first: first, archive: archive, size: size, dataOffset: dataOffset)
        }
      }
    } else {
      for (digest, first) in plan.contentsByDigest {
        if let position = try catalog.blobPosition(digest) {
          try place(
            digest, first: first, archive: position.archive, size: position.size,
            dataOffset: position.dataOffset)
        }
      }
    }
    for (digest, first) in plan.contents where !found[Int(first)] {
      let path = plan.path(of: plan.files[Int(first)])
      let size = plan.sizes[Int(first)]
      guard let list = try catalog.chunkList(digest, size: size) else {
        throw BackupError(
          .corruptCatalog, "The catalog has no archive holding the content of '\(display(path))'")
      }
      guard readsDirectly else {
        throw BackupError(
          .corruptArchive,
          "'\(display(path))' is stored as chunks, which only a local unencrypted repository holds")
      }
      var chunks: [(archive: Int32, dataOffset: Int64, size: Int64)] = []
      for chunk in list.chunks {
        guard let location = try catalog.chunk(chunk.digest), location.size == chunk.size,
          try layout(location.archive) != nil
        else {
          throw BackupError(
            .corruptCatalog,
            "The catalog has no archive holding chunk \(chunk.digest.hex.prefix(16)) of '\(display(path))'")
        }
        sources.archives.insert(location.archive)
        chunks.append((try index(location.archive), location.dataOffset, location.size))
      }
      sources.direct.chunked.append(DirectWork.Chunked(digest: digest, size: size, chunks: chunks))
    }
    // Oldest archive first, each from start to end (one integer key each: rank, then offset).
    let archiveRank = sources.direct.archives.map { Int64(rank[$0.record.name] ?? 0) << 48 }
    sources.direct.blobs.sort {
      archiveRank[Int($0.archive)] | $0.dataOffset < archiveRank[Int($1.archive)] | $1.dataOffset
    }
    return sources
  }

}

/// Creates the home's standard directories that `directory` lacks (a symlink or file in
/// their place is left alone: the snapshot recorded it so). Returns those it created.
@discardableResult
func addStandardDirectories(in directory: FileDescriptor) throws -> [String] {
  var added: [String] = []
  for path in Home.standardDirectories {
    let parent = TreeWriter.split(Array(path.utf8)).parent
    guard
      let parentStatus = parent.isEmpty ? try directory.status() : try directory.status(ofRawName: parent),
      parentStatus.type == .directory, try directory.status(ofRawName: Array(path.utf8)) == nil
    else { continue }
    try directory.makeDirectory(path, mode: 0o755)
    added.append(path)
  }
  return added
}
