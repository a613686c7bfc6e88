import AppboxCore
import AppboxCrypto
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

/// Checking an installed bundle against its seal.
public enum Seal {
  /// Walks the bundle at `bundlePath` and checks it against its CodeResources, and the
  /// CodeResources file itself against `expectedDigest` (the hex SHA-256 the registry
  /// recorded at install), so rewriting both the files and the seal is caught too.
  public static func verify(bundleAt bundlePath: String, expectedDigest: String) throws -> SealState {
    let name = splitPath(bundlePath).name
    let directory: FileDescriptor
    do {
      directory = try FileDescriptor.open(bundlePath, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    } catch let error as SystemError where error.errno == .noEntry {
      return .broken(path: ".", reason: "is missing (the bundle directory is gone)")
    } catch let error as SystemError where error.errno == .tooManyLinks || error.errno == .notDirectory {
      return .broken(path: ".", reason: "was replaced by something that is not a directory")
    }
    defer { directory.close() }
    let items: [BundleItem]
    do {
      items = try BundleWalker(bundle: name).walk(directory)
    } catch let error as ContainerError {
      return .broken(path: ".", reason: "holds something a bundle may not: \(error.message)")
    }
    guard case .file(_, let sealDigest, _)? = items.first(where: { $0.path == CodeResources.path }) else {
      return .broken(path: CodeResources.path, reason: "is missing")
    }
    guard sealDigest.hex == expectedDigest else {
      return .broken(
        path: CodeResources.path, reason: "was modified (it is not the seal recorded at install)")
    }
    let sealFile = try directory.open(CodeResources.path, O_RDONLY | O_NOFOLLOW)
    let data = try sealFile.closeAfter { Data(try $0.readAll(limit: 64 << 20)) }
    return try CodeResources(data: data, bundle: name).verify(items)
  }
}
