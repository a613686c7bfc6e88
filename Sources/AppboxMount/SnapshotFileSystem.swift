// AppboxMount owns the read-only FUSE view of a repository (`appbox mount DIR`); it is the only
// module that imports CFuse (libfuse3's high-level, path-based API). It depends on AppboxBackup
// for everything it shows, and must not write to the repository.
//
// Layout: `/<app>/<snapshot id>/…` is the snapshot's top (Documents, Library, the bundle),
// `/<app>/<time>` (UTC, `2026-12-04T03:31:32Z`) a symlink to the snapshot taken then, and
// `/<app>/latest` a symlink to the app's newest snapshot (commit order, as everywhere).
// Snapshots taken within one second share a time: the second and later get `-2`, `-3`, … in
// commit order, so every snapshot has exactly one time name and it never changes while older
// snapshots stay (a forget of one of them can renumber the later ones of that second).
// Algorithm: every callback resolves its path afresh: the first two components from the
// catalog's snapshot list, the rest with `Repository.entry(at:in:)` (the trees on the way only).
// A file opened is read whole through `Repository.readContent` (every byte verified against its
// digest) into an unlinked temporary file, and served from there with `pread`; a content that
// does not verify fails the open with EIO, so nothing unverified is ever served.
// Invariants: read-only (mounted `ro`, and every writing call is left unimplemented: EROFS or
// ENOSYS); `nodev`, `nosuid` and `default_permissions` (the kernel checks modes against the
// caller); names are served as the snapshot has them; one thread (`-s`), because the catalog
// connection is not shared between threads.

import AppboxRepository
import AppboxCore
import CFuse
import Foundation
import Glibc

/// Why a mount could not start.
public struct MountError: AppboxFailure {
  public var kind: FailureKind
  public var message: String
  public var description: String { message }
  public init(kind: FailureKind, message: String) {
    self.kind = kind
    self.message = message
  }
}

/// The repository behind a mount.
public final class SnapshotFileSystem: @unchecked Sendable {
  let repository: Repository
  let scratch: String
  /// Open files: descriptor of each temporary copy, by handle.
  private var open: [UInt64: Int32] = [:]
  private var nextHandle: UInt64 = 1

  public init(repository: Repository, scratchDirectory: String = NSTemporaryDirectory()) {
    self.repository = repository
    scratch = scratchDirectory
  }

  /// Whether the kernel's FUSE device is there.
  public static var isAvailable: Bool { access("/dev/fuse", R_OK | W_OK) == 0 }

