// What `import` reads members from: a tar archive (any compression libarchive reads) or a
// directory (an `.xcappdata` package). Both give the same thing, `ArchiveEntry` headers with
// data as runs at offsets (holes left out), so the planner, validator and builder do not care
// which it is. A source can be opened more than once: import reads it twice (plan, then build).
//
// The directory reader is as careful as the tar one is with hostile bytes: it walks with
// descriptors only (openat with O_NOFOLLOW, never a path), reports a symlink as a symlink and a
// FIFO or device as what it is (the validator refuses those), reports a second path of a file
// with several links as a hard link to the first, and gives entries in name order so that two
// walks of an unchanged tree give the same members.

import AppboxArchive
import AppboxContainer
import AppboxCore
import AppboxRepository
import Glibc

/// Members with their data, one after the other.
protocol ImportMemberReader: AnyObject {
  /// The next member's header, or nil at the end.
  func nextMember() throws -> ArchiveEntry?
  /// The current member's next run of data, copied into `buffer`, or nil after the last.
  func readChunk(into buffer: UnsafeMutableRawBufferPointer) throws -> ArchiveChunk?
  /// The current member's length once its data was read (holes at the end included).
  var deliveredLength: Int64 { get }
  /// What the reader read around instead of failing, so far.
  var warnings: [ArchiveWarning] { get }
}

extension ArchiveReader: ImportMemberReader {
  func nextMember() throws -> ArchiveEntry? { try nextEntry() }
}

/// Where an import reads from.
enum ImportSource {
  case archive(path: String)
  case directory(path: String)

  /// A directory at `path` is read as a package; anything else as an archive.
  static func at(_ path: String) throws -> ImportSource {
    var status = stat()
    guard stat(path, &status) == 0 else {
      if errno == ENOENT { throw BackupError(.notFound, "No archive or package at '\(path)'") }
      throw SystemError("open", path: path)
    }
    return (status.st_mode & S_IFMT) == S_IFDIR ? .directory(path: path) : .archive(path: path)
  }

  var path: String {
    switch self {
    case .archive(let path), .directory(let path): return path
    }
  }

  /// Starts reading from the first member.
  func open() throws -> ImportMemberReader {
    switch self {
    case .archive(let path): return try ArchiveReader(path: path)
    case .directory(let path): return try DirectoryMemberReader(path: path)
    }
  }
}

/// Reads a directory tree as members, depth first in raw name order.
final class DirectoryMemberReader: ImportMemberReader {
  static let maxDepth = 256

  private struct Frame {
    var descriptor: FileDescriptor
    var path: [UInt8]
    var names: [[UInt8]]
    var next = 0
  }

  private let displayPath: String
  private var stack: [Frame] = []
  /// The open regular file whose data is being read, its runs, and how far it got.
  private var file: (descriptor: FileDescriptor, path: [UInt8], size: Int64, runs: [Range<Int64>], run: Int)?
  private var position: Int64 = 0
  private var firstPathOfInode: [FileIdentity: [UInt8]] = [:]
  private(set) var deliveredLength: Int64 = 0
  var warnings: [ArchiveWarning] { [] }

  private struct FileIdentity: Hashable {
    var device: UInt64
    var inode: UInt64
  }

  init(path: String) throws {
    displayPath = path
    let root = try FileDescriptor.open(path, O_RDONLY | O_DIRECTORY)
    do {
      stack.append(Frame(descriptor: root, path: [], names: try Self.sortedNames(root)))
    } catch {
      root.close()
      throw error
    }
  }

  deinit {
    closeFile()
    for frame in stack { frame.descriptor.close() }
  }

  private static func sortedNames(_ directory: FileDescriptor) throws -> [[UInt8]] {
    try directory.entries().map(\.name).sorted { $0.lexicographicallyPrecedes($1) }
  }

  private func closeFile() {
    file?.descriptor.close()
    file = nil
  }

