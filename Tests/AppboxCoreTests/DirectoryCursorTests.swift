import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

struct DirectoryCursorTests {
  /// Open descriptors of this process.
  func openDescriptors() -> Int {
    (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? 0
  }

  @Test func walksFarPastItsDescriptorLimitAndBack() throws {
    // On tmpfs where there is one: 3,000 directories cost seconds on a disk.
    let dir = TemporaryDirectory("cursor", base: access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp")
    let base = try FileDescriptor.open(dir.path, O_RDONLY | O_DIRECTORY)
    defer { base.close() }
    let cursor = DirectoryCursor(base: base, openLimit: 8)
    let before = openDescriptors()
    // 3,000 levels: the path (6 KB) is longer than PATH_MAX, and far more than 8 descriptors.
    for _ in 0..<3000 {
      try cursor.current.makeDirectory(rawName: Array("d".utf8), mode: 0o700)
      try cursor.descend(Array("d".utf8))
    }
    #expect(cursor.depth == 3000)
    // (Other tests run in parallel and open descriptors too: only the order of magnitude is
    // this cursor's.)
    #expect(openDescriptors() - before < 100)
    let leaf = try cursor.current.open(rawName: Array("leaf".utf8), O_WRONLY | O_CREAT | O_EXCL, mode: 0o600)
    leaf.close()
    // Climbing back re-opens the closed levels through "..", checked against their identity.
    var left = 0
    try cursor.ascend(toDepth: 0) { _ in left += 1 }
    #expect(left == 3000 && cursor.depth == 0)
    #expect(openDescriptors() - before < 100)
    let path = Array(String(repeating: "d/", count: 3000).utf8) + Array("leaf".utf8)
    #expect(path.count > PATH_MAX)
    try base.openBeneath(path, O_RDONLY).close()
  }

  @Test func movesBetweenMembersByWhatTheyShare() throws {
    let dir = TemporaryDirectory("cursor")
    let base = try FileDescriptor.open(dir.path, O_RDONLY | O_DIRECTORY)
    defer { base.close() }
    let cursor = DirectoryCursor(base: base, openLimit: 4)
    try cursor.move(toParentOf: Array("a/b/c/file".utf8), creating: 3)
    #expect(cursor.depth == 3)
    try cursor.move(toParentOf: Array("a/b/x/y/file".utf8), creating: 2)
    #expect(cursor.depth == 4)
    try cursor.move(toParentOf: Array("a/b/c/file2".utf8))
    #expect(cursor.depth == 3)
    try cursor.move(toParentOf: Array("top".utf8))
    #expect(cursor.depth == 0)
    for path in ["a/b/c", "a/b/x/y"] {
      var status = stat()
      #expect(lstat(dir.url(path), &status) == 0 && status.st_mode & S_IFMT == S_IFDIR, "\(path)")
    }
  }

  /// A directory moved while the cursor had closed its descriptor is not silently replaced by
  /// whatever ".." leads to now: the climb fails with ESTALE.
  @Test func aMovedDirectoryStopsTheClimb() throws {
    let dir = TemporaryDirectory("cursor")
    try dir.makeDirectory("a/b/c/d/e/f")
    try dir.makeDirectory("elsewhere")
    let base = try FileDescriptor.open(dir.path, O_RDONLY | O_DIRECTORY)
    defer { base.close() }
    let cursor = DirectoryCursor(base: base, openLimit: 2)
    for name in ["a", "b", "c", "d", "e", "f"] { try cursor.descend(Array(name.utf8)) }
    // Level "d" (closed by now) moves under "elsewhere": e's ".." is no longer the d it left.
    #expect(rename(dir.url("a/b/c/d"), dir.url("elsewhere/d")) == 0)
    #expect(rename(dir.url("elsewhere/d/e"), dir.url("elsewhere/e")) == 0)
    try cursor.ascend()  // f → e (open)
    #expect(throws: SystemError.self) { try cursor.ascend() }  // e → d: ".." is "elsewhere"
  }
}
