// Stage 1 of a backup, one directory: list it and stat its entries, merging them with the
// previous snapshot's tree of the same directory.
//
// Algorithm: the directory is listed with getdents, its raw names sorted, and merged with the
// previous tree (walked in place by a TreeCursor). Each entry costs one fstatat;
// `ChangeDetector` then decides whether the previous entry stands for it. Names live in one
// byte arena per directory and entries refer to them, so an unchanged file costs no
// allocation at all. Changed symlinks are read here; changed regular files are left for the
// content reader, which opens them through this directory's descriptor (kept open for it).
//
// Invariants: an excluded directory is recorded but not listed; `tmp` (in a home),
// `Library/Caches` and (unless asked) the bundle are skipped by name at their fixed places; an
// entry that vanishes between listing and stat never existed as far as the snapshot is
// concerned. What the app made unreadable (permission denied) or too deep to store (a path over
// 64 KiB) does not stop the scan: a directory that cannot be listed (permission denied, or
// encrypted under a key the file system does not hold) is recorded empty, an entry
// that cannot be read is left out, and each is reported in `unreadable`, which makes the
// snapshot incomplete. Any other failure (an I/O error, a device file) stops the whole scan
// with an error naming the path.

import AppboxContainer
import AppboxCore
import AppboxCrypto
import AppboxRepository
import Glibc

extension Scanner {
  struct Visit {
    var unreadable: [UnreadableEntry] = []
    var warning: (path: String, message: String)?
  }

  /// Opens `directory`: from its parent's descriptor by name, the home itself, or (when no
  /// parent descriptor was kept) by path beneath the home.
  private func open(_ directory: ScannedDirectory, parent: DirectoryHandle?, flags: Int32) throws
    -> FileDescriptor
  {
    if let parent { return try parent.descriptor.open(rawName: directory.name, flags | O_NOFOLLOW) }
    if directory.depth == 0 { return try home.open(".", flags) }
    return try home.openBeneath(directory.path, flags)
  }

