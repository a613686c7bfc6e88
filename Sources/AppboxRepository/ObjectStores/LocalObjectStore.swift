// A repository in a local directory: each object a file (`archives/<name>`), written through a
// temp file in the same directory, fsynced and renamed into place, the directory fsynced too.
// Temp files start with `.tmp-`; a killed writer leaves them behind, and removing them is
// debris removal's job (Repository.removeDebris).

import AppboxCore
import Foundation
import Glibc

package final class LocalObjectStore: ObjectStore {
  let root: String
  package var location: String { root }
  package var isShared: Bool { false }
  package var now: Date { Date() }

  static let temporaryPrefix = ".tmp-"

  init(root: String) { self.root = root }

  func path(_ name: String) -> String { root + "/" + name }

  package func create() throws {
    try Repository.makeDirectories(root)
  }

  package func exists() throws -> Bool {
    var isDirectory: ObjCBool = false
    return FileManager.default.fileExists(atPath: root, isDirectory: &isDirectory) && isDirectory.boolValue
  }

  /// Opens `directory` (creating it when `create`), or nil when it is missing. The caller
  /// closes it.
  private func openDirectory(_ directory: String, create: Bool) throws -> FileDescriptor? {
    if create { try Repository.makeDirectories(path(directory)) }
    do {
      return try FileDescriptor.open(path(directory), O_RDONLY | O_DIRECTORY)
    } catch let error as SystemError where error.errno == .noEntry {
      return nil
    }
  }

  package func list(_ directory: String) throws -> [StoredObject] {
    guard let handle = try openDirectory(directory, create: false) else { return [] }
    defer { handle.close() }
    var objects: [StoredObject] = []
    for entry in try handle.entries() where !entry.name.starts(with: [UInt8(ascii: ".")]) {
      guard let status = try handle.statusIfPresent(of: entry.nameString), status.type == .regular
      else { continue }
      objects.append(
        StoredObject(
          name: entry.nameString, size: status.size,
          modified: Date(
            timeIntervalSince1970: Double(status.modificationTime.seconds)
              + Double(status.modificationTime.nanoseconds) / 1e9)))
    }
    return objects.sorted { $0.name < $1.name }
  }

  /// `list`'s names from the directory's entries alone: an entry the file system types as a
  /// regular file is one, any other type is not; only an untyped entry costs a stat.
  package func names(_ directory: String) throws -> [String] {
    guard let handle = try openDirectory(directory, create: false) else { return [] }
    defer { handle.close() }
    var names: [String] = []
    for entry in try handle.entries() where !entry.name.starts(with: [UInt8(ascii: ".")]) {
      switch entry.type {
      case .regular: names.append(entry.nameString)
      case nil:
        if try handle.statusIfPresent(of: entry.nameString)?.type == .regular { names.append(entry.nameString) }
      default: continue
      }
    }
    return names.sorted()
  }

  /// Temp files and other dot-files in `directory` (debris of killed writers).
  func temporaryFiles(in directory: String) throws -> [String] {
    guard let handle = try openDirectory(directory, create: false) else { return [] }
    defer { handle.close() }
    return try handle.entries().map(\.nameString).filter {
      $0.hasPrefix(Self.temporaryPrefix) || $0.hasPrefix(".") && $0.contains(".tmp-")
    }
  }

  package func get(_ name: String) throws -> [UInt8]? {
    let descriptor: FileDescriptor
    do {
      descriptor = try FileDescriptor.open(path(name), O_RDONLY)
    } catch let error as SystemError where error.errno == .noEntry || error.errno == .notDirectory {
      return nil
    }
    return try descriptor.closeAfter { try $0.readAll(limit: 1 << 30) }
  }

  package func put(_ name: String, _ bytes: [UInt8]) throws {
    let (directory, file) = split(name)
    guard let handle = try openDirectory(directory, create: true) else {
      throw SystemError("open", path: path(directory), errno: .noEntry)
    }
    defer { handle.close() }
    let staged = try StagedFile(
      file, in: handle,
      temporaryName: Self.temporaryPrefix + file + "-" + String(UInt32.random(in: 0...UInt32.max), radix: 16),
      mode: 0o600, displayPath: path(name))
    try staged.descriptor.writeAll(bytes)
    try staged.commit()
  }

  /// Stages every object (each fsynced), renames them into place in order, then fsyncs each
  /// directory once. (Not `syncfs(2)`: it would wait for every other writer on the file
  /// system, which on a busy machine is most of a backup's time.)
  package func putAll(_ objects: [(name: String, bytes: [UInt8])]) throws {
    guard objects.count > 1 else {
      for object in objects { try put(object.name, object.bytes) }
      return
    }
    var staged: [(directory: FileDescriptor, temporary: String, file: String)] = []
    defer {
      for item in staged {
        if !item.temporary.isEmpty { _ = unlinkat(item.directory.rawValue, item.temporary, 0) }
        item.directory.close()
      }
    }
    for object in objects {
      let (directory, file) = split(object.name)
      try Repository.makeDirectories(path(directory))
      let handle = try FileDescriptor.open(path(directory), O_RDONLY | O_DIRECTORY)
      let temporary = Self.temporaryPrefix + file + "-" + String(UInt32.random(in: 0...UInt32.max), radix: 16)
      staged.append((handle, "", file))
      let descriptor = try handle.open(
        temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode: 0o600, displayPath: path(object.name))
      staged[staged.count - 1].temporary = temporary
      try descriptor.closeAfter { descriptor in
        try descriptor.writeAll(object.bytes)
        try descriptor.sync()
      }
    }
    for index in staged.indices {
      let item = staged[index]
      try item.directory.rename(item.temporary, to: item.file)
      staged[index].temporary = ""
    }
    for item in staged { try item.directory.sync() }
  }

  package func delete(_ names: [String]) throws {
    var touched: Set<String> = []
    for name in names {
      if unlink(path(name)) == 0 {
        touched.insert(split(name).directory)
      } else if errno != ENOENT {
        throw SystemError("remove", path: path(name))
      }
    }
    for directory in touched {
      if let handle = try openDirectory(directory, create: false) { try handle.closeAfter { try $0.sync() } }
    }
  }

  package func size(of name: String) throws -> Int64? {
    var st = stat()
    guard lstat(path(name), &st) == 0 else {
      if errno == ENOENT { return nil }
      throw SystemError("look up", path: path(name))
    }
    return Int64(st.st_size)
  }

  package func upload(_ name: String) throws -> ObjectUpload {
    let (directory, file) = split(name)
    try Repository.makeDirectories(path(directory))
    return try LocalUpload(directory: path(directory), name: file, displayPath: path(name))
  }

  package func reader(_ name: String, size: Int64) throws -> ObjectReader {
    let descriptor: FileDescriptor
    do {
      descriptor = try FileDescriptor.open(path(name), O_RDONLY | O_CLOEXEC)
    } catch let error as SystemError where error.errno == .noEntry {
      throw RepositoryError(.corruptArchive, "'\(path(name))' is missing")
    }
    return LocalReader(descriptor: descriptor, size: size, path: path(name))
  }

  private func split(_ name: String) -> (directory: String, file: String) {
    guard let slash = name.lastIndex(of: "/") else { return ("", name) }
    return (String(name[..<slash]), String(name[name.index(after: slash)...]))
  }
}

