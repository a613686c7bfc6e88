// Helpers shared by the archive tests: unique temp directories, byte-exact file system access
// (names as [UInt8], never String), running GNU tar and bsdtar, and whole-archive write/read.

import AppboxArchive
import AppboxTestSupport
import CSystem
import Foundation
import Testing

#if canImport(Glibc)
  import Glibc
#endif

/// Bytes of a string literal, for readable test data.
func b(_ text: String) -> [UInt8] { Array(text.utf8) }

/// A fresh directory under /tmp, removed when `body` returns.
func withTemporaryDirectory<T>(_ body: (String) throws -> T) throws -> T {
  var template = Array("/tmp/appbox-archive-test-XXXXXX".utf8CString)
  guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
    throw POSIXFailure(call: "mkdtemp", code: errno)
  }
  let path = String(cString: made)
  defer { try? FileManager.default.removeItem(atPath: path) }
  return try body(path)
}

/// Joins a directory path and raw name bytes.
func join(_ directory: String, _ name: [UInt8]) -> [UInt8] { b(directory) + [UInt8(ascii: "/")] + name }

func withCPath<T>(_ path: [UInt8], _ body: (UnsafePointer<CChar>) -> T) -> T {
  let terminated = (path + [0]).map { CChar(bitPattern: $0) }
  return terminated.withUnsafeBufferPointer { body($0.baseAddress!) }
}

/// Creates (or truncates) the file at `path` and writes `contents` to it.
func createFile(_ path: [UInt8], _ contents: [UInt8] = [], mode: mode_t = 0o644) throws {
  let fd = withCPath(path) { open($0, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode) }
  guard fd >= 0 else { throw POSIXFailure(call: "open", code: errno) }
  defer { close(fd) }
  try contents.withUnsafeBytes { buffer in
    var done = 0
    while done < buffer.count {
      let count = write(fd, buffer.baseAddress! + done, buffer.count - done)
      guard count > 0 else { throw POSIXFailure(call: "write", code: errno) }
      done += count
    }
  }
}

struct POSIXFailure: Error, CustomStringConvertible {
  var call: String
  var code: Int32
  var description: String { "\(call): \(String(cString: strerror(code)))" }
}

func readFile(_ path: [UInt8]) throws -> [UInt8] {
  let fd = withCPath(path) { open($0, O_RDONLY | O_CLOEXEC) }
  guard fd >= 0 else { throw POSIXFailure(call: "open", code: errno) }
  defer { close(fd) }
  var result: [UInt8] = []
  var chunk = [UInt8](repeating: 0, count: 65536)
  while true {
    let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
    guard count >= 0 else { throw POSIXFailure(call: "read", code: errno) }
    if count == 0 { return result }
    result.append(contentsOf: chunk[0..<count])
  }
}

func lstatOf(_ path: [UInt8]) throws -> stat {
  var result = stat()
  guard withCPath(path, { lstat($0, &result) }) == 0 else { throw POSIXFailure(call: "lstat", code: errno) }
  return result
}

func readLink(_ path: [UInt8]) throws -> [UInt8] {
  var buffer = [CChar](repeating: 0, count: 4096)
  let count = withCPath(path) { readlink($0, &buffer, buffer.count) }
  guard count >= 0 else { throw POSIXFailure(call: "readlink", code: errno) }
  return buffer[0..<count].map { UInt8(bitPattern: $0) }
}

/// Entry names of a directory exactly as the kernel returns them.
func directoryNames(_ path: [UInt8]) throws -> Set<[UInt8]> {
  guard let dir = withCPath(path, { opendir($0) }) else { throw POSIXFailure(call: "opendir", code: errno) }
  defer { closedir(dir) }
  var names: Set<[UInt8]> = []
  while let entry = readdir(dir) {
    let name = Array(
      UnsafeRawBufferPointer(start: appbox_dirent_name(entry), count: strlen(appbox_dirent_name(entry))))
    if name != b(".") && name != b("..") { names.insert(name) }
  }
  return names
}

func getExtendedAttribute(_ path: [UInt8], _ name: String) -> [UInt8]? {
  var buffer = [UInt8](repeating: 0, count: 65536)
  let count = withCPath(path) { lgetxattr($0, name, &buffer, buffer.count) }
  return count < 0 ? nil : Array(buffer[0..<count])
}