  /// Mounts at `directory` and serves until unmounted (`fusermount3 -u`, `umount`) or
  /// interrupted (SIGINT, SIGTERM: libfuse unmounts). Returns libfuse's status (0: unmounted).
  public func serve(at directory: String) throws -> Int32 {
    guard Self.isAvailable else {
      throw MountError(
        kind: .unavailable, message: "Unable to mount '\(directory)': /dev/fuse is missing or not accessible")
    }
    var isDirectory: ObjCBool = false
    guard FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory), isDirectory.boolValue
    else {
      throw MountError(kind: .notFound, message: "Unable to mount '\(directory)': no such directory")
    }
    var operations = fuse_operations()
    operations.getattr = { path, stbuf, _ in SnapshotFileSystem.current.getattr(path, stbuf) }
    operations.readlink = { path, buffer, size in SnapshotFileSystem.current.readlink(path, buffer, size) }
    operations.readdir = { path, buffer, filler, _, _, _ in
      SnapshotFileSystem.current.readdir(path, buffer, filler)
    }
    operations.open = { path, info in SnapshotFileSystem.current.openFile(path, info) }
    operations.read = { _, buffer, size, offset, info in
      SnapshotFileSystem.current.read(buffer, size, offset, info)
    }
    operations.release = { _, info in SnapshotFileSystem.current.release(info) }
    let arguments = [
      "appbox-mount", directory, "-f", "-s", "-o",
      "ro,default_permissions,nodev,nosuid,fsname=appbox,subtype=appbox",
    ]
    var cArguments: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
    defer { cArguments.forEach { free($0) } }
    let unmanaged = Unmanaged.passRetained(self)
    defer { unmanaged.release() }
    return fuse_main_real(
      Int32(arguments.count), &cArguments, &operations, MemoryLayout<fuse_operations>.size,
      unmanaged.toOpaque())
  }

  /// The file system of the callback running now (libfuse's private data).
  static var current: SnapshotFileSystem {
    Unmanaged<SnapshotFileSystem>.fromOpaque(fuse_get_context()!.pointee.private_data).takeUnretainedValue()
  }

  /// What a path names.
  enum Node {
    case top
    case app(String)
    /// A symlink to a snapshot's directory: `latest`, or a time name.
    case link(app: String, id: String)
    case entry(Snapshot, BrowsedEntry)
  }

  func resolve(_ cPath: UnsafePointer<CChar>?) throws -> Node? {
    guard let cPath else { return nil }
    let bytes = Array(
      UnsafeBufferPointer(
        start: UnsafeRawPointer(cPath).assumingMemoryBound(to: UInt8.self), count: strlen(cPath)))
    let parts = bytes.split(separator: UInt8(ascii: "/")).map { Array($0) }
    guard let first = parts.first else { return .top }
    let app = String(decoding: first, as: UTF8.self)
    let snapshots = try repository.catalog.snapshots(app: app)
    guard !snapshots.isEmpty else { return nil }
    guard parts.count > 1 else { return .app(app) }
    let name = String(decoding: parts[1], as: UTF8.self)
    if name == "latest" {
      guard parts.count == 2, let last = snapshots.last else { return nil }
      return .link(app: app, id: last.id)
    }
    guard let snapshot = snapshots.first(where: { $0.id == name }) else {
      guard parts.count == 2, let named = Self.timeNames(snapshots).first(where: { $0.name == name }) else {
        return nil
      }
      return .link(app: app, id: named.id)
    }
    let inside = Array(parts.dropFirst(2).joined(separator: [UInt8(ascii: "/")]))
    return .entry(snapshot, try repository.entry(at: inside, in: snapshot))
  }

  /// Each snapshot's time name, in commit order: its UTC time to the second, with `-2`, `-3`,
  /// … for the second and later snapshots of the same second.
  static func timeNames(_ snapshots: [Snapshot]) -> [(name: String, id: String)] {
    var seen: [String: Int] = [:]
    return snapshots.map { snapshot in
      let time = utcTimestamp(snapshot.time)
      let count = seen[time, default: 0] + 1
      seen[time] = count
      return (count == 1 ? time : "\(time)-\(count)", snapshot.id)
    }
  }

  private func fill(_ stbuf: UnsafeMutablePointer<stat>, directory mode: mode_t, time: Date) {
    stbuf.pointee.st_mode = S_IFDIR | mode
    stbuf.pointee.st_nlink = 2
    stbuf.pointee.st_mtim = timespec(tv_sec: Int(time.timeIntervalSince1970), tv_nsec: 0)
  }

  func getattr(_ path: UnsafePointer<CChar>?, _ stbuf: UnsafeMutablePointer<stat>?) -> Int32 {
    guard let stbuf else { return -EINVAL }
    memset(stbuf, 0, MemoryLayout<stat>.size)
    do {
      switch try resolve(path) {
      case nil: return -ENOENT
      case .top: fill(stbuf, directory: 0o555, time: Date(timeIntervalSince1970: 0))
      case .app: fill(stbuf, directory: 0o555, time: Date(timeIntervalSince1970: 0))
      case .link(_, let id):
        stbuf.pointee.st_mode = S_IFLNK | 0o777
        stbuf.pointee.st_nlink = 1
        stbuf.pointee.st_size = off_t(id.utf8.count)
      case .entry(_, let item):
        let entry = item.entry
        let type: mode_t =
          switch entry.type {
          case .file: S_IFREG
          case .directory: S_IFDIR
          case .symlink: S_IFLNK
          case .fifo: S_IFIFO
          case .socket: S_IFSOCK
          }
        // No setuid, setgid or sticky bits are served (mounted nosuid as well).
        stbuf.pointee.st_mode = type | mode_t(entry.permissions & 0o777)
        stbuf.pointee.st_nlink = entry.type == .directory ? 2 : nlink_t(max(1, entry.linkCount))
        stbuf.pointee.st_uid = entry.uid
        stbuf.pointee.st_gid = entry.gid
        stbuf.pointee.st_size = off_t(
          entry.type == .symlink ? Int64(entry.linkTarget?.count ?? 0) : entry.size)
        stbuf.pointee.st_blocks = blkcnt_t((entry.size + 511) / 512)
        let time = entry.modificationTime
        stbuf.pointee.st_mtim = timespec(
          tv_sec: Int(time / 1_000_000_000), tv_nsec: Int(time % 1_000_000_000))
        stbuf.pointee.st_ctim = stbuf.pointee.st_mtim
        stbuf.pointee.st_atim = stbuf.pointee.st_mtim
      }
      return 0
    } catch {
      return errnoValue(error)
    }
  }

  func readlink(_ path: UnsafePointer<CChar>?, _ buffer: UnsafeMutablePointer<CChar>?, _ size: Int) -> Int32 {
    guard let buffer, size > 0 else { return -EINVAL }
    do {
      let target: [UInt8]
      switch try resolve(path) {
      case .link(_, let id)?: target = Array(id.utf8)
      case .entry(_, let item)? where item.entry.type == .symlink: target = item.entry.linkTarget ?? []
      case nil: return -ENOENT
      default: return -EINVAL
      }
      let count = min(target.count, size - 1)
      target.withUnsafeBytes {
        UnsafeMutableRawPointer(buffer).copyMemory(from: $0.baseAddress!, byteCount: count)
      }
      buffer[count] = 0
      return 0
    } catch {
      return errnoValue(error)
    }
  }

  func readdir(_ path: UnsafePointer<CChar>?, _ buffer: UnsafeMutableRawPointer?, _ filler: fuse_fill_dir_t?)
    -> Int32
  {
    guard let filler else { return -EINVAL }
    func add(_ name: [UInt8]) {
      _ = withCName(name) { filler(buffer, $0, nil, 0, fuse_fill_dir_flags(rawValue: 0)) }
    }
    do {
      add(Array(".".utf8))
      add(Array("..".utf8))
      switch try resolve(path) {
      case nil: return -ENOENT
      case .top:
        var seen: Set<String> = []
        for snapshot in try repository.catalog.snapshots() where seen.insert(snapshot.app).inserted {
          add(Array(snapshot.app.utf8))
        }
      case .app(let app):
        let snapshots = try repository.catalog.snapshots(app: app)
        for snapshot in snapshots { add(Array(snapshot.id.utf8)) }
        for named in Self.timeNames(snapshots) { add(Array(named.name.utf8)) }
        add(Array("latest".utf8))
      case .link: return -ENOTDIR
      case .entry(let snapshot, let item):
        guard item.entry.type == .directory else { return -ENOTDIR }
        try repository.list(item.path, in: snapshot) { add($0.entry.name) }
      }
      return 0
    } catch {
      return errnoValue(error)
    }
  }

  func openFile(_ path: UnsafePointer<CChar>?, _ info: UnsafeMutablePointer<fuse_file_info>?) -> Int32 {
    guard let info else { return -EINVAL }
    guard info.pointee.flags & O_ACCMODE == O_RDONLY else { return -EROFS }
    do {
      guard case .entry(_, let item)? = try resolve(path) else { return -ENOENT }
      guard item.entry.type == .file else { return -EISDIR }
      var template = Array((scratch + "/appbox-mount-XXXXXX").utf8CString)
      let fd = mkstemp(&template)
      guard fd >= 0 else { return -errno }
      unlink(template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) })
      do {
        let copy = FileDescriptor(rawValue: fd)
        try repository.readContent(of: item.entry, path: item.path) { data, offset in
          try copy.writeAll(data, at: offset)
        }
        try copy.truncate(to: item.entry.size)
      } catch {
        close(fd)
        throw error
      }
      let handle = nextHandle
      nextHandle += 1
      open[handle] = fd
      info.pointee.fh = handle
      return 0
    } catch {
      return errnoValue(error)
    }
  }

  func read(
    _ buffer: UnsafeMutablePointer<CChar>?, _ size: Int, _ offset: off_t,
    _ info: UnsafeMutablePointer<fuse_file_info>?
  )
    -> Int32
  {
    guard let info, let fd = open[info.pointee.fh] else { return -EBADF }
    let count = pread(fd, buffer, size, offset)
    return count < 0 ? -errno : Int32(count)
  }

  func release(_ info: UnsafeMutablePointer<fuse_file_info>?) -> Int32 {
    guard let info, let fd = open.removeValue(forKey: info.pointee.fh) else { return 0 }
    close(fd)
    return 0
  }

  private func errnoValue(_ error: any Error) -> Int32 {
    switch (error as? any AppboxFailure)?.kind {
    case .notFound?: return -ENOENT
    case .invalidArgument?: return -EINVAL
    case .denied?: return -EACCES
    default: return -EIO
    }
  }
}
