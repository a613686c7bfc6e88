import AppboxCore
import Foundation
import Glibc

/// A small ext4 file system for one test: an image file in a temp directory, made with
/// `mkfs.ext4 -O encrypt` (or without encryption, to test refusals), mounted through a loop
/// device, and unmounted and deleted when released, whether the test passed or not. Needs
/// root (mount) and e2fsprogs; `isAvailable` says whether this machine can.
public final class EncryptedVolume: @unchecked Sendable {
  private let directory = TemporaryDirectory("volume")
  public var image: String { directory.url("image.ext4") }
  /// Where it is mounted.
  public var path: String { directory.url("mnt") }

  /// Whether the suites that need a loop mount run here: as root (CI runs as root). A root
  /// run without mkfs.ext4 (e2fsprogs, which `make deps` installs) or loop devices fails
  /// loudly when a volume is made, rather than skipping those suites.
  public static let isAvailable: Bool = getuid() == 0

  /// Makes and mounts a `megabytes` file system, with file encryption unless `encrypt` is false,
  /// with an inode table of `inodes` entries when given (mkfs.ext4 -N); `reservedBlocks: false`
  /// gives root no reserve (`mkfs.ext4 -m 0`).
  public init(
    megabytes: Int = 64, encrypt: Bool = true, inodes: Int? = nil, options: String? = nil,
    reservedBlocks: Bool = true
  ) throws {
    let fd = try FileDescriptor.open(image, O_WRONLY | O_CREAT | O_EXCL, mode: 0o600)
    try fd.closeAfter { try $0.truncate(to: Int64(megabytes) << 20) }
    try directory.makeDirectory("mnt")
    try Self.check(
      "mkfs.ext4",
      runProcess(
        "/sbin/mkfs.ext4",
        ["-q", "-F", "-E", "nodiscard"] + (encrypt ? ["-O", "encrypt"] : ["-O", "^encrypt"])
          + (inodes.map { ["-N", String($0)] } ?? []) + (reservedBlocks ? [] : ["-m", "0"]) + [image]))
    try Self.check(
      "mount", runProcess("/bin/mount", ["-o", "loop" + (options.map { "," + $0 } ?? ""), image, path]))
  }

  deinit {
    // A process that outlived its test may still hold a file: detach lazily then.
    if (try? runProcess("/bin/umount", [path]))?.status != 0 {
      _ = try? runProcess("/bin/umount", ["-l", path])
    }
  }

  private static func check(_ what: String, _ result: ProcessResult) throws {
    guard result.status == 0 else {
      throw SystemError(
        "\(what) a test volume (\(result.err.trimmingCharacters(in: .whitespacesAndNewlines)))")
    }
  }

  /// Whether the raw image holds `bytes` anywhere, once everything written is on it.
  public func imageContains(_ bytes: [UInt8]) throws -> Bool {
    let mount = try FileDescriptor.open(path, O_RDONLY | O_DIRECTORY)
    try mount.closeAfter { try $0.syncFileSystem() }
    let fd = try FileDescriptor.open(image, O_RDONLY)
    let content = try fd.closeAfter { try $0.readAll(limit: 1 << 30) }
    return Data(content).range(of: Data(bytes)) != nil
  }
}
