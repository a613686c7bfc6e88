import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

struct AtomicCopyTests {
  @Test func copyStreamsEveryByteAndReplacesASymlinkInsteadOfFollowingIt() throws {
    let dir = TemporaryDirectory("atomic-copy")
    let bytes = (0..<700_000).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ $0 >> 11) }
    let source = try dir.write("source.bin", bytes: bytes)
    try dir.write("victim.txt", "victim")
    try dir.makeDirectory("out")
    try dir.symlink("out/target", to: "../victim.txt")
    let directory = try FileDescriptor.open(dir.url("out"), O_RDONLY | O_DIRECTORY)
    defer { directory.close() }
    let input = try FileDescriptor.open(source, O_RDONLY)
    let copied = try input.closeAfter {
      try AtomicFile.copy(from: $0, to: "target", in: directory, mode: 0o600)
    }
    #expect(copied == Int64(bytes.count))
    #expect(dir.read("victim.txt") == "victim")
    var st = stat()
    #expect(
      lstat(dir.url("out/target"), &st) == 0 && FileStatus(st).type == .regular && st.st_mode & 0o777 == 0o600
    )
    #expect(FileManager.default.contents(atPath: dir.url("out/target")).map(Array.init) == bytes)
    #expect(try FileManager.default.contentsOfDirectory(atPath: dir.url("out")) == ["target"])
  }

  @Test func aFailedCopyLeavesTheDestinationAndNoDebris() throws {
    let dir = TemporaryDirectory("atomic-copy")
    try dir.write("out/target", "old")
    let directory = try FileDescriptor.open(dir.url("out"), O_RDONLY | O_DIRECTORY)
    defer { directory.close() }
    // Reading a directory fails with EISDIR midway through the copy.
    let unreadable = try FileDescriptor.open(dir.path, O_RDONLY | O_DIRECTORY)
    defer { unreadable.close() }
    #expect(throws: SystemError.self) { try AtomicFile.copy(from: unreadable, to: "target", in: directory) }
    #expect(dir.read("out/target") == "old")
    #expect(try FileManager.default.contentsOfDirectory(atPath: dir.url("out")) == ["target"])
  }
}
