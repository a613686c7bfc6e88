import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

struct FileTreeTests {
  @Test func removesDeepReadOnlyTreesWithoutFollowingLinks() throws {
    let dir = TemporaryDirectory("tree")
    try dir.write("keep/precious.txt", "keep me")
    var deep = "victim"
    for level in 0..<300 { deep += "/d\(level)" }
    try dir.makeDirectory(deep)
    try dir.write(deep + "/leaf.txt", "x")
    try dir.symlink("victim/link-out", to: "../keep")
    try dir.write("victim/ro/file", "y")
    #expect(chmod(dir.url("victim/ro"), 0o500) == 0)
    #expect(chmod(dir.url("victim/d0"), 0o000) == 0)

    try FileTree.remove(atPath: dir.url("victim"))
    #expect(!dir.exists("victim"))
    #expect(dir.read("keep/precious.txt") == "keep me")
  }

  @Test func removingAbsentIsNotAnError() throws {
    let dir = TemporaryDirectory("tree")
    try FileTree.remove(atPath: dir.url("nothing-here"))
  }

  @Test func listsNamesThatAreNotUTF8() throws {
    let dir = TemporaryDirectory("names")
    let raw: [UInt8] = [0x66, 0xFF, 0x66]
    let fd = try FileDescriptor.open(dir.path, O_RDONLY | O_DIRECTORY)
    defer { fd.close() }
    let file = try fd.open(rawName: raw, O_WRONLY | O_CREAT | O_EXCL)
    file.close()
    let entries = try fd.entries()
    #expect(entries.map(\.name) == [raw])
    #expect(entries.first?.type == .regular)
  }
}

struct AtomicFileTests {
  @Test func replacesContentAndMode() throws {
    let dir = TemporaryDirectory("atomic")
    try dir.write("f.txt", "old")
    try AtomicFile.write(Array("new".utf8), toPath: dir.url("f.txt"), mode: 0o600)
    #expect(dir.read("f.txt") == "new")
    var st = stat()
    #expect(stat(dir.url("f.txt"), &st) == 0)
    #expect(st.st_mode & 0o777 == 0o600)
    let leftovers = try FileManager.default.contentsOfDirectory(atPath: dir.path)
    #expect(leftovers == ["f.txt"])
  }

  @Test func replacesASymlinkInsteadOfWritingThroughIt() throws {
    let dir = TemporaryDirectory("atomic")
    try dir.write("target.txt", "untouched")
    try dir.symlink("f.txt", to: "target.txt")
    try AtomicFile.write(Array("new".utf8), toPath: dir.url("f.txt"))
    #expect(dir.read("target.txt") == "untouched")
    #expect(dir.read("f.txt") == "new")
  }
}

struct FileLockTests {
  @Test func secondExclusiveLockIsBusy() throws {
    let dir = TemporaryDirectory("lock")
    let first = try FileLock.acquire(dir.url("lock"), what: "The root")
    do {
      _ = try FileLock.acquire(dir.url("lock"), timeout: .milliseconds(100), what: "The root")
      Issue.record("second lock succeeded")
    } catch let error as LockBusyError {
      #expect(error.kind == .busy)
      #expect(error.description.contains("The root is busy"))
    }
    #expect(try FileLock.attempt(dir.url("lock")) == nil)
    withExtendedLifetime(first) {}
    _ = consume first
    #expect(try FileLock.attempt(dir.url("lock")) != nil)
  }

  /// A forked child that has not exec'd yet shares the lock's open file description; a
  /// duplicate descriptor stands in for it. Releasing the lock must free it all the same.
  @Test func releasingALockFreesItWhileADuplicateOfItsDescriptorLingers() throws {
    let dir = TemporaryDirectory("lock")
    var first: FileLock? = try FileLock.acquire(dir.url("lock"), what: "The root")
    let lingering = dup(first!.descriptor.rawValue)
    #expect(lingering >= 0)
    defer { close(lingering) }
    #expect(try FileLock.attempt(dir.url("lock")) == nil)
    first = nil
    #expect(first == nil)
    #expect(try FileLock.attempt(dir.url("lock")) != nil)
  }
}

struct ExtendedAttributeTests {
  @Test func setGetListRemove() throws {
    let dir = TemporaryDirectory("xattr")
    try dir.write("f", "x")
    let fd = try FileDescriptor.open(dir.url("f"), O_RDONLY)
    defer { fd.close() }
    let value: [UInt8] = [0, 1, 2, 255]
    try fd.setExtendedAttribute("user.test", value)
    #expect(try fd.extendedAttribute("user.test") == value)
    #expect(try fd.extendedAttributeNames().contains("user.test"))
    try fd.removeExtendedAttribute("user.test")
    #expect(try fd.extendedAttribute("user.test") == nil)
    try fd.removeExtendedAttribute("user.test")
  }
}