  /// Lists one directory and stats its entries, merging them with the previous tree's.
  func visit(
    _ result: ScannedDirectory, parent: DirectoryHandle?, previousData: [UInt8],
    buffer: UnsafeMutableRawBufferPointer
  ) throws -> Visit {
    let isRoot = result.depth == 0
    // Paths are built only for messages (and for a job without its parent's descriptor).
    var builtPath: [UInt8]?
    func path() -> [UInt8] {
      if let builtPath { return builtPath }
      let made = result.path
      builtPath = made
      return made
    }
    let directory: FileDescriptor
    do {
      directory = try open(result, parent: parent, flags: O_RDONLY | O_DIRECTORY)
    } catch let error as SystemError where !isRoot {
      switch error.errno {
      case .permissionDenied, .notPermitted:
        // Recorded as it is seen from outside, without content: its own status comes from a
        // descriptor that needs no permission on it (O_PATH).
        let status = try? open(result, parent: parent, flags: FileDescriptor.pathOnlyFlag | O_DIRECTORY)
          .closeAfter { try $0.status() }
        guard let status else { return Visit() }  // gone meanwhile
        result.status = status
        result.isUnreadable = true
        if let previous = result.previous,
          ChangeDetector.isUnchanged(status, previous: previous, trustedBefore: trustedBefore)
        {
          result.attributes = previous.extendedAttributes
          result.isExcluded = previous.isExcluded
        }
        if result.isExcluded { return Visit() }
        return Visit(unreadable: [UnreadableEntry(path: path(), reason: "cannot list it (\(error.errno))")])
      case .noEntry, .notDirectory, .tooManyLinks:
        // Gone, or replaced by a file or a symlink: it never existed for this snapshot.
        return Visit(warning: (display(path()), "not backed up: it was moved or replaced during the backup"))
      default:
        throw backupFailure(error, path: display(path()))
      }
    }
    var keepOpen = false
    defer { if !keepOpen { directory.close() } }
    let status = try directory.status()
    result.status = status
    if !isRoot {
      if let previous = result.previous,
        ChangeDetector.isUnchanged(status, previous: previous, trustedBefore: trustedBefore)
      {
        result.attributes = previous.extendedAttributes
        result.isExcluded = previous.isExcluded
        result.isUnchanged = true
      } else {
        result.attributes = try ScanRules.directoryAttributes(of: directory)
        result.isExcluded = ScanRules.marksExcluded(result.attributes)
      }
      if result.isExcluded { return Visit() }
      if let reason = try unlistableEncryption(of: directory) {
        result.isUnreadable = true
        return Visit(unreadable: [UnreadableEntry(path: path(), reason: reason)])
      }
    }
    var visit = Visit()
    var names: [UInt8] = []
    var spans: [(start: Int32, length: Int32)] = []
    do {
      try directory.forEachEntry(buffer: buffer) { name, length, _ in
        let bytes = UnsafeRawBufferPointer(start: name, count: length)
        if rules.skips(bytes, inRoot: isRoot, inTopLibrary: result.isTopLibrary) { return }
        spans.append((Int32(names.count), Int32(length)))
        names.append(contentsOf: bytes)
        names.append(0)
      }
    } catch let error as SystemError {
      throw backupFailure(error, path: isRoot ? "." : display(path()))
    }
    names.withUnsafeBytes { arena in
      spans.sort { compareBytes(arena, $0, arena, $1) < 0 }
    }
    result.previousData = previousData
    result.entries.reserveCapacity(spans.count)
    let entryPrefix = isRoot ? 0 : result.pathLength + 1
    func entryPath(_ name: [UInt8]) -> [UInt8] { joinPath(isRoot ? [] : path(), name) }
    try previousData.withUnsafeBytes { old in
      var cursor = previousData.isEmpty ? nil : try TreeCursor(old)
      result.previousEntryCount = cursor?.count ?? -1
      var candidate = try cursor?.next()
      try names.withUnsafeBytes { arena in
        for span in spans {
          while let current = candidate,
            compareBytes(
              old, (Int32(current.nameRange.lowerBound), Int32(current.nameRange.count)), arena, span) < 0
          {
            candidate = try cursor!.next()
          }
          var match: EncodedEntry?
          if let current = candidate,
            compareBytes(
              old, (Int32(current.nameRange.lowerBound), Int32(current.nameRange.count)), arena, span) == 0
          {
            match = current
          }
          let cName = (arena.baseAddress! + Int(span.start)).assumingMemoryBound(to: CChar.self)
          let name = { Array(UnsafeRawBufferPointer(start: cName, count: Int(span.length))) }
          if entryPrefix + Int(span.length) > ScanRules.maximumPathLength {
            visit.unreadable.append(
              UnreadableEntry(
                path: entryPath(name()),
                reason: "its path is longer than \(ScanRules.maximumPathLength) bytes"))
            continue
          }
          let status: FileStatus
          do {
            guard let found = try directory.status(ofCName: cName) else { continue }  // vanished
            status = found
          } catch let error as SystemError
            where error.errno == .permissionDenied || error.errno == .notPermitted
          {
            visit.unreadable.append(
              UnreadableEntry(path: entryPath(name()), reason: "cannot stat it (\(error.errno))"))
            continue
          } catch let error as SystemError {
            throw backupFailure(error, path: display(entryPath(name())))
          }
          guard let type = TreeEntryType(status.type) else {
            throw BackupError(
              .unreadable(.badData),
              "Unable to back up '\(display(entryPath(name())))': device files do not belong in a home")
          }
          var entry = ScannedEntry(
            nameStart: span.start, nameLength: span.length, status: EntryStatus(status), type: type,
            previous: match.map(PreviousEntry.init))
          if type == .directory {
            if let match, match.type == .directory {
              result.previousSubdirectories[Int32(result.entries.count)] = try Tree.materialize(
                match, in: old)
            }
          } else if let match,
            ChangeDetector.isUnchanged(status, previous: match, trustedBefore: trustedBefore)
          {
            entry.isReused = true
          } else if type == .file, let match, match.hasDigest,
            ChangeDetector.isUnchanged(status, previous: match, trustedBefore: .max)
          {
            entry.isRacy = true
          } else if type == .symlink {
            do {
              entry.linkTarget = try directory.readLink(rawName: name())
            } catch let error as SystemError where error.errno == .noEntry || error.errno == .invalidArgument
            {
              continue  // gone, or no longer a symlink: it never existed for this snapshot
            } catch let error as SystemError
              where error.errno == .permissionDenied || error.errno == .notPermitted
            {
              visit.unreadable.append(
                UnreadableEntry(path: entryPath(name()), reason: "cannot read the link (\(error.errno))"))
              continue
            } catch let error as SystemError {
              throw backupFailure(error, path: display(entryPath(name())))
            }
          }
          result.entries.append(entry)
        }
      }
    }
    result.names = names
    // Kept open for the reader (files to read) and for the subdirectories' scans (within the
    // descriptor budget; past it they open by path).
    let needsReading = result.entries.contains { $0.type == .file && !$0.isReused }
    let hasSubdirectories = result.entries.contains { $0.type == .directory }
    result.needsReading = needsReading
    if needsReading || (hasSubdirectories && live.count.load(ordering: .relaxed) < descriptorBudget) {
      keepOpen = true
      result.handle = DirectoryHandle(directory, live: live)
    }
    return visit
  }
}

/// Why the open directory `directory` cannot be listed for a snapshot, or nil when it can: it
/// is encrypted (an fscrypt policy no protection class of appbox sets on a directory) under a
/// key the file system does not hold, so its names are placeholders and its files cannot be
/// opened. It is then recorded as a folder appbox cannot read is: without content, in
/// `unreadable`. Uses `ioctl(FS_IOC_GET_ENCRYPTION_POLICY_EX)` and
/// `ioctl(FS_IOC_GET_ENCRYPTION_KEY_STATUS)`.
func unlistableEncryption(of directory: FileDescriptor) throws -> String? {
  guard let identifier = try directory.encryptionPolicy() else { return nil }
  if try directory.encryptionKeyStatus(identifier) == .present { return nil }
  return "cannot list it (encrypted with a key that is not available)"
}

/// Compares two names held in byte buffers, as `[UInt8].lexicographicallyPrecedes` orders them.
@inline(__always)
func compareBytes(
  _ a: UnsafeRawBufferPointer, _ x: (start: Int32, length: Int32), _ b: UnsafeRawBufferPointer,
  _ y: (start: Int32, length: Int32)
) -> Int {
  let common = Int(min(x.length, y.length))
  let order = memcmp(a.baseAddress! + Int(x.start), b.baseAddress! + Int(y.start), common)
  if order != 0 { return Int(order) }
  return Int(x.length) - Int(y.length)
}

/// Turns a failed system call on a file of the home into the backup's error, in the words
/// of `SystemError`: "Unable to read link 'Documents/x': input/output error".
func backupFailure(_ error: SystemError, path: String) -> BackupError {
  BackupError(
    .unreadable(error.kind == .denied ? .denied : .io),
    "Unable to \(error.operation) '\(path)': \(error.errno)")
}