/// A staged file: `.tmp-<name>` beside the final name, renamed over nothing (`RENAME_NOREPLACE`)
/// at the commit, after an fsync; the directory is fsynced after the rename. Writeback of what is
/// written starts every 8 MiB, so the commit's fsync does not find the whole archive still in
/// memory. Abandoned (released without a commit), the temp file is removed. (Plain descriptors,
/// closed here exactly once: a noncopyable value kept in a class's optional storage was
/// destroyed twice by the optimizer.)
final class LocalUpload: ObjectUpload {
  private let directory: FileDescriptor
  private var file: FileDescriptor?
  private let name: String
  private let temporary: String
  private let displayPath: String
  private var renamed = false
  private var written: Int64 = 0
  private var flushed: Int64 = 0

  init(directory path: String, name: String, displayPath: String) throws {
    directory = try FileDescriptor.open(path, O_RDONLY | O_DIRECTORY)
    self.name = name
    self.displayPath = displayPath
    temporary = LocalObjectStore.temporaryPrefix + name
    do {
      file = try directory.open(
        temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode: 0o600, displayPath: displayPath)
    } catch {
      directory.close()
      throw error
    }
  }

  deinit {
    file?.close()
    if !renamed { _ = unlinkat(directory.rawValue, temporary, 0) }
    directory.close()
  }

  func write(_ bytes: UnsafeRawBufferPointer) throws {
    guard let file else { throw RepositoryError(.invalidRequest, "the upload is closed") }
    do {
      try file.writeAll(bytes)
    } catch let error as SystemError {
      throw SystemError("write", path: displayPath, errno: error.errno)
    }
    written += Int64(bytes.count)
    if written - flushed >= 8 << 20 {
      file.startWriteback(offset: flushed, length: written - flushed)
      flushed = written
    }
  }

  @discardableResult func commit(beforeVisible: () -> Void) throws -> Int64 {
    guard let file else { throw RepositoryError(.invalidRequest, "the upload is closed") }
    self.file = nil
    defer { file.close() }
    do {
      try file.setPermissions(0o600)
      try file.sync()
    } catch let error as SystemError {
      throw SystemError(error.operation, path: displayPath, errno: error.errno)
    }
    beforeVisible()
    try directory.rename(temporary, to: name, flags: .noReplace)
    renamed = true
    try directory.sync()
    return written
  }

  func abort() {
    file?.close()
    file = nil
  }
}

final class LocalReader: ObjectReader {
  private let descriptor: FileDescriptor
  let size: Int64
  let path: String

  init(descriptor: FileDescriptor, size: Int64, path: String) {
    self.descriptor = descriptor
    self.size = size
    self.path = path
  }

  deinit { descriptor.close() }

  func read(at offset: Int64, into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
    do {
      return try descriptor.read(into: buffer, at: offset)
    } catch let error as SystemError {
      throw SystemError("read", path: path, errno: error.errno)
    }
  }
}
