// `export`: an app's data as one standalone pax tar.
//
// The same stages as a full backup, without a repository: scan Documents and Library (not
// Library/Caches, nothing marked "exclude from backup") with both cores, then read and write
// every item (ContentReader on one thread, Archiver on this one). No manifest: the archive is
// plain data that GNU tar extracts and `import` accepts. It is written to a temp file beside
// the destination, fsynced and renamed over it, so the destination is either the old file or
// the complete new one. Files with holes become sparse members (their holes are not written
// out). FIFOs and sockets cannot be carried by a standalone tar (backups keep FIFOs in their
// trees; sockets nowhere): they are left out, counted, and named in one warning.

import AppboxArchive
import AppboxContainer
import AppboxCore
import Foundation
import Glibc

/// What an export wrote.
public struct ExportReport: Sendable {
  public var files: Int
  public var bytes: Int64
  public var warnings: [String]
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
    let home = try FileDescriptor.open(self.home(of: app).path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    defer { home.close() }
    let rules = ScanRules(
      bundleDirectoryName: app.bundleDirectoryName, includeBundle: false,
      onlyTopLevel: [Array("Documents".utf8), Array("Library".utf8)])
    let scanner = Scanner(
      home: home, rules: rules, catalogPath: nil, previousRoot: nil, trustedBefore: 0, observer: observer)
    let plan = ArchivePlan(directories: try scanner.scan(), full: true)
    let special = plan.directories.filter { !$0.isExcluded }.flatMap { directory in
      directory.entries.filter { $0.type == .fifo || $0.type == .socket }.map {
        display(joinPath(directory.path, directory.name(of: $0)))
      }
    }
    observer.engine(
      .planned(
        entries: plan.directories.reduce(0) { $0 + $1.entries.count }, files: plan.fileCount,
        bytes: plan.fileBytes))

    let (directoryPath, name) = splitPath(path)
    let directory = try FileDescriptor.open(directoryPath, O_RDONLY | O_DIRECTORY)
    defer { directory.close() }
    let temporary = ".\(name).tmp-\(UInt32.random(in: 0...UInt32.max))"
    let file = try directory.open(
      temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode: 0o644, displayPath: path)
    do {
      let writer = try ArchiveWriter(fileDescriptor: file.rawValue, compression: .none, name: path)
      let pool = BufferPool(count: 16, bufferSize: 256 << 10)
      let archiver = Archiver(
        plan: plan, writer: writer, catalog: nil, archiveName: name, deduplicate: false, pool: pool,
        observer: observer)
      let queue = HandoffQueue<ContentMessage>(capacity: 16 << 20)
      let reader = ContentReader(home: home, plan: plan, queue: queue, pool: pool)
      let thread = WorkerThread(name: "appbox-read") { try reader.run() }
      do {
        try archiver.run(queue)
      } catch {
        try? thread.join()
        throw error
      }
      try thread.join()
      try writer.finish()
      try file.sync()
      file.close()
      try directory.rename(temporary, to: name)
      try directory.sync()
      for warning in archiver.warnings {
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
      let stored = archiver.results.compactMap { $0 }.filter { !$0.vanished && !$0.isExcluded }
      return ExportReport(
        files: stored.count
          + plan.items.filter { if case .symlink = $0 { return true } else { return false } }.count,
        bytes: archiver.bytesAdded, warnings: archiver.warnings.map { "'\($0.path)' \($0.message)" },
        skippedSpecialFiles: special)
    } catch {
      file.close()
      try? directory.remove(temporary)
      throw error
    }
  }
}
