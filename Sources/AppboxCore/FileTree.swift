import Glibc

/// Whole-tree operations done with descriptors, never following symlinks.
public enum FileTree {
  /// Removes `name` in `parent` and everything below it. Robust against deep trees
  /// (it keeps one directory open at a time, climbing back with ".."), read-only
  /// directories (made writable before emptying) and symlinks (removed, never followed).
  /// Absent is not an error. Uses `openat(2)`, `unlinkat(2)` and `fchmod(2)`.
  public static func remove(_ name: String, in parent: FileDescriptor) throws {
    guard let status = try parent.statusIfPresent(of: name) else { return }
    guard status.type == .directory else {
      try parent.remove(name)
      return
    }
    let top = try openForRemoval(name, in: parent)
    try removeContents(startingAt: top)
    try parent.remove(name, directory: true)
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

  /// Empties the directory `start` (which this consumes and closes), walking down one
  /// directory at a time with a stack of names rather than of descriptors.
  private static func removeContents(startingAt start: FileDescriptor) throws {
    var current = start
    var path: [[UInt8]] = []  // names from `start` down to `current`
    defer { current.close() }
    while true {
      var descended = false
      for entry in try current.entries() {
        let isDirectory: Bool
        if let type = entry.type {
          isDirectory = type == .directory
        } else {
          isDirectory = try withCName(entry.name) { name in
            var st = stat()
            guard Glibc.fstatat(current.rawValue, name, &st, AT_SYMLINK_NOFOLLOW) == 0 else {
              throw SystemError("stat", path: String(decoding: entry.name, as: UTF8.self))
            }
            return FileStatus(st).type == .directory
          }
        }
        if isDirectory {
          let child = try withCName(entry.name) { name in
            try openForRemoval(String(cString: name), rawName: entry.name, in: current)
          }
          current.close()
          current = child
          path.append(entry.name)
          descended = true
          break
        }
        try withCName(entry.name) { name in
          guard Glibc.unlinkat(current.rawValue, name, 0) == 0 || Errno.current == .noEntry else {
            throw SystemError("remove", path: String(decoding: entry.name, as: UTF8.self))
          }
        }
      }
      if descended { continue }
      // `current` is empty now: climb to its parent and remove it.
      guard let name = path.popLast() else { return }
      let parent = try current.open("..", O_RDONLY | O_DIRECTORY)
      current.close()
      current = parent
      try withCName(name) { cName in
        guard Glibc.unlinkat(current.rawValue, cName, AT_REMOVEDIR) == 0 else {
          throw SystemError("remove", path: String(decoding: name, as: UTF8.self))
        }
      }
    }
  }

  private static func openForRemoval(_ name: String, rawName: [UInt8]? = nil, in parent: FileDescriptor)
    throws
    -> FileDescriptor
  {
    let flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW
    let open = { () throws -> FileDescriptor in
      if let rawName { return try parent.open(rawName: rawName, flags) }
      return try parent.open(name, flags)
    }
    do {
      let fd = try open()
      // A directory without write or search permission cannot be emptied, even by its owner.
      let status = try fd.status()
      if status.permissions & 0o700 != 0o700 { try fd.setPermissions(0o700) }
      return fd
    } catch let error as SystemError where error.errno == .permissionDenied {
      // Not even readable: fix the mode through the parent, then open again.
      let fixed =
        rawName.map { withCName($0) { Glibc.fchmodat(parent.rawValue, $0, 0o700, 0) } }
        ?? Glibc.fchmodat(parent.rawValue, name, 0o700, 0)
      guard fixed == 0 else { throw error }
      return try open()
    }
  }
}
