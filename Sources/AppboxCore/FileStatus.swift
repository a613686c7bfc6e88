import Glibc

/// Seconds and nanoseconds since the epoch.
public struct Timespec: Hashable, Sendable, Comparable, Codable {
  public var seconds: Int64
  public var nanoseconds: Int32
  public init(seconds: Int64, nanoseconds: Int32) {
    self.seconds = seconds
    self.nanoseconds = nanoseconds
  }
  init(_ ts: timespec) { self.init(seconds: Int64(ts.tv_sec), nanoseconds: Int32(ts.tv_nsec)) }
  var timespec: Glibc.timespec { Glibc.timespec(tv_sec: Int(seconds), tv_nsec: Int(nanoseconds)) }
  /// Nanoseconds since the epoch (good until the year 2262).
  public var totalNanoseconds: Int64 { seconds &* 1_000_000_000 &+ Int64(nanoseconds) }
  public init(totalNanoseconds: Int64) {
    var s = totalNanoseconds / 1_000_000_000
    var ns = totalNanoseconds % 1_000_000_000
    if ns < 0 {
      s -= 1
      ns += 1_000_000_000
    }
    self.init(seconds: s, nanoseconds: Int32(ns))
  }
  public static func < (a: Timespec, b: Timespec) -> Bool { a.totalNanoseconds < b.totalNanoseconds }
  /// Leave a time unchanged in `setTimes`.
  public static let omit = Timespec(seconds: 0, nanoseconds: 1_073_741_822)  // UTIME_OMIT
}

/// The type of a file system object.
public enum FileType: Sendable, Equatable {
  case regular, directory, symlink, fifo, characterDevice, blockDevice, socket, unknown

  public init(mode: mode_t) {
    switch mode & S_IFMT {
    case S_IFREG: self = .regular
    case S_IFDIR: self = .directory
    case S_IFLNK: self = .symlink
    case S_IFIFO: self = .fifo
    case S_IFCHR: self = .characterDevice
    case S_IFBLK: self = .blockDevice
    case S_IFSOCK: self = .socket
    default: self = .unknown
    }
  }
}

/// The fields of `struct stat` appbox uses.
public struct FileStatus: Sendable, Equatable {
  public var mode: mode_t
  public var size: Int64
  public var inode: UInt64
  public var device: UInt64
  public var linkCount: UInt64
  public var uid: UInt32
  public var gid: UInt32
  public var modificationTime: Timespec
  public var changeTime: Timespec
  public var blocks: Int64

  public init(_ st: stat) {
    mode = st.st_mode
    size = Int64(st.st_size)
    inode = UInt64(st.st_ino)
    device = UInt64(st.st_dev)
    linkCount = UInt64(st.st_nlink)
    uid = st.st_uid
    gid = st.st_gid
    modificationTime = Timespec(st.st_mtim)
    changeTime = Timespec(st.st_ctim)
    blocks = Int64(st.st_blocks)
  }

  public var type: FileType { FileType(mode: mode) }
  /// Permission bits including setuid, setgid and sticky.
  public var permissions: mode_t { mode & 0o7777 }
}
