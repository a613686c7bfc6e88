import AppboxCore
import AppboxCrypto
import AppboxPlist
import Foundation
import Glibc

/// Whether an installed bundle still matches its seal.
public enum SealState: Sendable, Equatable {
  case valid
  /// `path` is the first path (in sorted order) that differs; `reason` says how.
  case broken(path: String, reason: String)

  public var isValid: Bool { self == .valid }

  public var summary: String {
    switch self {
    case .valid: return "valid"
    case .broken(let path, let reason): return "broken: '\(path)' \(reason)"
    }
  }
}

/// `_CodeSignature/CodeResources`: `files2` maps each path of the bundle to a dictionary
/// with `hash2` (SHA-256 of the file) or `symlink` (the link's target).
struct CodeResources: Equatable {
  static let path = "_CodeSignature/CodeResources"

  enum Entry: Equatable {
    case file(Digest, optional: Bool)
    case symlink(String)
  }

  var files: [String: Entry]

  /// The seal of a walked bundle: every file and symlink outside `_CodeSignature/`.
  init(items: [BundleItem]) {
    var files: [String: Entry] = [:]
    for item in items where !item.path.hasPrefix("_CodeSignature/") && item.path != "_CodeSignature" {
      switch item {
      case .file(let path, let digest, _): files[path] = .file(digest, optional: false)
      case .symlink(let path, let target): files[path] = .symlink(target)
      case .directory: break
      }
    }
    self.files = files
  }

  init(data: Data, bundle: String) throws {
    func invalid(_ message: String) -> ContainerError {
      ContainerError(.invalidBundle, "Invalid bundle '\(bundle)': \(CodeResources.path) \(message)")
    }
    let plist: PropertyList
    do {
      plist = try PropertyList.decode(data, limits: PropertyListLimits(maxDepth: 16, maxObjects: 2_000_000))
    } catch {
      throw invalid("is not a valid property list (\(error))")
    }
    guard let files2 = plist["files2"]?.dictionary else { throw invalid("has no files2 dictionary") }
    var files: [String: Entry] = [:]
    for (path, value) in files2 {
      if let hash = value["hash2"]?.data {
        guard hash.count == 32 else { throw invalid("has a hash2 for '\(path)' that is not SHA-256") }
        files[path] = .file(Digest(bytes: hash), optional: value["optional"]?.bool ?? false)
      } else if let target = value["symlink"]?.string {
        files[path] = .symlink(target)
      } else {
        throw invalid("entry '\(path)' has neither hash2 nor symlink")
      }
    }
    self.files = files
  }

  func xmlData() -> Data {
    var files2: [String: PropertyList] = [:]
    for (path, entry) in files {
      switch entry {
      case .file(let digest, let optional):
        var entry: [String: PropertyList] = ["hash2": .data(Data(digest.bytes))]
        if optional { entry["optional"] = .bool(true) }
        files2[path] = .dictionary(entry)
      case .symlink(let target): files2[path] = .dictionary(["symlink": .string(target)])
      }
    }
    let rules: PropertyList = .dictionary(["^.*": .bool(true)])
    return PropertyList.dictionary([
      "files": .dictionary([:]), "files2": .dictionary(files2), "rules2": rules,
    ])
    .xmlData()
  }

  /// Compares the seal with a walk of the bundle; reports the first differing path.
  func verify(_ items: [BundleItem]) -> SealState {
    let actual = CodeResources(items: items).files
    for path in Set(actual.keys).union(files.keys).sorted() {
      switch (files[path], actual[path]) {
      case (nil, _): return .broken(path: path, reason: "was added after sealing")
      case (.file(_, let optional)?, nil):
        if !optional { return .broken(path: path, reason: "is missing") }
      case (.symlink?, nil): return .broken(path: path, reason: "is missing")
      case (.file(let expected, _)?, .file(let found, _)?):
        if expected != found { return .broken(path: path, reason: "was modified (SHA-256 differs)") }
      case (.symlink(let expected)?, .symlink(let found)?):
        if expected != found { return .broken(path: path, reason: "now points to '\(found)'") }
      case (.file?, .symlink?): return .broken(path: path, reason: "was replaced by a symbolic link")
      case (.symlink?, .file?): return .broken(path: path, reason: "was replaced by a file")
      }
    }
    return .valid
  }
}

/// The modes of a bundle's directories and regular files, as sealed (symlinks have no
/// mode of their own). The registry keeps them beside the seal's digest as "MODE PATH"
/// lines in path order, MODE in octal, "." for the bundle directory itself; a mode that
/// changed (a setuid bit, a file made writable or executable) breaks the seal.
public struct BundleModes: Sendable, Equatable {
  public var entries: [String: mode_t] = [:]

  /// What install gives a copied bundle's directories.
  static let directoryMode: mode_t = 0o755
  /// What install gives a copied bundle's files.
  static func fileMode(executable: Bool) -> mode_t { executable ? 0o755 : 0o644 }

  public init() {}

  /// Parses the registry's text; nil when it is malformed.
  public init?(text: String) {
    for line in text.split(separator: "\n") {
      guard let space = line.firstIndex(of: " "), let mode = mode_t(line[..<space], radix: 8) else {
        return nil
      }
      entries[String(line[line.index(after: space)...])] = mode
    }
  }

