// The live half of `why`: how a path of a home stands on disk now, seen the way the backup
// scanner sees it.
//
// Algorithm: from the home's descriptor, one component at a time: fstatat without following
// (a symlink anywhere is reported, never followed), then openat(O_NOFOLLOW | O_DIRECTORY) of
// each ancestor and a look at its exclude-from-backup mark, as the scanner checks every
// directory below the home (the attributes the backup records, tested by the backup's own
// `ScanRules.marksExcluded`). The entry itself is opened (O_NONBLOCK, so a FIFO or a planted
// device cannot hang appbox; only regular files and directories are opened) to learn whether
// it can be read, its own mark and its protection class.
// Invariants: nothing is followed, created or changed; every descriptor is closed.

import AppboxContainer
import AppboxCore
import AppboxCrypto
import AppboxRepository
import Glibc

/// A path of a home as it is on disk now.
struct LiveState {
  /// The entry's status; nil when it is not there (or cannot be reached).
  var status: FileStatus?
  /// The first ancestor (as a component count) that is a symlink.
  var symlinkAncestor: Int?
  /// The first ancestor that exists but is neither a directory nor a symlink.
  var nonDirectoryAncestor: Int?
  /// The topmost ancestor marked exclude-from-backup: the scanner stops there.
  var excludedAncestor: Int?
  /// The entry carries the mark itself.
  var isExcluded = false
  /// Why the entry, or an ancestor (`unreadableAt`), cannot be read.
  var unreadable: String?
  var unreadableAt: Int?
  var protectionClass: String?
}

