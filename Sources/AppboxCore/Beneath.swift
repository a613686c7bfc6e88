// The one resolver for "a path beneath a directory". Every path appbox resolves inside a
// home (user paths, backup scans, restores, imports) goes through `openBeneath`.
//
// Algorithm: `openat2(2)` with RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS (plus
// RESOLVE_NO_SYMLINKS unless the policy follows links beneath); where the kernel lacks
// openat2, or APPBOX_NO_OPENAT2=1 asks for it, a walk that opens one component at a time
// with O_NOFOLLOW. A path of PATH_MAX bytes or more is resolved in pieces: each piece
// (shorter than PATH_MAX, cut at a slash) beneath the directory the previous one opened,
// so depth is never limited by PATH_MAX. Intermediate directories are opened O_PATH, which
// needs only search permission, like ordinary path resolution.
//
// Invariants: nothing resolved here lies outside the starting directory; with `.refuse`
// no symlink is followed anywhere, the last component included; a refused symlink is
// reported as ELOOP and an escape as EXDEV, whichever strategy ran.

import CSystem
import Glibc

/// open(2)'s O_PATH, which the Glibc module does not import.
let O_PATH = Int32(APPBOX_O_PATH)

extension FileDescriptor {
  /// open(2)'s O_PATH flag (the Glibc module does not import it): a descriptor naming an
  /// inode without opening it, for fstat and the `*at` calls; needs no permission on it.
  public static let pathOnlyFlag = O_PATH
}

/// What `openBeneath` does with a symbolic link on the way.
public enum SymlinkPolicy: Sendable, Equatable {
  /// No symlink anywhere: every component, the last included, must be a real entry
  /// (a symlink is refused with ELOOP).
  case refuse
  /// Symlinks are followed while they stay beneath the starting directory (the last
  /// component too, unless the flags include O_NOFOLLOW). The component walk cannot check
  /// where a link leads, so there it refuses them like `.refuse`.
  case followBeneath
}

/// How `openBeneath` resolves a path.
public enum ResolveStrategy: Sendable, Equatable {
  /// `openat2(2)`, falling back to the component walk where the kernel lacks it.
  case automatic
  /// `openat(2)` one component at a time with O_NOFOLLOW, as on kernels without openat2.
  case componentWalk

  /// `.componentWalk` when APPBOX_NO_OPENAT2 is set in the environment, else `.automatic`.
  /// Read once at start-up and never changed: tests that want the walk pass it explicitly.
  public static let `default`: ResolveStrategy =
    getenv("APPBOX_NO_OPENAT2") != nil ? .componentWalk : .automatic
}

extension FileDescriptor {
  /// Opens `path` (raw bytes, components separated by `/`; empty means this directory)
  /// beneath this directory, never leaving it, treating symlinks as `symlinks` says.
  /// Throws `SystemError` naming `displayPath` (default: the path): ELOOP for a refused
  /// symlink, EXDEV for a path that would leave the directory.
  /// Uses `openat2(2)`, or `openat(2)` one component at a time.
  public func openBeneath(
    _ path: [UInt8], _ flags: Int32, mode: mode_t = 0o644, symlinks: SymlinkPolicy = .refuse,
    strategy: ResolveStrategy = .default, displayPath: String? = nil
  ) throws -> FileDescriptor {
    let display = displayPath ?? String(decoding: path, as: UTF8.self)
    // An absolute path leaves the directory by definition (as openat2 reports it).
    if path.first == UInt8(ascii: "/") { throw SystemError("open", path: display, errno: .crossDevice) }
    let pieces = Self.pieces(of: path)
    if pieces.isEmpty { return try open(".", flags, displayPath: display) }
    var current: FileDescriptor?
    do {
      for (index, piece) in pieces.enumerated() {
        let isLast = index == pieces.count - 1
        let next = try resolvePiece(
          piece, from: current ?? self, flags: isLast ? flags : (O_PATH | O_DIRECTORY), mode: mode,
          symlinks: symlinks, strategy: strategy, display: display)
        current?.close()
        current = next
      }
    } catch {
      current?.close()
      throw error
    }
    return current!
  }

