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
import AppboxCrypto
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
  /// class on that device (see Protection+Backup.swift).
  public func materialize(
    _ snapshot: Snapshot, part: SnapshotPart, into directory: FileDescriptor,
    standardDirectories: Bool = false, protectingOn session: DeviceSession? = nil,
    observer: EngineObserver = SilentObserver()
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
      else { throw BackupError(.snapshotNotFound, "Snapshot \(snapshot.id) holds no bundle") }
      root = digest
      skipping = []
    }
    let (plan, locations) = try catalog.reading { () throws -> (RestorePlan, [String: [BlobLocation]]) in
      let plan = try RestorePlan(catalog: catalog, root: root, skippingTopLevel: skipping)
      var locations: [String: [BlobLocation]] = [:]
      for (digest, first) in plan.firstWithContent {
        guard let location = try catalog.blob(digest) else {
          throw BackupError(
            .corruptCatalog,
            "The catalog has no archive holding the content of '\(display(plan.files[Int(first)].path))'")
        }
        locations[location.archive, default: []].append(location)
      }
      return (plan, locations)
    }
    observer.engine(
      .planned(
        entries: plan.files.count + plan.directories.count + plan.symlinks.count, files: plan.files.count,
        bytes: plan.totalBytes))
    var needed = Set(locations.keys)
    needed.insert(snapshot.archive)
    let records = try checkPresence(of: needed.sorted())
    // Archives that hold content are verified by the per-file SHA-256 of everything taken
    // from them (a second whole-file pass would only re-read them); the others (the
    // snapshot's own, when it holds only the manifest and keychain items) get their CRC-32C.
    let unread = records.filter { locations[$0.name] == nil }.map { openArchive($0) }
    nonisolated(unsafe) let unreadSources = unread
    let verifier = WorkerThread(name: "appbox-verify-archives") {
      for source in unreadSources { try source.verifyChecksum() }
    }
    var report = MaterializeReport(files: 0, bytes: 0, warnings: plan.warnings)
    do {
      let (protectedFiles, protectionWarning) = try protectedFileWriter(for: plan, session: session)
      defer { protectedFiles?.close() }
      if let protectionWarning { report.warnings.append(protectionWarning) }
      let writer = TreeWriter(target: directory)
      writer.protectedFiles = protectedFiles
      defer { writer.closeAll() }
      for item in plan.directories { try writer.makeDirectory(item.path) }
      observer.engine(.stage("extract"))
      let extractor = ContentExtractor(plan: plan, writer: writer, observer: observer)
      for record in records where locations[record.name] != nil {
        try extractor.extract(from: openArchive(record), locations: locations[record.name]!)
      }
      observer.engine(.stage("verify"))
      try extractor.finish()
      observer.engine(.stage("links and times"))
      for (index, item) in plan.files.enumerated() where !extractor.written[index] {
        guard plan.sizes[index] == 0 else {
          throw BackupError(.corruptCatalog, "No content was found for '\(display(item.path))'")
        }
        let fd = try writer.createFile(item)
        try fd.closeAfter { try TreeWriter.applyMetadata(item, to: $0) }
      }
      for (item, primary) in plan.hardLinks { try writer.link(item, to: plan.files[primary]) }
      for item in plan.fifos { try writer.makeFIFO(item) }
      for item in plan.symlinks { try writer.makeSymlink(item) }
      writer.closeAll()
      if standardDirectories { try addStandardDirectories(in: directory) }
      for item in plan.directories.reversed() { try writer.finishDirectory(item) }
      report.files = plan.files.count + plan.hardLinks.count + plan.symlinks.count + plan.fifos.count
      report.bytes = plan.totalBytes
    } catch {
      try? verifier.join()
      throw error
    }
    try verifier.join()
    return report
  }

  /// The records of archives `names`, each present with its recorded size (a local file's
  /// size, or an object's as the store lists it).
  func checkPresence(of names: [String]) throws -> [ArchiveRecord] {
    let listed: [String: Int64]? =
      local == nil
      ? Dictionary(try store.list("archives").map { ($0.name, $0.size) }, uniquingKeysWith: { a, _ in a })
      : nil
    return try names.map { name in
      guard let record = try catalog.archive(named: name) else {
        throw BackupError(.corruptCatalog, "The catalog does not know archive '\(name)'")
      }
      guard let size = try listed.map({ $0[name] }) ?? store.size(of: "archives/" + name) else {
        throw BackupError(.corruptArchive, "Archive '\(archivePath(name))' is missing")
      }
      guard size == record.size else {
        throw BackupError(
          .corruptArchive,
          "Archive '\(archivePath(name))' is \(size) bytes; the catalog recorded \(record.size)")
      }
      return record
    }
  }
}

/// Creates the home's standard directories that `directory` lacks (a symlink or file in
/// their place is left alone: the snapshot recorded it so).
func addStandardDirectories(in directory: FileDescriptor) throws {
  for path in Home.standardDirectories {
    let parent = TreeWriter.split(Array(path.utf8)).parent
    guard
      let parentStatus = parent.isEmpty ? try directory.status() : try directory.status(ofRawName: parent),
      parentStatus.type == .directory, try directory.status(ofRawName: Array(path.utf8)) == nil
    else { continue }
    try directory.makeDirectory(path, mode: 0o755)
  }
}
