// `check`: verify the repository, catalog against archives.
//
// Algorithm: under the shared repository lock,
// 1. every archive the catalog names must exist with its recorded size; one thread reads
//    each whole and compares its CRC-32C (in parallel with step 2);
// 2. from every snapshot's root, every reachable tree must be present (a delta's chain too),
//    decode, and hash to its digest, and every non-empty file content it names must have a
//    blob location, or a chunk list whose chunks all have locations; the snapshot's archive
//    must be known (problems listed after those of step 3);
// 3. each archive's headers are read in order (data skipped by seeking, or hashed with
//    `readData`): every blob location in it must be the start of a regular member with the
//    recorded path and size, and with `readData` its content identity must be the digest (a
//    sparse identity, which the trees of step 2 name, is computed from the member's data map
//    and data, its holes never read; ContentIdentity.swift);
//    A framed archive is read whole (no data is skipped unread): every frame must be one whole
//    zstd frame decoding to its recorded length, the frames tile the stream from its start to
//    where the manifest member begins, and the frames after them decode;
// 4. every chunk location must lie inside its (uncompressed or framed) archive, and with
//    `readData` its bytes must hash to the chunk's digest (Checker+Chunks.swift);
// 5. every manifest and snapshot object is read as the store holds it (never this device's
//    cached copy) and decoded; each damaged one is named with the snapshots that need it
//    (Repository/RepositoryDamage.swift).
// Problems are collected, not thrown: the caller lists them (exit 65). Files in archives/
// the catalog does not name are debris from an interrupted writer, reported as notes.
// On S3, steps 1 and 2 read every archive whole, so they run with --read-data only; without it
// the archives' presence and sizes are checked from a listing (and the trees as always).

import AppboxArchive
import AppboxCore
import AppboxPipeline
import AppboxCrypto
import Glibc
import Synchronization

/// What `check` found.
public struct CheckReport: Sendable {
  public var snapshots = 0
  public var archives = 0
  public var trees = 0
  public var blobs = 0
  /// Bytes of file content hashed (with readData).
  public var bytesVerified: Int64 = 0
  public var problems: [String] = []
  public var notes: [String] = []
  public var isClean: Bool { problems.isEmpty }
}

