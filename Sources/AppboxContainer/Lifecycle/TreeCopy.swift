// The copier behind `device clone`: a whole directory tree, as `cp -a` copies it, sharing
// extents where the file system can.
//
// Each regular file is copied by the cheapest means that works, tried in order:
// 1. `ioctl(FICLONE)`: the copy shares the source's extents (XFS with reflink, btrfs): O(1)
//    in the file's size. After the first refusal (EOPNOTSUPP, EXDEV, EINVAL, ENOTTY) it is
//    not tried again in this copy: the file system has none.
// 2. `copy_file_range(2)`, region by region (`SEEK_DATA`/`SEEK_HOLE`: holes stay holes):
//    the kernel copies without the bytes passing through appbox (and shares extents itself
//    where it can, as NFS and btrfs do).
// 3. `pread`/`pwrite` through a 1 MiB buffer, where the kernel refuses (2).
// Directories, symbolic links and FIFOs are made anew; sockets and device nodes are left out
// (no app can make a device node in its jail, and a socket means nothing once its process is
// gone). Hard links stay hard links. Then, children first, each entry's owner, mode, user.*
// extended attributes and modification time are set as the source's. Names are raw bytes:
// nothing here assumes UTF-8. Nothing is synced: the caller syncs the file system once,
// before it publishes the copy with one rename.

import AppboxCore
import CSystem
import Foundation
import Glibc

struct TreeCopy {
  /// Relative paths (raw bytes, '/'-separated) that are not copied.
  var skipping: ([UInt8]) -> Bool
  private(set) var files = 0
  private(set) var bytes: Int64 = 0
  private(set) var reflinked = 0
  private var canReflink = true
  /// The first copy of each file with more than one link: (device, inode) -> relative path.
  private var linked: [[UInt64]: [UInt8]] = [:]
  private var buffer: [UInt8] = []

  init(skipping: @escaping ([UInt8]) -> Bool) { self.skipping = skipping }

  /// Copies the contents of `source` into the empty directory `destination` (the root of
  /// the copy, which hard links are made relative to), and `source`'s own attributes onto it.
  mutating func copy(_ source: FileDescriptor, into destination: FileDescriptor) throws {
    try copyDirectory(source, into: destination, relative: [], root: destination)
    try copyAttributes(try source.status(), from: source, to: destination)
  }

