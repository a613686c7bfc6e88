import AppboxCore
import AppboxTestSupport
import Glibc
import Testing

/// Both resolution strategies must refuse the same escapes: run every case twice. The
/// strategy is a parameter of each contained directory (nothing process-wide), so these
/// tests run in parallel with every other suite.
struct ContainmentTests {
  /// A home with Documents, a file, an inside symlink, and symlinks that escape.
  func makeHome() throws -> TemporaryDirectory {
    let dir = TemporaryDirectory("contain")
    try dir.write("outside.txt", "secret")
    try dir.write("home/Documents/a.txt", "lower")
    try dir.write("home/Documents/A.txt", "upper")
    try dir.makeDirectory("home/Documents/sub")
    try dir.symlink("home/Documents/to-etc", to: "/etc")
    try dir.symlink("home/Documents/to-outside", to: "../../outside.txt")
    try dir.symlink("home/Documents/up", to: "..")
    try dir.symlink("home/Documents/inside", to: "sub")
    return dir
  }

  func withBothStrategies(_ body: (ResolveStrategy) throws -> Void) rethrows {
    for strategy in [ResolveStrategy.automatic, .componentWalk] { try body(strategy) }
  }

  /// Documents of `dir`'s home, resolved with `strategy`.
  func documents(_ dir: TemporaryDirectory, _ strategy: ResolveStrategy) throws -> ContainedDirectory {
    try ContainedDirectory.open(dir.url("home/Documents"), container: "Documents", strategy: strategy)
  }

  @Test func lexicalChecksRefuseAbsoluteParentAndEmpty() {
    #expect(throws: ContainmentError.self) { try RelativePath(validating: "/etc/passwd") }
    #expect(throws: ContainmentError.self) { try RelativePath(validating: "a/../../b") }
    #expect(throws: ContainmentError.self) { try RelativePath(validating: "..") }
    #expect(throws: ContainmentError.self) { try RelativePath(validating: "") }
    #expect(throws: ContainmentError.self) { try RelativePath(validating: "./") }
    #expect((try? RelativePath(validating: "a//b/./c"))?.description == "a/b/c")
    do {
      _ = try RelativePath(validating: "../x")
      Issue.record("expected a refusal")
    } catch let error as ContainmentError {
      #expect(error.kind == .denied)
      #expect(error.description.contains("'..'"))
    } catch { Issue.record("unexpected \(error)") }
  }

  @Test func readsInsideAndKeepsCaseApart() throws {
    let dir = try makeHome()
    try withBothStrategies { strategy in
      let docs = try documents(dir, strategy)
      defer { docs.close() }
      let lower = try docs.open(try RelativePath(validating: "a.txt"), O_RDONLY)
      let upper = try docs.open(try RelativePath(validating: "A.txt"), O_RDONLY)
      #expect(String(decoding: try lower.readAll(), as: UTF8.self) == "lower")
      #expect(String(decoding: try upper.readAll(), as: UTF8.self) == "upper")
      lower.close()
      upper.close()
    }
  }

  @Test func refusesSymlinksThatLeave() throws {
    let dir = try makeHome()
    try withBothStrategies { strategy in
      let docs = try documents(dir, strategy)
      defer { docs.close() }
      for path in ["to-etc/passwd", "to-outside", "up/Documents/a.txt", "to-etc"] {
        do {
          let fd = try docs.open(try RelativePath(validating: path), O_RDONLY)
          fd.close()
          Issue.record("'\(path)' escaped (\(strategy))")
        } catch let error as ContainmentError {
          #expect(error.kind == .denied, "\(path): \(error)")
        }
      }
    }
  }

  @Test func insideSymlinkFollowedOnlyWithOpenat2() throws {
    let dir = try makeHome()
    try dir.write("home/Documents/sub/b.txt", "b")
    let docs = try documents(dir, .automatic)
    defer { docs.close() }
    let fd = try docs.open(try RelativePath(validating: "inside/b.txt"), O_RDONLY)
    #expect(String(decoding: try fd.readAll(), as: UTF8.self) == "b")
    fd.close()
  }

  @Test func resolveParentNeverFollowsTheFinalLink() throws {
    let dir = try makeHome()
    try withBothStrategies { strategy in
      let docs = try documents(dir, strategy)
      defer { docs.close() }
      let target = try docs.resolveParent(of: try RelativePath(validating: "to-outside"))
      defer { target.close() }
      #expect(target.name == "to-outside")
      #expect(try target.status()?.type == .symlink)
      // Writing with O_NOFOLLOW on the final component must not reach outside.txt.
      #expect(throws: (any Error).self) {
        _ = try target.parent.open(target.name, O_WRONLY | O_TRUNC | O_NOFOLLOW)
      }
    }
    #expect(dir.read("outside.txt") == "secret")
  }
}