  func nextMember() throws -> ArchiveEntry? {
    closeFile()
    while let top = stack.last {
      guard top.next < top.names.count else {
        stack.removeLast().descriptor.close()
        continue
      }
      let name = top.names[top.next]
      stack[stack.count - 1].next += 1
      let path = joinPath(top.path, name)
      guard let status = try top.descriptor.status(ofRawName: name) else { continue }  // gone since listed
      if let entry = try member(named: name, at: path, status: status, in: top.descriptor) { return entry }
    }
    return nil
  }

  private func member(
    named name: [UInt8], at path: [UInt8], status: FileStatus, in parent: FileDescriptor
  ) throws -> ArchiveEntry? {
    var entry = ArchiveEntry(
      path: path, type: .regular, permissions: UInt32(status.permissions), uid: status.uid, gid: status.gid,
      modificationTime: ArchiveTimestamp(
        seconds: status.modificationTime.seconds, nanoseconds: status.modificationTime.nanoseconds))
    switch status.type {
    case .directory:
      guard stack.count < Self.maxDepth else {
        throw BackupError(
          .refusedArchive, "'\(display(path))' is nested deeper than \(Self.maxDepth) directories")
      }
      let child = try parent.open(rawName: name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
      do {
        entry.type = .directory
        entry.extendedAttributes = try attributes(of: child)
        stack.append(Frame(descriptor: child, path: path, names: try Self.sortedNames(child)))
      } catch {
        child.close()
        throw error
      }
      return entry
    case .regular:
      let fd = try parent.open(rawName: name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK)
      do {
        let opened = try fd.status()
        guard opened.type == .regular, opened.inode == status.inode else {
          fd.close()
          throw BackupError(.refusedArchive, "'\(display(path))' changed while it was read")
        }
        entry.permissions = UInt32(opened.permissions)
        if opened.linkCount > 1 {
          let identity = FileIdentity(device: opened.device, inode: opened.inode)
          if let first = firstPathOfInode[identity] {
            fd.close()
            entry.type = .hardlink
            entry.linkTarget = first
            return entry
          }
          firstPathOfInode[identity] = path
        }
        entry.size = opened.size
        entry.extendedAttributes = try attributes(of: fd)
        let runs = opened.mayBeSparse ? try fd.dataRegions(size: opened.size) : nil
        entry.sparseRegions = runs?.map { ArchiveDataRegion(offset: $0.lowerBound, length: Int64($0.count)) }
        file = (fd, path, opened.size, runs ?? (opened.size > 0 ? [0..<opened.size] : []), 0)
        position = 0
        deliveredLength = 0
      } catch {
        if file?.descriptor != fd { fd.close() }
        throw error
      }
      return entry
    case .symlink:
      entry.type = .symlink
      entry.permissions = 0o777
      entry.linkTarget = try parent.readLink(rawName: name)
      return entry
    case .fifo, .socket, .characterDevice, .blockDevice, .unknown:
      entry.type = .other(UInt32(status.mode & S_IFMT))
      return entry
    }
  }

  private func attributes(of descriptor: FileDescriptor) throws -> [ArchiveExtendedAttribute] {
    try descriptor.userExtendedAttributes().map { ArchiveExtendedAttribute(name: $0.name, value: $0.value) }
  }

  func readChunk(into buffer: UnsafeMutableRawBufferPointer) throws -> ArchiveChunk? {
    guard var current = file else { return nil }
    while current.run < current.runs.count {
      let run = current.runs[current.run]
      if position < run.lowerBound { position = run.lowerBound }
      if position >= run.upperBound {
        current.run += 1
        file = current
        continue
      }
      let wanted = Int(min(Int64(buffer.count), run.upperBound - position))
      let count = try current.descriptor.read(
        into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<wanted]), at: position)
      guard count > 0 else {
        throw BackupError(.refusedArchive, "'\(display(current.path))' shrank while it was read")
      }
      let chunk = ArchiveChunk(offset: position, count: count)
      position += Int64(count)
      deliveredLength = position
      return chunk
    }
    deliveredLength = current.size
    return nil
  }
}