func setExtendedAttribute(_ path: [UInt8], _ name: String, _ value: [UInt8]) throws {
  let status = withCPath(path) { cPath in
    value.withUnsafeBytes { lsetxattr(cPath, name, $0.baseAddress, $0.count, 0) }
  }
  guard status == 0 else { throw POSIXFailure(call: "lsetxattr", code: errno) }
}

func setModificationTime(_ path: [UInt8], seconds: Int, nanoseconds: Int) throws {
  var times = [
    timespec(tv_sec: seconds, tv_nsec: nanoseconds), timespec(tv_sec: seconds, tv_nsec: nanoseconds),
  ]
  guard withCPath(path, { utimensat(AT_FDCWD, $0, &times, AT_SYMLINK_NOFOLLOW) }) == 0 else {
    throw POSIXFailure(call: "utimensat", code: errno)
  }
}

struct ToolResult {
  var status: Int32
  var stdout: [UInt8]
  var stderr: String
}

/// Runs a tool to completion with a fixed locale (never the developer's) and captures its output.
func runTool(_ executable: String, _ arguments: [String], locale: String = "C.UTF-8") throws -> ToolResult {
  let result = try runProcess(
    executable, arguments, environment: ["PATH": "/usr/bin:/bin", "LC_ALL": locale])
  return ToolResult(status: result.status, stdout: result.stdout, stderr: result.err)
}

/// A member to write: its header and, for regular files, its data.
struct Member {
  var entry: ArchiveEntry
  var data: [UInt8] = []

  /// A regular file named `name` holding `data`.
  static func file(_ name: String, _ data: [UInt8], modified time: ArchiveTimestamp) -> Member {
    Member(entry: .file(Array(name.utf8), size: Int64(data.count), modificationTime: time), data: data)
  }
}

/// Writes each of `members` through `writer` (its data `chunkSize` bytes at a time); returns
/// the uncompressed offsets of each header and of each member's data.
func write(_ members: [Member], with writer: ArchiveWriter, chunkSize: Int) throws -> (
  headers: [Int64], data: [Int64]
) {
  var headers: [Int64] = []
  var data: [Int64] = []
  for member in members {
    headers.append(writer.uncompressedOffset)
    try writer.writeHeader(member.entry)
    data.append(writer.uncompressedOffset)
    var start = 0
    while start < member.data.count {
      let end = min(start + chunkSize, member.data.count)
      try member.data[start..<end].withUnsafeBytes { try writer.writeData($0) }
      start = end
    }
    try writer.finishEntry()
  }
  return (headers, data)
}

/// Writes `members` to a new file at `path`; returns the uncompressed offset of each header.
@discardableResult
func writeArchive(
  _ members: [Member], to path: String, compression: ArchiveCompression = .none, chunkSize: Int = 65536
) throws -> [Int64] {
  let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
  guard fd >= 0 else { throw POSIXFailure(call: "open", code: errno) }
  defer { close(fd) }
  let writer = try ArchiveWriter(fileDescriptor: fd, compression: compression, name: path)
  let offsets = try write(members, with: writer, chunkSize: chunkSize)
  try writer.finish()
  return offsets.headers
}

/// Reads every member of the archive at `path`, with its data.
func readArchive(_ path: String) throws -> [Member] {
  let reader = try ArchiveReader(path: path)
  var members: [Member] = []
  while let entry = try reader.nextEntry() {
    members.append(Member(entry: entry, data: try reader.readAllData()))
  }
  return members
}

/// Deterministic, non-repeating-looking bytes.
func patternBytes(count: Int, seed: UInt64) -> [UInt8] {
  var state = seed &* 6_364_136_223_846_793_005 &+ 1
  return (0..<count).map { _ in
    state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
    return UInt8(truncatingIfNeeded: state >> 33)
  }
}

/// Runs `body` and returns the ArchiveError it throws, failing the test if it throws nothing.
func archiveError(_ body: () throws -> Void, sourceLocation: SourceLocation = #_sourceLocation)
  -> ArchiveError?
{
  do {
    try body()
    Issue.record("expected an ArchiveError", sourceLocation: sourceLocation)
  } catch let error as ArchiveError {
    return error
  } catch {
    Issue.record("expected an ArchiveError, got \(error)", sourceLocation: sourceLocation)
  }
  return nil
}
