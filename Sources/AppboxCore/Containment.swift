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
/// Components are raw bytes (Linux names need not be UTF-8). This alone does not make a
/// path safe: `ContainedDirectory` resolves it on disk.
public struct RelativePath: Hashable, Sendable, CustomStringConvertible {
  /// The components' raw bytes.
  public let componentBytes: [[UInt8]]

  public init(validating text: String, container: String = "the home") throws {
    try self.init(validatingBytes: Array(text.utf8), container: container)
  }

  /// Validates a path given as raw bytes (such as a name the command line unescaped).
  public init(validatingBytes bytes: [UInt8], container: String = "the home") throws {
    let text = String(decoding: bytes, as: UTF8.self)
    if bytes.contains(0) {
      throw ContainmentError(path: text, reason: .containsNUL, container: container)
    }
    if bytes.first == UInt8(ascii: "/") {
      throw ContainmentError(path: text, reason: .absolute, container: container)
    }
    let parts = bytes.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: true).map(Array.init)
      .filter { $0 != [UInt8(ascii: ".")] }
    if parts.contains([UInt8(ascii: "."), UInt8(ascii: ".")]) {
      throw ContainmentError(path: text, reason: .parentReference, container: container)
    }
    if parts.isEmpty { throw ContainmentError(path: text, reason: .empty, container: container) }
    componentBytes = parts
  }

  init(componentBytes: [[UInt8]]) { self.componentBytes = componentBytes }

  /// The components as text (lossy for names that are not UTF-8).
  public var components: [String] { componentBytes.map { String(decoding: $0, as: UTF8.self) } }
  /// The whole path's raw bytes, components joined by `/`.
  public var bytes: [UInt8] { Array(componentBytes.joined(separator: [UInt8(ascii: "/")])) }
  /// The path as text, for messages (lossy for names that are not UTF-8).
  public var description: String { String(decoding: bytes, as: UTF8.self) }
  public var lastComponent: String { components[components.count - 1] }
  public var lastComponentBytes: [UInt8] { componentBytes[componentBytes.count - 1] }
  /// The path without its last component, or nil for a single component.
  public var parent: RelativePath? {
    componentBytes.count > 1 ? RelativePath(componentBytes: Array(componentBytes.dropLast())) : nil
  }
  public func appending(_ component: String) throws -> RelativePath {
    try appending(bytes: Array(component.utf8))
  }
  public func appending(bytes component: [UInt8]) throws -> RelativePath {
    try RelativePath(validatingBytes: bytes + [UInt8(ascii: "/")] + component)
  }
}

/// An open directory beneath which user paths are resolved; nothing it hands out can
/// lie outside it, whatever `..` or symlinks the path or the disk contain.
///
/// Resolution is `FileDescriptor.openBeneath` (openat2 with RESOLVE_BENEATH, or the
/// O_NOFOLLOW component walk), with this directory's symlink policy: `.followBeneath`
/// (the default) follows links only while they stay beneath; `.refuse` follows none.
public struct ContainedDirectory: Sendable {
  public let descriptor: FileDescriptor
  /// How messages name this directory: "the home", "Documents".
  public let container: String
  /// What resolution does with a symlink on the way.
  public let symlinks: SymlinkPolicy
  /// How paths are resolved (tests pin `.componentWalk`).
  public let strategy: ResolveStrategy

  /// Wraps an open directory descriptor; the caller keeps ownership of it.
  public init(
    descriptor: FileDescriptor, container: String, symlinks: SymlinkPolicy = .followBeneath,
    strategy: ResolveStrategy = .default
  ) {
    self.descriptor = descriptor
    self.container = container
    self.symlinks = symlinks
    self.strategy = strategy
  }

  /// Opens the directory at `path` (not following a final symlink).
  public static func open(
    _ path: String, container: String, symlinks: SymlinkPolicy = .followBeneath,
    strategy: ResolveStrategy = .default
  ) throws -> ContainedDirectory {
    let fd = try FileDescriptor.open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    return ContainedDirectory(descriptor: fd, container: container, symlinks: symlinks, strategy: strategy)
  }

  public func close() { descriptor.close() }

  /// Opens `path` beneath this directory. With `followFinalSymlink: false` the last
  /// component is opened with `O_NOFOLLOW`, so a symlink there is refused.
  /// Uses `openBeneath` (openat2, or openat component by component).
  public func open(
    _ path: RelativePath, _ flags: Int32, mode: mode_t = 0o644, followFinalSymlink: Bool = true
  )
    throws -> FileDescriptor
  {
    let finalFlags = followFinalSymlink ? flags : flags | O_NOFOLLOW
    do {
      return try descriptor.openBeneath(
        path.bytes, finalFlags, mode: mode, symlinks: symlinks, strategy: strategy,
        displayPath: path.description)
    } catch let error as SystemError {
      switch error.errno {
      case .crossDevice:
        throw ContainmentError(path: path.description, reason: .escapes, container: container)
      case .tooManyLinks:
        throw ContainmentError(path: path.description, reason: .symlink, container: container)
      default: throw error
      }
    }
  }

  /// Resolves every component but the last to a directory beneath this one and returns it
  /// open, with the last component's name: the way to create, replace or remove an entry
  /// without following a symlink in its place.
  public func resolveParent(of path: RelativePath) throws -> ContainedPath {
    guard let parent = path.parent else {
      return ContainedPath(
        parent: try descriptor.duplicate(), rawName: path.lastComponentBytes, relative: path)
    }
    let fd = try open(parent, O_RDONLY | O_DIRECTORY)
    return ContainedPath(parent: fd, rawName: path.lastComponentBytes, relative: path)
  }
}

/// An entry resolved beneath a contained directory: its parent directory, open, and its
/// final name (not yet opened, so it may not exist). The caller closes `parent`.
public struct ContainedPath: Sendable {
  public let parent: FileDescriptor
  /// The final name's raw bytes.
  public let rawName: [UInt8]
  public let relative: RelativePath

  public init(parent: FileDescriptor, rawName: [UInt8], relative: RelativePath) {
    self.parent = parent
    self.rawName = rawName
    self.relative = relative
  }

  /// The final name as text (lossy for a name that is not UTF-8: use `rawName` for calls).
  public var name: String { String(decoding: rawName, as: UTF8.self) }

  public func close() { parent.close() }

  /// The entry's status without following a final symlink, or nil if it does not exist.
  public func status() throws -> FileStatus? { try parent.status(ofRawName: rawName) }
}
