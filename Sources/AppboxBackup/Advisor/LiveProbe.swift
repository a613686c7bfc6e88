// The live half of `why`: how a path of a home stands on disk now, seen the way the backup
// scanner sees it.
//
// Algorithm: from the home's descriptor, one component at a time: fstatat without following
// (a symlink anywhere is reported, never followed), then openat(O_NOFOLLOW | O_DIRECTORY) of
// each ancestor and a look at its exclude-from-backup mark, as the scanner checks every
// directory below the home. The entry itself is opened (O_NONBLOCK, so a FIFO or a planted
// device cannot hang appbox; only regular files and directories are opened) to learn whether
// it can be read, its own mark and its protection class.
// Invariants: nothing is followed, created or changed; every descriptor is closed.

import AppboxContainer
import AppboxCore
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
  static func inspect(home: String, components: [[UInt8]]) throws -> LiveState {
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
        inspectEntry(name, status: status, in: directory, into: &state)
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
      if state.excludedAncestor == nil, (try? child.extendedAttribute(excludeFromBackupAttribute)) != nil {
        state.excludedAncestor = depth
      }
    }
    return state
  }

  /// Opens the entry itself when it is a regular file or a directory: readable or not, its
  /// mark, its protection class.
  private static func inspectEntry(
    _ name: [UInt8], status: FileStatus, in directory: FileDescriptor, into state: inout LiveState
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
    state.isExcluded = (try? file.extendedAttribute(excludeFromBackupAttribute)) != nil
    state.protectionClass = protectionClass(of: file, status: status)
  }
}
