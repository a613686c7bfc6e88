// A walk's position in a directory tree, kept as descriptors instead of a path.
//
// Why: a walk that opens each directory by its path from the top costs O(depth) per directory,
// O(depth²) for a chain, and meets PATH_MAX; one that keeps every ancestor open runs out of
// descriptors. The cursor is the stack of directories from a base down to the current one,
// each opened by name from the one above (O_DIRECTORY | O_NOFOLLOW: a symlink is refused,
// never followed). At most `openLimit` of them stay open: descending past it closes the
// shallowest open one, after noting its identity (device, inode); climbing back to a closed
// level opens ".." from the level below and checks it is that same directory (ESTALE if a
// directory was moved meanwhile, so the walk never continues somewhere else). Every step,
// down or up, is O(1) system calls whatever the depth, so a walk costs O(entries).
//
// The cursor owns the descriptors it opened; the base belongs to the caller.

import Glibc

public final class DirectoryCursor {
  private struct Level {
    var name: [UInt8]
    var descriptor: FileDescriptor?
    /// Recorded when the descriptor is closed early, to check the climb back.
    var identity: (device: UInt64, inode: UInt64)?
  }

  /// The directory below which the walk runs (not owned).
  public let base: FileDescriptor
  private let openLimit: Int
  private let flags: Int32
  private var levels: [Level] = []
  /// `levels[firstOpen...]` have open descriptors; the ones before were closed.
  private var firstOpen = 0
  /// The current directory's path below the base (names joined by `/`), and where each
  /// level's name ends in it: how `move(toParentOf:)` finds what it shares with a path.
  private var path: [UInt8] = []
  private var ends: [Int] = []

  /// A cursor at `base`. Directories are opened with `flags` (plus O_DIRECTORY | O_NOFOLLOW).
  public init(base: FileDescriptor, openLimit: Int = 48, flags: Int32 = O_RDONLY) {
    self.base = base
    self.openLimit = max(2, openLimit)
    self.flags = flags
  }

  deinit { closeAll() }

  /// How many levels below the base the cursor is (0: at the base).
  public var depth: Int { levels.count }

  /// The current directory: the deepest level's descriptor, or the base.
  public var current: FileDescriptor { levels.last?.descriptor ?? base }

  /// The name of level `index` (0 is the first directory below the base).
  public func name(at index: Int) -> [UInt8] { levels[index].name }

  /// Goes down into `name`, a directory of the current one. Uses `openat(2)`.
  public func descend(_ name: [UInt8]) throws {
    let opened = try current.open(rawName: name, flags | O_DIRECTORY | O_NOFOLLOW)
    levels.append(Level(name: name, descriptor: opened))
    if !path.isEmpty { path.append(UInt8(ascii: "/")) }
    path.append(contentsOf: name)
    ends.append(path.count)
    if levels.count - firstOpen > openLimit {
      // The shallowest open level closes; its identity checks the climb back to it.
      let status: FileStatus
      do {
        status = try levels[firstOpen].descriptor!.status()
      } catch {
        levels.removeLast().descriptor?.close()
        dropLastName()
        throw error
      }
      levels[firstOpen].identity = (status.device, status.inode)
      levels[firstOpen].descriptor!.close()
      levels[firstOpen].descriptor = nil
      firstOpen += 1
    }
  }

  /// Goes up one level. `leaving`, when given, runs on the directory being left (still open)
  /// after the way back up is secured: a caller finishing directories as it leaves them (a
  /// restrictive mode, say) can still climb through them.
  public func ascend(leaving: ((FileDescriptor) throws -> Void)? = nil) throws {
    guard let last = levels.last, let descriptor = last.descriptor else { return }
    let parentIndex = levels.count - 2
    if parentIndex >= 0 && parentIndex < firstOpen {
      let parent = try descriptor.open("..", flags | O_DIRECTORY | O_NOFOLLOW)
      let status: FileStatus
      do { status = try parent.status() } catch {
        parent.close()
        throw error
      }
      guard let identity = levels[parentIndex].identity, identity.device == status.device,
        identity.inode == status.inode
      else {
        parent.close()
        throw SystemError(
          "return to", path: String(decoding: levels[parentIndex].name, as: UTF8.self),
          errno: Errno(rawValue: ESTALE))
      }
      levels[parentIndex].descriptor = parent
      levels[parentIndex].identity = nil
      firstOpen = parentIndex
    }
    levels.removeLast()
    dropLastName()
    if firstOpen > levels.count { firstOpen = levels.count }
    defer { descriptor.close() }
    try leaving?(descriptor)
  }

  /// Goes up until the cursor is `depth` levels below the base.
  public func ascend(toDepth depth: Int, leaving: ((FileDescriptor) throws -> Void)? = nil) throws {
    while levels.count > max(depth, 0) { try ascend(leaving: leaving) }
  }

  private func dropLastName() {
    ends.removeLast()
    path.removeSubrange((ends.last ?? 0)...)
  }

  /// Moves to the directory holding `member` (a path below the base, names joined by `/`): up
  /// to the parents it shares with where the cursor is, then down by name, first creating the
  /// last `creating` of its parents (with `mode`). Costs a few scans of the path and one step per
  /// directory that differs, never a walk from the top.
  public func move(toParentOf member: [UInt8], creating: Int = 0, mode: mode_t = 0o700) throws {
    let shared = sharedParentComponents(of: member, with: path, ends: ends)
    try ascend(toDepth: shared)
    var start = shared == 0 ? 0 : ends[shared - 1] + 1
    var rest: [Range<Int>] = []
    while let slash = nextSlash(in: member, from: start) {
      rest.append(start..<slash)
      start = slash + 1
    }
    for (index, range) in rest.enumerated() {
      let name = Array(member[range])
      if index >= rest.count - creating { try current.makeDirectory(rawName: name, mode: mode) }
      try descend(name)
    }
  }

  /// Closes every descriptor the cursor opened; the cursor is back at the base.
  public func closeAll() {
    for level in levels { level.descriptor?.close() }
    levels.removeAll()
    firstOpen = 0
    path.removeAll()
    ends.removeAll()
  }
}
