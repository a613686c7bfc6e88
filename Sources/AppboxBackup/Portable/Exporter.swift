// `export`: an app's data as one standalone pax tar.
//
// The same stages as a full backup, without a repository: scan Documents and Library (not
// Library/Caches, nothing marked "exclude from backup") with both cores, while reading and
// writing every item in depth-first order (ContentReader on one thread, Archiver on this one),
// in the memory of a few directories whatever the number of files. No manifest: the archive is
// plain data that GNU tar extracts and `import` accepts. It is written as a `StagedFile` (a
// temp file beside the destination, fsynced and renamed over it), so the destination is
// either the old file or the complete new one. Files with holes become sparse members (their
// holes are not written out). FIFOs and sockets cannot be carried by a standalone tar
// (backups keep FIFOs in their trees; sockets nowhere): they are left out, counted, and
// named in one warning.

import AppboxArchive
import AppboxContainer
import AppboxCore
import AppboxPipeline
import AppboxRepository
import Foundation
import Glibc

/// What an export wrote.
public struct ExportReport: Sendable {
  public var files: Int
  /// The files' sizes, holes included: the measure of a snapshot's `bytes` and of `inspect`
  /// (a sparse file counts its length, not the few bytes its data takes in the tar).
  public var bytes: Int64
  public var warnings: [String]
  /// Entries that could not be read and are not in the archive, and the first of their
  /// paths (shortened), as for an incomplete snapshot.
  public var unreadable = 0
  public var unreadablePaths: [[UInt8]] = []
  /// FIFOs and sockets left out, by path.
  public var skippedSpecialFiles: [String] = []
}

extension DeviceSession {
  /// Writes `app`'s Documents and Library to the tar file at `path` (replacing it atomically).
  public func exportData(of app: AppRecord, to path: String, observer: EngineObserver = SilentObserver())
    throws
    -> ExportReport
  {
    observer.engine(.started(operation: "export", app: app.bundleIdentifier))
    try requireProtectedDataAvailable(of: app, for: "export")
    let home = try OwnedFileDescriptor.open(self.home(of: app).path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    let rules = ScanRules(
      bundleDirectoryName: app.bundleDirectoryName, includeBundle: false,
      onlyTopLevel: [Array("Documents".utf8), Array("Library".utf8)])
    let scanner = Scanner(
      home: home.borrowed, rules: rules, catalogPath: nil, previousRoot: nil, trustedBefore: 0,
      observer: observer)
    observer.engine(.phase(.scanning))
    let (directoryPath, name) = splitPath(path)
    let directory = try OwnedFileDescriptor.open(directoryPath, O_RDONLY | O_DIRECTORY)
    let staged = try StagedFile(name, in: directory.borrowed, mode: 0o644, displayPath: path)
    let writer = try ArchiveWriter(fileDescriptor: staged.descriptor.rawValue, compression: .none, name: path)
    let pool = BufferPool(count: 16, bufferSize: 256 << 10)
    let archiver = Archiver(
      writer: writer, catalog: nil, archiveName: name, deduplicate: false, full: true, pool: pool,
      observer: observer, phaseAfterScan: .writing)
    let queue = HandoffQueue<ContentMessage>(capacity: 16 << 20)
    let reader = ContentReader(
      scanner: scanner, queue: queue, pool: pool, protectionClasses: try protectionClassesByKey())
    let thread = WorkerThread(name: "appbox-read") { try reader.run() }
    do {
      try archiver.run(queue)
    } catch {
      try? thread.join()
      throw error
    }
    try thread.join()
    try writer.finish()
    try staged.commit()
    let special = archiver.specialFiles
    for warning in scanner.warnings + archiver.warnings {
      observer.engine(.warning(path: warning.path, message: warning.message))
    }
    if !special.isEmpty {
      let shown = special.prefix(5).map { "'\($0)'" }.joined(separator: ", ")
      let noun = special.count == 1 ? "FIFO or socket" : "FIFOs and sockets"
      observer.engine(
        .warning(
          path: nil,
          message: "left out \(special.count) \(noun), which an archive cannot hold: \(shown)"
            + (special.count > 5 ? ", ..." : "")))
    }
    observer.engine(.finished(operation: "export", app: app.bundleIdentifier))
    let unreadable = (scanner.unreadable + archiver.unreadable).map(\.path).sorted {
      $0.lexicographicallyPrecedes($1)
    }
    return ExportReport(
      files: archiver.storedFiles + archiver.storedSymlinks,
      bytes: archiver.storedBytes,
      warnings: (scanner.warnings + archiver.warnings).map { "'\($0.path)' \($0.message)" },
      unreadable: scanner.unreadableCount + archiver.unreadableCount,
      unreadablePaths: Snapshot.keptPaths(unreadable), skippedSpecialFiles: special)
  }
}
