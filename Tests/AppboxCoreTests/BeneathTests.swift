import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// The one resolver: both strategies, both symlink policies, paths longer than PATH_MAX.
struct BeneathTests {
  /// A home whose Library/Preferences an app replaced by a link into its own bundle.
  func makeHome() throws -> TemporaryDirectory {
    let dir = TemporaryDirectory("beneath")
    try dir.write("home/Notes.app/Info.plist", "sealed")
    try dir.makeDirectory("home/Library")
    try dir.symlink("home/Library/Preferences", to: "../Notes.app")
    try dir.write("home/Documents/sub/file.txt", "inside")
    try dir.symlink("home/Documents/inside", to: "sub")
    return dir
  }

  static let strategies: [ResolveStrategy] = [.automatic, .componentWalk]

  @Test func refusingFollowsNoLinkEvenOneThatStaysInside() throws {
    for strategy in Self.strategies { try refusingFollowsNoLink(strategy) }
  }

  func refusingFollowsNoLink(_ strategy: ResolveStrategy) throws {
    let dir = try makeHome()
    let home = try FileDescriptor.open(dir.url("home"), O_RDONLY | O_DIRECTORY)
    defer { home.close() }
    for (path, flags) in [
      ("Library/Preferences", O_RDONLY | O_DIRECTORY), ("Library/Preferences/Info.plist", O_RDONLY),
      ("Documents/inside/file.txt", O_RDONLY), ("Documents/inside", O_RDONLY),
    ] {
      do {
        let fd = try home.openBeneath(Array(path.utf8), flags, symlinks: .refuse, strategy: strategy)
        fd.close()
        Issue.record("'\(path)' went through a symlink (\(strategy))")
      } catch let error as SystemError {
        #expect(error.errno == .tooManyLinks, "\(path) (\(strategy)): \(error)")
      }
    }
    for escape in ["/etc/passwd", "Documents/../../etc/passwd", "../home/Documents/sub/file.txt"] {
      do {
        try home.openBeneath(Array(escape.utf8), O_RDONLY, strategy: strategy).close()
        Issue.record("'\(escape)' left the directory (\(strategy))")
      } catch let error as SystemError {
        #expect(error.errno == .crossDevice, "\(escape) (\(strategy)): \(error)")
      }
    }
    let real = try home.openBeneath(Array("Documents/sub/file.txt".utf8), O_RDONLY, strategy: strategy)
    #expect(String(decoding: try real.readAll(), as: UTF8.self) == "inside")
    real.close()
  }

  @Test func followingBeneathTakesInsideLinksOnlyWithOpenat2() throws {
    let dir = try makeHome()
    let home = try FileDescriptor.open(dir.url("home"), O_RDONLY | O_DIRECTORY)
    defer { home.close() }
    let path = Array("Documents/inside/file.txt".utf8)
    let fd = try home.openBeneath(path, O_RDONLY, symlinks: .followBeneath, strategy: .automatic)
    #expect(String(decoding: try fd.readAll(), as: UTF8.self) == "inside")
    fd.close()
    #expect(throws: SystemError.self) {
      try home.openBeneath(path, O_RDONLY, symlinks: .followBeneath, strategy: .componentWalk).close()
    }
  }

  /// 18 nested 250-byte names: 4.5 KB, more than PATH_MAX, yet every strategy opens the
  /// deepest file (and refuses a symlink planted beyond PATH_MAX).
  @Test func pathsLongerThanPathMaxResolveInPieces() throws {
    for strategy in Self.strategies { try longPaths(strategy) }
  }

  func longPaths(_ strategy: ResolveStrategy) throws {
    let dir = TemporaryDirectory("beneath-long")
    let top = try FileDescriptor.open(dir.path, O_RDONLY | O_DIRECTORY)
    defer { top.close() }
    var names: [[UInt8]] = []
    var current = try top.duplicate()
    for level in 0..<18 {
      let name = Array(String(repeating: Character(String(level % 10)), count: 250).utf8)
      try current.makeDirectory(rawName: name, mode: 0o755)
      let next = try current.open(rawName: name, O_RDONLY | O_DIRECTORY)
      current.close()
      current = next
      names.append(name)
    }
    try current.writeFile("deep.txt", "deep")
    try current.makeSymlink("link", target: "deep.txt")
    current.close()
    let path = Array(names.joined(separator: [UInt8(ascii: "/")]))
    #expect(path.count > Int(PATH_MAX))
    let file = try top.openBeneath(path + Array("/deep.txt".utf8), O_RDONLY, strategy: strategy)
    #expect(String(decoding: try file.readAll(), as: UTF8.self) == "deep")
    file.close()
    do {
      try top.openBeneath(path + Array("/link".utf8), O_RDONLY, strategy: strategy).close()
      Issue.record("followed a symlink beyond PATH_MAX")
    } catch let error as SystemError {
      #expect(error.errno == .tooManyLinks)
    }
  }
}

extension FileDescriptor {
  /// Creates file `name` here with `text` (test helper).
  func writeFile(_ name: String, _ text: String) throws {
    let fd = try open(name, O_WRONLY | O_CREAT | O_EXCL, mode: 0o644)
    try fd.closeAfter { try $0.writeAll(Array(text.utf8)) }
  }
}