  /// Splits `path` into pieces shorter than PATH_MAX at slashes (one piece for most paths).
  private static func pieces(of path: [UInt8]) -> [ArraySlice<UInt8>] {
    let limit = Int(PATH_MAX) - 1
    var trimmed = path[...]
    while trimmed.last == UInt8(ascii: "/") { trimmed = trimmed.dropLast() }
    if trimmed.isEmpty { return [] }
    if trimmed.count <= limit { return [trimmed] }
    var result: [ArraySlice<UInt8>] = []
    var start = trimmed.startIndex
    while start < trimmed.endIndex {
      var end = min(start + limit, trimmed.endIndex)
      if end < trimmed.endIndex {
        // Cut at the last slash inside the window (a name is at most NAME_MAX bytes).
        if let slash = trimmed[start..<end].lastIndex(of: UInt8(ascii: "/")), slash > start {
          end = slash
        }
      }
      result.append(trimmed[start..<end])
      start = end
      while start < trimmed.endIndex && trimmed[start] == UInt8(ascii: "/") { start += 1 }
    }
    return result
  }

  private func resolvePiece(
    _ piece: ArraySlice<UInt8>, from directory: FileDescriptor, flags: Int32, mode: mode_t,
    symlinks: SymlinkPolicy, strategy: ResolveStrategy, display: String
  ) throws -> FileDescriptor {
    let path = Array(piece)
    if strategy == .automatic {
      var resolve = UInt64(APPBOX_RESOLVE_BENEATH | APPBOX_RESOLVE_NO_MAGICLINKS)
      var finalFlags = flags | O_CLOEXEC
      if symlinks == .refuse {
        resolve |= UInt64(APPBOX_RESOLVE_NO_SYMLINKS)
        finalFlags |= O_NOFOLLOW
      }
      while true {
        let fd = withCName(path) { appbox_openat2(directory.rawValue, $0, finalFlags, UInt32(mode), resolve) }
        if fd >= 0 {
          let opened = FileDescriptor(rawValue: fd)
          if finalFlags & O_PATH != 0, finalFlags & O_NOFOLLOW != 0,
            try opened.closingOnError({ try $0.status() })
              .type == .symlink
          {
            opened.close()  // O_PATH | O_NOFOLLOW opens a final symlink itself instead of refusing it
            throw SystemError("open", path: display, errno: .tooManyLinks)
          }
          return opened
        }
        let errno = Errno.current
        if errno == Errno(rawValue: EAGAIN) { continue }  // a concurrent rename: retry
        if errno == .noSystemCall { break }
        // A symlink met with O_NOFOLLOW | O_DIRECTORY fails as ENOTDIR, like a file in the
        // middle of the path: the walk below tells the two apart (ELOOP for the link).
        if errno == .notDirectory && symlinks == .refuse { break }
        throw SystemError("open", path: display, errno: errno)
      }
    }
    return try walk(
      path, from: directory, flags: flags | O_NOFOLLOW | O_CLOEXEC, mode: mode, display: display)
  }

  /// Opens `path` one component at a time with O_NOFOLLOW, refusing `..` and every symlink.
  private func walk(
    _ path: [UInt8], from directory: FileDescriptor, flags: Int32, mode: mode_t, display: String
  )
    throws -> FileDescriptor
  {
    let components = path.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: true)
      .filter { !$0.elementsEqual([UInt8(ascii: ".")]) }
    if components.isEmpty { return try directory.open(".", flags, displayPath: display) }
    var current: FileDescriptor?
    do {
      for (index, component) in components.enumerated() {
        let name = Array(component)
        if name == [UInt8(ascii: "."), UInt8(ascii: ".")] {
          throw SystemError("open", path: display, errno: .crossDevice)
        }
        let isLast = index == components.count - 1
        let stepFlags = isLast ? flags : (O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        let parent = current ?? directory
        let fd = withCName(name) { cName in
          retryingOnInterrupt { Glibc.openat(parent.rawValue, cName, stepFlags, mode) }
        }
        guard fd >= 0 else {
          var errno = Errno.current
          // O_NOFOLLOW reports a symlink as ELOOP, or as ENOTDIR with O_DIRECTORY: look.
          if errno == .notDirectory, (try? parent.status(ofRawName: name))??.type == .symlink {
            errno = .tooManyLinks
          }
          throw SystemError("open", path: display, errno: errno)
        }
        let opened = FileDescriptor(rawValue: fd)
        current?.close()
        current = opened
        if stepFlags & O_PATH != 0, stepFlags & O_DIRECTORY == 0, try opened.status().type == .symlink {
          // O_PATH | O_NOFOLLOW opens a symlink itself instead of refusing it.
          throw SystemError("open", path: display, errno: .tooManyLinks)
        }
      }
    } catch {
      current?.close()
      throw error
    }
    return current!
  }
}

extension FileDescriptor {
  /// Runs `body`; closes this descriptor if it throws.
  public func closingOnError<R>(_ body: (FileDescriptor) throws -> R) throws -> R {
    do { return try body(self) } catch {
      close()
      throw error
    }
  }
}