enum LiveProbe {
  /// Probes `components` (raw names) beneath the home at `home`.
  static func inspect(
    home: String, components: [[UInt8]], classes: [FscryptKeyIdentifier: ProtectionClass] = [:]
  ) throws -> LiveState {
    var state = LiveState()
    var directory = try FileDescriptor.open(home, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    defer { directory.close() }
    for (index, name) in components.enumerated() {
      let depth = index + 1
      let status: FileStatus
      do {
        guard let found = try directory.status(ofRawName: name) else { return state }
        status = found
      } catch let error as SystemError {
        state.unreadable = String(describing: error.errno)
        state.unreadableAt = index
        return state
      }
      if depth == components.count {
        state.status = status
        inspectEntry(name, status: status, in: directory, classes: classes, into: &state)
        return state
      }
      switch status.type {
      case .directory: break
      case .symlink:
        state.symlinkAncestor = depth
        return state
      default:
        state.nonDirectoryAncestor = depth
        return state
      }
      let child: FileDescriptor
      do {
        child = try directory.open(rawName: name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
      } catch let error as SystemError {
        state.unreadable = String(describing: error.errno)
        state.unreadableAt = depth
        return state
      }
      directory.close()
      directory = child
      if state.excludedAncestor == nil,
        ScanRules.marksExcluded((try? ScanRules.directoryAttributes(of: child)) ?? [])
      {
        state.excludedAncestor = depth
      }
    }
    return state
  }

  /// Opens the entry itself when it is a regular file or a directory: readable or not, its
  /// mark, its protection class.
  private static func inspectEntry(
    _ name: [UInt8], status: FileStatus, in directory: FileDescriptor,
    classes: [FscryptKeyIdentifier: ProtectionClass], into state: inout LiveState
  ) {
    let flags: Int32
    switch status.type {
    case .regular: flags = O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY
    case .directory: flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW
    default: return
    }
    let file: FileDescriptor
    do {
      file = try directory.open(rawName: name, flags)
    } catch let error as SystemError {
      state.unreadable = String(describing: error.errno)
      return
    } catch {
      state.unreadable = String(describing: error)
      return
    }
    defer { file.close() }
    // The attributes the backup would record, and its own test of them.
    let attributes =
      status.type == .regular
      ? try? backupAttributes(of: file, classes: classes) : try? ScanRules.directoryAttributes(of: file)
    state.isExcluded = ScanRules.marksExcluded(attributes ?? [])
    state.protectionClass = protectionClass(of: file, classes: classes)
  }
}

/// What the next backup will do inside a live directory, file by file: the scanner's own
/// comparison (ChangeDetector) of every file beneath it with the parent snapshot's record.
public struct SubtreeSurvey: Sendable, Equatable {
  /// Regular files beneath it (not inside marked folders).
  public var files = 0
  /// Files whose record stands: not read.
  public var unchanged = 0
  /// Files that changed, or whose stat is too recent to trust: read again.
  public var changed = 0
  /// Files the parent snapshot does not have: read and stored.
  public var added = 0
  /// The bytes of the files that will be read.
  public var bytesToRead: Int64 = 0
  /// Folders beneath it marked exclude-from-backup (not looked inside).
  public var excludedFolders = 0
  /// Some folders could not be opened (unreadable, or gone meanwhile): the counts leave
  /// them out.
  public var isPartial = false
}

extension LiveProbe {
  /// Surveys the directory `components` of the home against the parent snapshot's tree of it
  /// (nil: none, so every file is new). Skips Library/Caches as the scanner does. Each folder
  /// is opened beneath the home (openat2, no symlink followed) from a stack of paths, so a
  /// deep tree costs no recursion and no descriptor per level (paths beyond PATH_MAX are
  /// opened in pieces); a folder that cannot be opened (unreadable, or gone) leaves the
  /// survey partial.
  static func survey(
    home: String, components: [[UInt8]], previous: Digest?, trees: TreeReader?, trustedBefore: Int64
  ) throws -> SubtreeSurvey {
    let homeDescriptor = try FileDescriptor.open(home, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    defer { homeDescriptor.close() }
    var survey = SubtreeSurvey()
    var pending: [(path: [UInt8], previous: Digest?)] = [
      (Array(components.joined(separator: [UInt8(ascii: "/")])), previous)
    ]
    var first = true
    while let (path, previous) = pending.popLast() {
      let directory: FileDescriptor
      do {
        directory = try homeDescriptor.openBeneath(path, O_RDONLY | O_DIRECTORY)
      } catch  where !first {
        survey.isPartial = true
        continue
      }
      first = false
      defer { directory.close() }
      let subdirectories = try surveyOne(
        directory, path: path, previous: previous, trees: trees, trustedBefore: trustedBefore, into: &survey)
      pending.append(contentsOf: subdirectories.reversed())
    }
    return survey
  }

  /// Counts one directory's files; returns its subdirectories to survey.
  private static func surveyOne(
    _ directory: FileDescriptor, path: [UInt8], previous: Digest?, trees: TreeReader?, trustedBefore: Int64,
    into survey: inout SubtreeSurvey
  ) throws -> [(path: [UInt8], previous: Digest?)] {
    var recorded: [[UInt8]: EntryFacts] = [:]
    if let previous, let trees {
      let data = try trees.data(previous)
      try data.withUnsafeBytes { buffer in
        var cursor = try TreeCursor(buffer)
        while let entry = try cursor.next() {
          recorded[Array(buffer[entry.nameRange])] = EntryFacts(entry, in: buffer)
        }
      }
    }
    let isLibrary = path == Array("Library".utf8)
    var subdirectories: [(path: [UInt8], previous: Digest?)] = []
    for entry in try directory.entries() {
      if isLibrary && entry.name == Array("Caches".utf8) { continue }
      guard let status = try directory.status(ofRawName: entry.name) else { continue }
      let before = recorded[entry.name]
      switch status.type {
      case .directory:
        guard let child = try? directory.open(rawName: entry.name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW) else {
          survey.isPartial = true
          continue
        }
        defer { child.close() }
        if ScanRules.marksExcluded((try? ScanRules.directoryAttributes(of: child)) ?? []) {
          survey.excludedFolders += 1
          continue
        }
        subdirectories.append(
          (joinPath(path, entry.name), before.flatMap { $0.type == .directory ? $0.digest : nil }))
      case .regular:
        survey.files += 1
        guard let before, before.type == .file else {
          survey.added += 1
          survey.bytesToRead += status.size
          continue
        }
        if ChangeDetector.changes(status, previous: before.treeEntry, trustedBefore: trustedBefore).isEmpty {
          survey.unchanged += 1
        } else {
          survey.changed += 1
          survey.bytesToRead += status.size
        }
      default:
        continue
      }
    }
    return subdirectories
  }
}
