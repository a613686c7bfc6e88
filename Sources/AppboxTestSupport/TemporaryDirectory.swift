import AppboxCore
import Foundation
import Glibc

/// A fresh directory under /tmp for one test, removed when released. Tests run in
/// parallel, so every test makes its own and never changes the current directory.
public final class TemporaryDirectory: @unchecked Sendable {
  public let path: String

  /// A fresh directory under `base` (default /tmp).
  public init(_ label: String = "test", base: String = "/tmp") {
    var template = Array("\(base)/appbox-\(label)-XXXXXX".utf8CString)
    let result = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
    precondition(result != nil, "mkdtemp failed")
    path = String(
      cString: template.map { UInt8(bitPattern: $0) }.dropLast().map { CChar(bitPattern: $0) } + [0])
  }

  deinit { try? FileTree.remove(atPath: path) }

  /// `path/relative`.
  public func url(_ relative: String) -> String { relative.isEmpty ? path : path + "/" + relative }
}

/// Builds file trees from literals: `try tree.write("Documents/a.txt", "hello")`.
extension TemporaryDirectory {
  @discardableResult
  public func write(_ relative: String, _ content: String, mode: mode_t = 0o644) throws -> String {
    try write(relative, bytes: Array(content.utf8), mode: mode)
  }

  @discardableResult
  public func write(_ relative: String, bytes: [UInt8], mode: mode_t = 0o644) throws -> String {
    let full = url(relative)
    try FileManager.default.createDirectory(
      atPath: splitPath(full).directory, withIntermediateDirectories: true)
    guard FileManager.default.createFile(atPath: full, contents: Data(bytes)) else {
      throw SystemError("create", path: full)
    }
    guard chmod(full, mode) == 0 else { throw SystemError("chmod", path: full) }
    return full
  }

  public func makeDirectory(_ relative: String) throws {
    try FileManager.default.createDirectory(atPath: url(relative), withIntermediateDirectories: true)
  }

  public func symlink(_ relative: String, to target: String) throws {
    guard Glibc.symlink(target, url(relative)) == 0 else { throw SystemError("symlink", path: relative) }
  }

  public func read(_ relative: String) -> String? {
    FileManager.default.contents(atPath: url(relative)).map { String(decoding: $0, as: UTF8.self) }
  }

  public func exists(_ relative: String) -> Bool {
    var st = stat()
    return lstat(url(relative), &st) == 0
  }
}

/// Copies a tree with `cp -a` (tests only: fixtures into temp dirs).
public func copyTree(_ source: String, to destination: String) throws {
  let copy = try runProcess("/bin/cp", ["-a", source, destination])
  guard copy.status == 0 else {
    let reason = copy.err.trimmingCharacters(in: .whitespacesAndNewlines)
    throw SystemError("copy (\(reason))", path: source, errno: .ioError)
  }
}

/// The repository's checkout, found from this source file's location.
public let repositoryRoot: String = {
  var path = #filePath
  for _ in 0..<3 { path = splitPath(path).directory }
  return path
}()

/// A fixture bundle: `fixtureBundle("Notes-1.0/Notes.app")`.
public func fixturePath(_ relative: String) -> String { repositoryRoot + "/Fixtures/" + relative }

/// Extracts the device root kept in `Fixtures/devices/<name>.tar.gz` (a root an earlier
/// appbox made; `Fixtures/devices/README.md` says how) into `directory`; returns its path.
public func extractFixtureDevice(_ name: String, into directory: TemporaryDirectory) throws -> String {
  let result = try runProcess(
    "/bin/tar", ["-xzf", fixturePath("devices/\(name).tar.gz"), "-C", directory.path])
  guard result.status == 0 else {
    throw SystemError("extract the fixture device '\(name)'", path: directory.path, errno: .ioError)
  }
  return directory.url("device")
}