extension Repository {
  /// Verifies the repository; with `readData`, every stored file's SHA-256 too.
  public func check(readData: Bool = false, observer: EngineObserver = SilentObserver()) throws -> CheckReport
  {
    let lock = try lockRepository(exclusive: false)
    defer { withExtendedLifetime(lock) {} }
    observer.engine(.started(operation: "check", app: nil))
    observer.engine(.phase(.verifying))
    var report = CheckReport()
    let records = try catalog.archives()
    let snapshots = try catalog.snapshots()
    report.archives = records.count
    report.snapshots = snapshots.count
    for name in try unknownArchiveFiles() {
      report.notes.append(
        "'\(name)' in archives/ is debris of an interrupted command; the next backup removes it")
    }
    if store.isShared {
      let committed = Set(try store.list("manifests").map(\.name))
      let marked = Set(try store.list("garbage").map(\.name))
      for object in try store.list("archives")
      where !committed.contains(object.name) && !marked.contains(object.name) {
        report.notes.append(
          "'\(object.name)' in archives/ was never committed (a backup in progress, or interrupted); forget removes it"
        )
      }
      if !marked.isEmpty {
        report.notes.append(
          "\(marked.count) archives are marked for deletion; forget deletes them after the grace period")
      }
    }
    let readArchives = readData || local != nil
    var present: [ArchiveRecord] = []
    for record in records {
      do {
        present += try checkPresence(of: [record.name])
      } catch let error as RepositoryError {
        report.problems.append(error.message)
      }
    }
    let checksumProblems = ProblemList()
    nonisolated(unsafe) let sources = readArchives ? present.map { openArchive($0) } : []
    let checksums = WorkerThread(name: "appbox-check-archives") {
      for source in sources {
        do {
          try source.verifyChecksum()
        } catch let error as RepositoryError {
          checksumProblems.add(error.message)
        } catch {
          checksumProblems.add("Archive '\(source.location)' cannot be read: \(error)")
        }
      }
    }
    // Blob locations are read archive by archive as each is checked, never all at once (a
    // million files' worth would be some 300 MB); the digests alone, sorted, for the trees.
    report.blobs = try catalog.count("blobs")
    let known = Set(records.map(\.name))
    let perArchive = try catalog.database.all("SELECT archive, count(*) FROM blobs GROUP BY archive") {
      ($0.text(0) ?? "", Int($0.int64(1)))
    }
    for (archive, count) in perArchive where !known.contains(archive) {
      report.problems.append("\(count) blob locations name archive '\(archive)', which the catalog lacks")
    }
    let chunks = try catalog.chunks()
    let contents = ContentIndex(blobs: try SortedDigests(catalog), chunks: Set(chunks.map(\.digest)))
    // The trees first: they say which contents have a sparse identity.
    var checkedTrees: Set<Digest> = []
    var sparse: Set<Digest> = []
    var treeProblems: [String] = []
    try catalog.reading {
      for snapshot in snapshots {
        if !known.contains(snapshot.archive) {
          treeProblems.append(
            "Snapshot \(snapshot.id) names archive '\(snapshot.archive)', which the catalog lacks")
        }
        treeProblems += try checkTrees(
          from: snapshot, contents: contents, checked: &checkedTrees, sparse: &sparse)
      }
    }
    for record in present where readArchives {
      let (problems, verified) = checkMembers(of: record, readData: readData, sparse: sparse)
      report.problems += problems
      report.bytesVerified += verified
    }
    report.problems += checkChunks(
      chunks, records: records, readData: readData, verified: &report.bytesVerified)
    report.problems += treeProblems
    report.trees = checkedTrees.count
    // Every manifest and snapshot object as the store holds it (not this device's copy).
    report.problems += try checkObjects().problems
    for snapshot in damage.unlisted {
      report.problems.append(
        "Snapshot \(snapshot.id) of \(snapshot.app) cannot be restored: the manifest of its archive "
          + "'\(snapshot.archive)' is damaged")
    }
    try checksums.join()
    report.problems += checksumProblems.all
    observer.engine(.finished(operation: "check", app: nil))
    return report
  }

