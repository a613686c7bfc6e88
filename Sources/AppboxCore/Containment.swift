import CSystem
import Glibc

/// Why a user path was refused before or while resolving it beneath a home.
public struct ContainmentError: AppboxFailure, Equatable {
  public enum Reason: Sendable, Equatable {
    case empty, containsNUL, absolute, parentReference, escapes, symlink
  }
  public var path: String
  public var reason: Reason
  /// What the path must stay inside, for the message ("the home", "Documents").
  public var container: String

  public init(path: String, reason: Reason, container: String) {
    self.path = path
    self.reason = reason
    self.container = container
  }

  public var kind: FailureKind {
    switch reason {
    case .empty, .containsNUL: return .invalidArgument
    case .absolute, .parentReference, .escapes, .symlink: return .denied
    }
  }

  public var description: String {
    switch reason {
    case .empty: return "Empty path: name a file inside \(container)"
    case .containsNUL: return "Path '\(path)' contains a NUL byte"
    case .absolute: return "Path '\(path)' is absolute; give it relative to \(container)"
    case .parentReference: return "Path '\(path)' contains '..'; paths may not leave \(container)"
    case .escapes: return "Path '\(path)' resolves outside \(container)"
    case .symlink: return "Path '\(path)' goes through a symbolic link, which is not followed here"
    }
  }
}

/// A path relative to some container directory, checked lexically: not empty, not
/// absolute, no `..` and no NUL. `.` components and repeated slashes are dropped.
/// This alone does not make a path safe: `ContainedDirectory` resolves it on disk.
public struct RelativePath: Hashable, Sendable, CustomStringConvertible {
  public let components: [String]

  public init(validating text: String, container: String = "the home") throws {
    if text.utf8.contains(0) {
      throw ContainmentError(path: text, reason: .containsNUL, container: container)
    }
    if text.hasPrefix("/") { throw ContainmentError(path: text, reason: .absolute, container: container) }
    let parts = text.split(separator: "/", omittingEmptySubsequences: true).map(String.init).filter {
      $0 != "."
    }
    if parts.contains("..") {
      throw ContainmentError(path: text, reason: .parentReference, container: container)
    }
    if parts.isEmpty { throw ContainmentError(path: text, reason: .empty, container: container) }
    components = parts
  }

  init(components: [String]) { self.components = components }

  public var description: String { components.joined(separator: "/") }
  public var lastComponent: String { components[components.count - 1] }
  /// The path without its last component, or nil for a single component.
  public var parent: RelativePath? {
    components.count > 1 ? RelativePath(components: Array(components.dropLast())) : nil
  }
  public func appending(_ component: String) throws -> RelativePath {
    try RelativePath(validating: description + "/" + component)
  }
}

/// An open directory beneath which user paths are resolved; nothing it hands out can
/// lie outside it, whatever `..` or symlinks the path or the disk contain.
///
/// Resolution uses `openat2(2)` with `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`, where
/// symlinks are followed only while they stay beneath. Where the kernel lacks openat2,
/// it walks component by component with `O_NOFOLLOW` and refuses every symlink.
public struct ContainedDirectory: Sendable {
  public let descriptor: FileDescriptor
  /// How messages name this directory: "the home", "Documents".
  public let container: String

  /// Wraps an open directory descriptor; the caller keeps ownership of it.
  public init(descriptor: FileDescriptor, container: String) {
    self.descriptor = descriptor
    self.container = container
  }

  /// Opens the directory at `path` (not following a final symlink).
  public static func open(_ path: String, container: String) throws -> ContainedDirectory {
    let fd = try FileDescriptor.open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    return ContainedDirectory(descriptor: fd, container: container)
  }

  public func close() { descriptor.close() }

  /// Set to force the component-wise walk, as on kernels without openat2 (tests use it;
  /// so does the environment variable APPBOX_NO_OPENAT2=1).
  nonisolated(unsafe) public static var forceComponentWalk = getenv("APPBOX_NO_OPENAT2") != nil

  /// Opens `path` beneath this directory. With `followFinalSymlink: false` the last
  /// component is opened with `O_NOFOLLOW`, so a symlink there is refused.
  /// Uses `openat2(2)`, or `openat(2)` component by component.
  public func open(
    _ path: RelativePath, _ flags: Int32, mode: mode_t = 0o644, followFinalSymlink: Bool = true
  )
    throws -> FileDescriptor
  {
    let finalFlags = (followFinalSymlink ? flags : flags | O_NOFOLLOW) | O_CLOEXEC
    if !Self.forceComponentWalk {
      let resolve = UInt64(APPBOX_RESOLVE_BENEATH | APPBOX_RESOLVE_NO_MAGICLINKS)
      while true {
        let fd = appbox_openat2(descriptor.rawValue, path.description, finalFlags, UInt32(mode), resolve)
        if fd >= 0 { return FileDescriptor(rawValue: fd) }
        let errno = Errno.current
        switch errno {
        case .noSystemCall: break  // fall through to the walk below
        case Errno(rawValue: EAGAIN): continue  // a concurrent rename; openat2 asks to retry
        default: throw translate(errno, path: path)
        }
        break
      }
    }
    return try walk(path, finalFlags: finalFlags | O_NOFOLLOW, mode: mode)
  }

  /// Resolves every component but the last to a directory beneath this one and returns it
  /// open, with the last component's name: the way to create, replace or remove an entry
  /// without following a symlink in its place.
  public func resolveParent(of path: RelativePath) throws -> ContainedPath {
    guard let parent = path.parent else {
      return ContainedPath(parent: try descriptor.duplicate(), name: path.lastComponent, relative: path)
    }
    let fd = try open(parent, O_RDONLY | O_DIRECTORY)
    return ContainedPath(parent: fd, name: path.lastComponent, relative: path)
  }

  private func walk(_ path: RelativePath, finalFlags: Int32, mode: mode_t) throws -> FileDescriptor {
    var current = try descriptor.duplicate()
    for (index, component) in path.components.enumerated() {
      let isLast = index == path.components.count - 1
      let flags = isLast ? finalFlags : (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
      let fd = retryingOnInterrupt { Glibc.openat(current.rawValue, component, flags, mode) }
      let errno = Errno.current
      guard fd >= 0 else {
        // O_NOFOLLOW reports a symlink as ELOOP, or as ENOTDIR with O_DIRECTORY: look.
        let isSymlink = (try? current.status(of: component))?.type == .symlink
        current.close()
        if isSymlink && (errno == .notDirectory || errno == .tooManyLinks) {
          throw ContainmentError(path: path.description, reason: .symlink, container: container)
        }
        throw translate(errno, path: path)
      }
      current.close()
      current = FileDescriptor(rawValue: fd)
    }
    return current
  }

  private func translate(_ errno: Errno, path: RelativePath) -> Error {
    switch errno {
    case .crossDevice: return ContainmentError(path: path.description, reason: .escapes, container: container)
    case .tooManyLinks:
      return ContainmentError(path: path.description, reason: .symlink, container: container)
    default: return SystemError("open", path: path.description, errno: errno)
    }
  }
}

/// An entry resolved beneath a contained directory: its parent directory, open, and its
/// final name (not yet opened, so it may not exist). The caller closes `parent`.
public struct ContainedPath: Sendable {
  public let parent: FileDescriptor
  public let name: String
  public let relative: RelativePath

  public func close() { parent.close() }

  /// The entry's status without following a final symlink, or nil if it does not exist.
  public func status() throws -> FileStatus? { try parent.statusIfPresent(of: name) }
}