  public var text: String {
    entries.sorted { $0.key < $1.key }.map { String($0.value, radix: 8) + " " + $0.key }.joined(
      separator: "\n")
  }

  /// The first path (in sorted order) whose mode differs from `sealed`'s, and why.
  func difference(from sealed: BundleModes) -> SealState {
    for (path, mode) in entries.sorted(by: { $0.key < $1.key }) {
      guard let expected = sealed.entries[path] else { continue }  // the content seal names new paths
      if expected != mode {
        return .broken(
          path: path,
          reason: "changed mode (sealed \(String(expected, radix: 8)), now \(String(mode, radix: 8)))")
      }
    }
    return .valid
  }

  /// For a seal made before modes were sealed: the first path whose mode no install would
  /// have given (setuid, setgid or sticky, or writable by others than its owner).
  func unsafeEntry() -> SealState {
    for (path, mode) in entries.sorted(by: { $0.key < $1.key }) where mode & 0o7022 != 0 {
      return .broken(
        path: path,
        reason: "has mode \(String(mode, radix: 8)) (setuid, setgid, sticky or writable by others)")
    }
    return .valid
  }
}

/// Checking an installed bundle against its seal.
public enum Seal {
  /// Walks the bundle at `bundlePath` and checks it against its CodeResources, the
  /// CodeResources file itself against `expectedDigest` (the hex SHA-256 the registry
  /// recorded at install), so rewriting both the files and the seal is caught too, and
  /// every mode against `expectedModes` (nil for a seal made before modes were sealed:
  /// then only modes no install gives are refused). Returns the state and the modes found.
  public static func check(bundleAt bundlePath: String, expectedDigest: String, expectedModes: String?) throws
    -> (state: SealState, modes: BundleModes)
  {
    let name = splitPath(bundlePath).name
    let directory: FileDescriptor
    var modes = BundleModes()
    do {
      directory = try FileDescriptor.open(bundlePath, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    } catch let error as SystemError where error.errno == .noEntry {
      return (.broken(path: ".", reason: "is missing (the bundle directory is gone)"), modes)
    } catch let error as SystemError where error.errno == .tooManyLinks || error.errno == .notDirectory {
      return (.broken(path: ".", reason: "was replaced by something that is not a directory"), modes)
    }
    defer { directory.close() }
    let items: [BundleItem]
    do {
      items = try BundleWalker(bundle: name).walk(directory, copyingTo: nil, modes: &modes)
    } catch let error as ContainerError {
      return (.broken(path: ".", reason: "holds something a bundle may not: \(error.message)"), modes)
    }
    guard case .file(_, let sealDigest, _)? = items.first(where: { $0.path == CodeResources.path }) else {
      return (.broken(path: CodeResources.path, reason: "is missing"), modes)
    }
    guard sealDigest.hex == expectedDigest else {
      return (
        .broken(path: CodeResources.path, reason: "was modified (it is not the seal recorded at install)"),
        modes
      )
    }
    let sealFile = try directory.open(CodeResources.path, O_RDONLY | O_NOFOLLOW)
    let data = try sealFile.closeAfter { Data(try $0.readAll(limit: 64 << 20)) }
    let content = try CodeResources(data: data, bundle: name).verify(items)
    guard content.isValid else { return (content, modes) }
    guard let expectedModes else { return (modes.unsafeEntry(), modes) }
    guard let sealed = BundleModes(text: expectedModes) else {
      return (.broken(path: ".", reason: "has a mode record in the registry that cannot be read"), modes)
    }
    return (modes.difference(from: sealed), modes)
  }

  /// The SHA-256 of every file the seal of the bundle at `bundlePath` lists, by path in the
  /// bundle, when its CodeResources is the one the registry recorded (`expectedDigest`, the
  /// hex SHA-256 of the file); nil otherwise. Backups take these digests instead of hashing
  /// the bundle's files again (a bundle is root's and read-only to its app; `launch` refuses
  /// one that does not match its seal).
  public static func sealedDigests(bundleAt bundlePath: String, expectedDigest: String) -> [String: Digest]? {
    guard let directory = try? FileDescriptor.open(bundlePath, O_RDONLY | O_DIRECTORY | O_NOFOLLOW) else {
      return nil
    }
    defer { directory.close() }
    guard let file = try? directory.open(CodeResources.path, O_RDONLY | O_NOFOLLOW),
      let bytes = try? file.closeAfter({ try $0.readAll(limit: 64 << 20) }),
      SHA256.hash(bytes).hex == expectedDigest,
      let resources = try? CodeResources(data: Data(bytes), bundle: splitPath(bundlePath).name)
    else { return nil }
    var digests: [String: Digest] = [:]
    for (path, entry) in resources.files {
      if case .file(let digest, _) = entry { digests[path] = digest }
    }
    return digests
  }

  /// The state alone (see `check`).
  public static func verify(bundleAt bundlePath: String, expectedDigest: String, expectedModes: String? = nil)
    throws
    -> SealState
  {
    try check(bundleAt: bundlePath, expectedDigest: expectedDigest, expectedModes: expectedModes).state
  }
}
