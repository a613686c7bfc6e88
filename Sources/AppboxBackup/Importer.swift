// `import`: replace an app's Documents and Library with an untrusted tar archive's contents.
//
// Algorithm: read the archive once, member by member; each is judged by ImportValidator
// before anything is created for it, then written into a staging directory beside the
// homes through TreeWriter (descriptors only, O_EXCL | O_NOFOLLOW, nothing followed).
// Symlinks are created only after the last member, when all of them have been checked
// against the whole archive, so no member can be written through one. Directory modes and
// times are applied last. The staging directory then replaces the home's contents through
// the journaled swap, carrying over everything but Documents and Library (the bundle, tmp,
// the metadata file). A refusal or error at any point discards the staging directory: the
// home never changed, and nothing was written anywhere else.

import AppboxArchive
import AppboxContainer
import AppboxCore
import Foundation
import Glibc

/// What an import wrote.
public struct ImportReport: Sendable {
  public var files: Int
  public var directories: Int
  public var bytes: Int64
}

extension DeviceSession {
  /// Replaces `app`'s Documents and Library with the archive at `path`, all or nothing.
  public func importData(
    into app: AppRecord, from path: String, limits: ImportLimits? = nil,
    observer: EngineObserver = SilentObserver()
  ) throws -> ImportReport {
    let running = try holdNotRunning(app, session: self)
    defer { withExtendedLifetime(running) {} }
    observer.engine(.started(operation: "import", app: app.bundleIdentifier))
    let limits = limits ?? ImportLimits.from(environment: environment)
    let reader: ArchiveReader
    do {
      reader = try ArchiveReader(path: path)
    } catch {
      throw refusal(error, path: path)
    }
    let staging = try HomeStagingArea.create(in: self)
    let report: ImportReport
    do {
      let reserve: Int64 = 64 << 20
      let room = max(0, try staging.descriptor.availableSpace() - reserve)
      var build = ImportBuild(
        staging: staging.descriptor,
        validator: ImportValidator(maxEntries: limits.maxEntries, maxBytes: min(limits.maxBytes, room)))
      do {
        try build.run(reader)
      } catch {
        throw refusal(error, path: path)
      }
      report = build.report
    } catch {
      staging.discard()
      throw error
    }
    try HomeSwap.swap(staging, into: app, carrying: .allButData, session: self)
    observer.engine(.finished(operation: "import", app: app.bundleIdentifier))
    return report
  }
}

/// Names the archive in a refusal; other errors (I/O, no space) pass unchanged.
private func refusal(_ error: Error, path: String) -> Error {
  if let failure = error as? BackupError, failure.code == .refusedArchive {
    return BackupError(.refusedArchive, "Refused to import '\(path)': \(failure.message)")
  }
  if let failure = error as? ArchiveError {
    switch failure.kind {
    case .notFound: return BackupError(.snapshotNotFound, "No archive at '\(path)'")
    case .badData: return BackupError(.refusedArchive, "Refused to import '\(path)': \(failure.message)")
    default: return failure
    }
  }
  return error
}

/// Builds the imported tree in the staging directory.
private struct ImportBuild {
  let writer: TreeWriter
  var validator: ImportValidator
  /// Directory metadata to apply at the end (the latest member's, for a repeated directory).
  var directories: [[UInt8]: TreeEntry] = [:]
  var report = ImportReport(files: 0, directories: 0, bytes: 0)

  init(staging: FileDescriptor, validator: ImportValidator) {
    writer = TreeWriter(target: staging)
    self.validator = validator
  }

  mutating func run(_ reader: ArchiveReader) throws {
    defer { writer.closeAll() }
    var links: [(path: [UInt8], target: [UInt8], time: Int64)] = []
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
    defer { buffer.deallocate() }
    while let entry = try reader.nextEntry() {
      if entry.path == [UInt8(ascii: ".")] && entry.type == .directory { continue }
      let (admission, implied) = try validator.admit(facts(entry))
      for directory in implied {
        try writer.makeDirectory(directory)
        directories[directory] = TreeEntry(
          name: [], type: .directory, permissions: 0o755,
          modificationTime: Int64(Date().timeIntervalSince1970 * 1e9))
      }
      let metadata = treeEntry(entry)
      switch admission {
      case .directory:
        if directories[entry.path] == nil {
          try writer.makeDirectory(entry.path)
          report.directories += 1
        }
        directories[entry.path] = metadata
      case .file:
        let fd = try writer.createFile(entry.path)
        try fd.closeAfter { fd in
          var written: Int64 = 0
          while true {
            let count = try reader.readData(into: buffer)
            if count == 0 { break }
            try fd.writeAll(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
            written += Int64(count)
          }
          guard written == entry.size else {
            throw BackupError(.refusedArchive, "member '\(entry.displayPath)' has less data than it declares")
          }
          try TreeWriter.applyMetadata(RestoreItem(path: entry.path, entry: metadata), to: fd)
        }
        report.files += 1
        report.bytes += entry.size
      case .hardlink(let target):
        try writer.link(
          RestoreItem(path: entry.path, entry: metadata), to: RestoreItem(path: target, entry: metadata))
        report.files += 1
      case .symlink:
        links.append((entry.path, entry.linkTarget ?? [], metadata.modificationTime))
      }
    }
    try validator.checkSymlinks()
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

  private func facts(_ entry: ArchiveEntry) -> ArchiveEntryFacts {
    let kind: ArchiveEntryFacts.Kind
    switch entry.type {
    case .directory: kind = .directory
    case .regular: kind = .regular
    case .symlink: kind = .symlink(entry.linkTarget ?? [])
    case .hardlink: kind = .hardlink(entry.linkTarget ?? [])
    case .other: kind = .other
    }
    return ArchiveEntryFacts(
      path: entry.path, kind: kind, permissions: entry.permissions, size: entry.size,
      attributeNames: entry.extendedAttributes.map(\.name))
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