  /// Checks the blob locations of `record` against its members: both in offset order, walked
  /// together (the rows one at a time from the catalog, the members as the archive is read).
  private func checkMembers(of record: ArchiveRecord, readData: Bool, sparse: Set<Digest>)
    -> (problems: [String], verified: Int64)
  {
    var problems: [String] = []
    var missing: [String] = []
    var verified: Int64 = 0
    do {
      let rows = try catalog.database.prepare(
        "SELECT digest, offset, path, size, data_offset FROM blobs WHERE archive = ?1 ORDER BY offset")
      try rows.bind(record.name, at: 1)
      func nextRow() throws -> BlobLocation? {
        guard try rows.step() else { return nil }
        return BlobLocation(
          digest: Digest(validating: rows.blob(0)) ?? Digest(bytes: [UInt8](repeating: 0, count: 32)),
          archive: record.name, offset: rows.int64(1), path: rows.blob(2), size: rows.int64(3),
          dataOffset: rows.isNull(4) ? nil : rows.int64(4))
      }
      var expected = try nextRow()
      let frames = try frameIndex(of: record)
      let reader = try openArchive(record).reader(verifyingFrames: true)
      let hasher = SHA256Hasher()
      let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
      defer { buffer.deallocate() }
      var manifestOffset: Int64?
      // A framed archive is read to its end: every frame is checked on the way.
      while expected != nil || frames != nil, let entry = try reader.nextEntry() {
        guard let offset = reader.headerOffset else { continue }
        if entry.path == Manifest.memberPath { manifestOffset = offset }
        while let location = expected, location.offset < offset {
          missing.append(
            "Archive '\(record.name)' has no member '\(display(location.path))' at offset \(location.offset)")
          expected = try nextRow()
        }
        guard let location = expected, location.offset == offset else { continue }
        // A second row at the same offset is the same member (as when rows were keyed by offset).
        repeat { expected = try nextRow() } while expected?.offset == offset
        guard entry.type == .regular, entry.path == location.path, entry.size == location.size else {
          problems.append(
            "Archive '\(record.name)': the member at offset \(offset) is not '\(display(location.path))'")
          continue
        }
        guard readData else { continue }
        // A sparse identity from the member's runs at their offsets; a plain one from every
        // byte, holes read as zeros (as an older appbox recorded them for sparse members too).
        let identity = ContentHasher(
          sparse: sparse.contains(location.digest), size: location.size, hasher: hasher)
        if identity.isSparse {
          while let chunk = try reader.readChunk(into: buffer) {
            identity.update(UnsafeRawBufferPointer(rebasing: buffer[0..<chunk.count]), at: chunk.offset)
          }
          verified += identity.dataBytes
        } else {
          var position: Int64 = 0
          while true {
            let count = try reader.readData(into: buffer)
            if count == 0 { break }
            identity.update(UnsafeRawBufferPointer(rebasing: buffer[0..<count]), at: position)
            position += Int64(count)
          }
          verified += position
        }
        if identity.finalize() != location.digest {
          problems.append(
            "Archive '\(record.name)': the content of '\(display(location.path))' does not match its SHA-256")
        }
      }
      for warning in reader.warnings { problems.append("Archive '\(record.name)' is damaged: \(warning)") }
      if let frames, manifestOffset != frames.uncompressedEnd {
        problems.append(
          "Archive '\(record.name)' is damaged: its frame index ends at offset \(frames.uncompressedEnd), "
            + "not where its manifest begins (\(manifestOffset.map(String.init) ?? "none found"))")
      }
      while let location = expected {
        missing.append(
          "Archive '\(record.name)' has no member '\(display(location.path))' at offset \(location.offset)")
        expected = try nextRow()
      }
    } catch {
      problems.append("Archive '\(record.name)' cannot be read: \(error)")
    }
    return (problems + missing, verified)
  }

  private func checkTrees(
    from snapshot: Snapshot, contents: ContentIndex, checked: inout Set<Digest>, sparse: inout Set<Digest>
  ) throws
    -> [String]
  {
    var problems: [String] = []
    var stack: [(Digest, [UInt8])] = [(snapshot.rootTree, [])]
    while let (digest, path) = stack.popLast() {
      guard checked.insert(digest).inserted else { continue }
      let data: [UInt8]?
      do {
        data = try catalog.treeData(digest)
      } catch {
        problems.append(
          "Snapshot \(snapshot.id): the tree of '\(path.isEmpty ? "." : display(path))' is damaged: \(error)")
        continue
      }
      guard let data else {
        problems.append(
          "Snapshot \(snapshot.id): the tree of '\(path.isEmpty ? "." : display(path))' is missing")
        continue
      }
      guard SHA256.hash(data) == digest, let tree = try? Tree.decode(data) else {
        problems.append(
          "Snapshot \(snapshot.id): the tree of '\(path.isEmpty ? "." : display(path))' is damaged")
        continue
      }
      for entry in tree.entries where !entry.isExcluded {
        if entry.hasSparseIdentity, let content = entry.digest { sparse.insert(content) }
        if entry.type == .directory, let child = entry.digest {
          stack.append((child, joinPath(path, entry.name)))
        }
        if entry.type == .file, entry.size > 0, let content = entry.digest, !contents.blobs.contains(content),
          let problem = try checkChunked(content, size: entry.size, contents: contents)
        {
          problems.append("Snapshot \(snapshot.id): '\(display(joinPath(path, entry.name)))': \(problem)")
        }
      }
    }
    return problems
  }
}

/// Problems found on another thread.
final class ProblemList: Sendable {
  private let items = Mutex<[String]>([])
  func add(_ problem: String) { items.withLock { $0.append(problem) } }
  var all: [String] { items.withLock { $0 } }
}
