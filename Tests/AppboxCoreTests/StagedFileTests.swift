import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// The staged writer and the descriptor that owns itself.
struct StagedFileTests {
  func names(_ dir: TemporaryDirectory) throws -> [String] {
    try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted()
  }

  @Test func committedFilesAppearWholeAndAbandonedOnesLeaveNothing() throws {
    let dir = TemporaryDirectory("staged")
    let directory = try OwnedFileDescriptor.open(dir.path, O_RDONLY | O_DIRECTORY)
    do {
      let staged = try StagedFile("kept.txt", in: directory.borrowed, mode: 0o640)
      try staged.descriptor.writeAll(Array("kept".utf8))
      #expect(try names(dir) == [staged.temporaryName])
      try staged.commit()
    }
    #expect(dir.read("kept.txt") == "kept")
    var st = stat()
    #expect(lstat(dir.url("kept.txt"), &st) == 0 && st.st_mode & 0o777 == 0o640)
    do {
      let abandoned = try StagedFile("lost.txt", in: directory.borrowed)
      try abandoned.descriptor.writeAll(Array("lost".utf8))
      // Dropped without a commit, as when an error is thrown midway.
    }
    #expect(try names(dir) == ["kept.txt"])
  }

  @Test func aFailedCommitRemovesTheTempFileAndLeavesTheOldFile() throws {
    let dir = TemporaryDirectory("staged-fail")
    try dir.write("archive.tar", "old")
    let directory = try OwnedFileDescriptor.open(dir.path, O_RDONLY | O_DIRECTORY)
    let staged = try StagedFile("archive.tar", in: directory.borrowed, temporaryName: ".tmp-archive.tar")
    try staged.descriptor.writeAll(Array("new".utf8))
    do {
      try staged.commit(flags: .noReplace)
      Issue.record("replaced an existing archive despite .noReplace")
    } catch let error as SystemError {
      #expect(error.errno == .exists)
    }
    #expect(try names(dir) == ["archive.tar"])
    #expect(dir.read("archive.tar") == "old")
  }

  /// A temp name built from a 250-byte name must itself fit in NAME_MAX (255 bytes).
  @Test func longNamesGetTempNamesWithinNameMax() throws {
    let dir = TemporaryDirectory("staged-long")
    let name = String(repeating: "é", count: 125)  // 250 bytes
    #expect(StagedFile.temporaryName(for: name).utf8.count <= 255)
    let directory = try OwnedFileDescriptor.open(dir.path, O_RDONLY | O_DIRECTORY)
    try AtomicFile.write(Array("x".utf8), to: name, in: directory.borrowed)
    #expect(try names(dir) == [name])
  }

  /// The owned descriptor closes itself at the end of its scope, and exactly once.
  @Test func anOwnedDescriptorClosesWhenItGoesOutOfScope() throws {
    let dir = TemporaryDirectory("owned")
    try dir.write("a", "a")
    let plain = try FileDescriptor.open(dir.url("a"), O_RDONLY)
    // Moved far above the descriptors other tests open meanwhile, so the number is ours.
    let high = fcntl(plain.rawValue, F_DUPFD_CLOEXEC, 3000)
    plain.close()
    #expect(high >= 3000)
    do {
      let owned = OwnedFileDescriptor(taking: FileDescriptor(rawValue: high))
      #expect(try owned.borrowed.status().size == 1)
    }
    #expect(fcntl(high, F_GETFD) == -1 && errno == EBADF)
    let released = try OwnedFileDescriptor.open(dir.url("a"), O_RDONLY).release()
    #expect(fcntl(released.rawValue, F_GETFD) >= 0)  // released: still open, now ours to close
    released.close()
  }
}
