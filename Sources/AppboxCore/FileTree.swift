import CSystem
import Glibc

/// Whole-tree operations done with descriptors, never following symlinks.
public enum FileTree {
  /// Removes `name` in `parent` and everything below it. Robust against deep trees
  /// (it keeps one directory open at a time, climbing back with ".." and checking it came
  /// back to the directory it left), read-only directories (made writable before emptying),
  /// symlinks (removed, never followed) and entries that vanish meanwhile (someone else
  /// removing them is not an error). Absent is not an error.
  /// Uses `openat(2)`, `unlinkat(2)` and `fchmod(2)`.
  public static func remove(_ name: String, in parent: FileDescriptor) throws {
    try remove(rawName: Array(name.utf8), in: parent)
  }

  /// `remove(_:in:)` for a name given as raw bytes (which need not be UTF-8).
  public static func remove(rawName name: [UInt8], in parent: FileDescriptor) throws {
    guard let status = try parent.status(ofRawName: name) else { return }
    guard status.type == .directory else {
      try removeEntry(name, in: parent, directory: false)
      return
    }
    let top: FileDescriptor
    do {
      top = try openForRemoval(rawName: name, in: parent)
    } catch let error as SystemError where error.errno == .noEntry {
      return
    }
    try removeContents(startingAt: top)
    try removeEntry(name, in: parent, directory: true)
  }

  /// Removes everything inside the open directory `directory`, leaving it empty.
  public static func removeContents(of directory: FileDescriptor) throws {
    try removeContents(startingAt: try directory.duplicate())
  }

  /// Removes the tree at an absolute or relative `path`.
  public static func remove(atPath path: String) throws {
    let (dir, name) = splitPath(path)
    let parent = try FileDescriptor.open(dir, O_RDONLY | O_DIRECTORY)
    try parent.closeAfter { try remove(name, in: $0) }
  }

  /// `unlinkat`, where an entry already gone counts as removed.
  private static func removeEntry(_ name: [UInt8], in directory: FileDescriptor, directory isDirectory: Bool)
    throws
  {
    let result = withCName(name) { Glibc.unlinkat(directory.rawValue, $0, isDirectory ? AT_REMOVEDIR : 0) }
    guard result == 0 || Errno.current == .noEntry else {
      throw SystemError("remove", path: String(decoding: name, as: UTF8.self))
    }
  }

  /// Empties the directory `start` (which this consumes and closes), walking down one
  /// directory at a time with a stack of names rather than of descriptors. Each directory is
  /// listed once: its other entries are removed at once and its subdirectories kept as names,
  /// visited one after another, so a directory of many subdirectories costs one listing, not
  /// one per subdirectory (and a chain one per level). A subdirectory that turns out not empty
  /// when removed (something wrote into it meanwhile) is visited again. Each level remembers
  /// its directory's identity: if ".." does not lead back to it (a directory was moved
  /// meanwhile), the removal stops rather than empty some other directory.
  private static func removeContents(startingAt start: FileDescriptor) throws {
    var current = start
    defer { current.close() }
    // From `start` down to `current`: each directory's name in its parent, the parent's
    // identity (device, inode), and the parent's subdirectories still to visit.
    var path: [(name: [UInt8], parent: (UInt64, UInt64), pending: [[UInt8]])] = []
    // The subdirectories of `current` still to visit.
    var pending = try removeFiles(in: current)
    while true {
      if let name = pending.popLast() {
        let child: FileDescriptor
        CrashPoint.hit("filetree.descend")
        do {
          child = try openForRemoval(rawName: name, in: current)
        } catch let error as SystemError where error.errno == .noEntry {
          continue
        }
        let identity = try current.status()
        current.close()
        current = child
        path.append((name, (identity.device, identity.inode), pending))
        pending = try removeFiles(in: current)
        continue
      }
      // `current` is empty now: climb to its parent and remove it.
      guard let (name, expected, rest) = path.popLast() else { return }
      let parent = try current.open("..", O_RDONLY | O_DIRECTORY)
      current.close()
      current = parent
      let reached = try current.status()
      guard reached.device == expected.0 && reached.inode == expected.1 else {
        throw SystemError(
          "remove", path: String(decoding: name, as: UTF8.self), errno: Errno(rawValue: ESTALE))
      }
      pending = rest
      let result = withCName(name) { Glibc.unlinkat(current.rawValue, $0, AT_REMOVEDIR) }
      if result != 0 {
        switch Errno.current {
        case .noEntry: break
        case .notEmpty, .exists: pending.append(name)  // written into meanwhile: empty it again
        default: throw SystemError("remove", path: String(decoding: name, as: UTF8.self))
        }
      }
    }
  }

  /// Removes every entry of `directory` that is not a directory; returns the names of its
  /// subdirectories.
  private static func removeFiles(in directory: FileDescriptor) throws -> [[UInt8]] {
    var subdirectories: [[UInt8]] = []
    for entry in try directory.entries() {
      let isDirectory: Bool
      if let type = entry.type {
        isDirectory = type == .directory
      } else {
        guard let status = try directory.status(ofRawName: entry.name) else { continue }  // vanished
        isDirectory = status.type == .directory
      }
      if isDirectory {
        subdirectories.append(entry.name)
      } else {
        try removeEntry(entry.name, in: directory, directory: false)
      }
    }
    // Visited in listing order (popped from the end).
    subdirectories.reverse()
    return subdirectories
  }

  /// Opens directory `name` of `parent` for emptying, making it readable, writable and
  /// searchable by its owner first when it is not. The mode is only ever changed through a
  /// descriptor of the directory itself, opened with O_NOFOLLOW | O_DIRECTORY: a symlink
  /// swapped in for the directory is refused, never followed, so nothing outside the tree
  /// can have its mode changed. Uses `openat(2)`, `fchmod(2)` and, for a directory that is
  /// not even readable, an O_PATH descriptor and `appbox_chmod_descriptor`.
  private static func openForRemoval(rawName bytes: [UInt8], in parent: FileDescriptor) throws
    -> FileDescriptor
  {
    let flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW
    do {
      let fd = try parent.open(rawName: bytes, flags)
      // A directory without write or search permission cannot be emptied, even by its owner.
      do {
        let status = try fd.status()
        if status.permissions & 0o700 != 0o700 { try fd.setPermissions(0o700) }
      } catch {
        fd.close()
        throw error
      }
      return fd
    } catch let error as SystemError where error.errno == .permissionDenied {
      // Not even readable: open the directory itself without reading it (O_PATH needs only
      // search permission on the parent), change its mode through that descriptor, then
      // open it for reading. Never fchmodat(parent, name), which follows a symlink.
      CrashPoint.hit("filetree.unreadable")
      let path = try parent.openOwned(rawName: bytes, O_PATH | O_DIRECTORY | O_NOFOLLOW)
      guard appbox_chmod_descriptor(path.rawValue, 0o700) == 0 else {
        throw SystemError("change mode", path: String(decoding: bytes, as: UTF8.self))
      }
      // Reopen through the O_PATH descriptor itself, so the directory opened is the one
      // whose mode was changed even if the name was swapped meanwhile.
      return try path.borrowed.open(".", flags)
    }
  }
}