  private mutating func copyDirectory(
    _ source: FileDescriptor, into destination: FileDescriptor, relative: [UInt8], root: FileDescriptor
  ) throws {
    var names: [[UInt8]] = []
    let listing = UnsafeMutableRawBufferPointer.allocate(byteCount: 32768, alignment: 8)
    defer { listing.deallocate() }
    try source.forEachEntry(buffer: listing) { name, length, _ in
      names.append(Array(UnsafeRawBufferPointer(start: name, count: length)))
    }
    for name in names {
      let path = relative.isEmpty ? name : relative + [0x2F] + name
      if skipping(path) { continue }
      guard let status = try source.status(ofRawName: name) else { continue }
      switch status.type {
      case .directory:
        try destination.makeDirectory(rawName: name, mode: 0o700)
        let from = try source.open(rawName: name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
        defer { from.close() }
        let to = try destination.open(rawName: name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
        defer { to.close() }
        try copyDirectory(from, into: to, relative: path, root: root)
        try copyAttributes(status, from: from, to: to)
      case .regular:
        let key = [status.device, status.inode]
        if status.linkCount > 1, let first = linked[key] {
          try root.link(rawName: first, to: name, in: destination)
          continue
        }
        try copyFile(name, status, from: source, to: destination)
        if status.linkCount > 1 { linked[key] = path }
      case .symlink:
        try destination.makeSymlink(rawName: name, target: try source.readLink(rawName: name))
        // lchown: fchownat(AT_SYMLINK_NOFOLLOW) by the raw name.
        _ = (name + [0]).withUnsafeBufferPointer { pointer in
          pointer.withMemoryRebound(to: CChar.self) {
            fchownat(destination.rawValue, $0.baseAddress!, status.uid, status.gid, AT_SYMLINK_NOFOLLOW)
          }
        }
        try destination.setTimes(ofRawName: name, modification: status.modificationTime)
      case .fifo:
        try destination.makeFIFO(rawName: name, mode: status.permissions)
        try destination.open(rawName: name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW).closeAfter {
          try copyAttributes(status, from: nil, to: $0)
        }
      default:
        continue
      }
    }
  }

  private mutating func copyFile(
    _ name: [UInt8], _ status: FileStatus, from directory: FileDescriptor, to destination: FileDescriptor
  ) throws {
    let source = try directory.open(rawName: name, O_RDONLY | O_NOFOLLOW)
    defer { source.close() }
    let target = try destination.open(rawName: name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode: 0o600)
    defer { target.close() }
    files += 1
    bytes += status.size
    if canReflink, status.size > 0 {
      if appbox_ficlone(target.rawValue, source.rawValue) == 0 {
        reflinked += 1
        return try copyAttributes(status, from: source, to: target)
      }
      let error = Errno.current
      guard
        [
          Errno(rawValue: EOPNOTSUPP), Errno(rawValue: EXDEV), Errno(rawValue: EINVAL),
          Errno(rawValue: ENOTTY),
        ]
        .contains(error)
      else { throw SystemError("clone", path: String(decoding: name, as: UTF8.self), errno: error) }
      canReflink = false
    }
    let regions = (status.mayBeSparse ? try source.dataRegions(size: status.size) : nil) ?? [0..<status.size]
    for region in regions { try copyRange(region, from: source, to: target, name: name) }
    if status.mayBeSparse { try target.truncate(to: status.size) }
    try copyAttributes(status, from: source, to: target)
  }

  /// Copies bytes `range` at the same offsets: copy_file_range, else pread/pwrite.
  private mutating func copyRange(
    _ range: Range<Int64>, from source: FileDescriptor, to target: FileDescriptor, name: [UInt8]
  ) throws {
    var offset = range.lowerBound
    while offset < range.upperBound {
      var input = offset
      var output = offset
      let copied = appbox_copy_file_range(
        source.rawValue, &input, target.rawValue, &output, UInt64(range.upperBound - offset))
      if copied > 0 {
        offset += copied
        continue
      }
      if copied == 0 { return }  // the file shrank meanwhile
      let error = Errno.current
      guard
        [
          Errno(rawValue: EXDEV), Errno(rawValue: ENOSYS), Errno(rawValue: EOPNOTSUPP),
          Errno(rawValue: EINVAL),
        ]
        .contains(error)
      else { throw SystemError("copy", path: String(decoding: name, as: UTF8.self), errno: error) }
      if buffer.isEmpty { buffer = [UInt8](repeating: 0, count: 1 << 20) }
      while offset < range.upperBound {
        let wanted = Int(min(Int64(buffer.count), range.upperBound - offset))
        let count = try buffer.withUnsafeMutableBytes {
          try source.readAll(into: UnsafeMutableRawBufferPointer(rebasing: $0[0..<wanted]), at: offset)
        }
        if count == 0 { return }
        try buffer.withUnsafeBytes {
          try target.writeAll(UnsafeRawBufferPointer(rebasing: $0[0..<count]), at: offset)
        }
        offset += Int64(count)
      }
    }
  }

  /// The owner, mode, user.* attributes and modification time of `status` (and `source`'s
  /// attributes, when given) onto `target`; the owner first, since a chown clears set-id bits.
  private func copyAttributes(_ status: FileStatus, from source: FileDescriptor?, to target: FileDescriptor)
    throws
  {
    try target.setOwner(status.uid, status.gid)
    try target.setPermissions(status.permissions)
    if let source {
      for (name, value) in try source.userExtendedAttributes() {
        try target.setExtendedAttribute(name, value)
      }
    }
    try target.setTimes(access: status.modificationTime, modification: status.modificationTime)
  }
}
