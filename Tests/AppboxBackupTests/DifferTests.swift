import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

struct DifferTests {
  @Test func equalSnapshotsHaveNoDifferences() throws {
    let fixture = try Fixture()
    try populate(fixture)
    let a = try fixture.backup()
    try fixture.trustSnapshots()
    let b = try fixture.backup()
    #expect(try fixture.repository.diff(a.snapshot, b.snapshot) == SnapshotDiff())
  }

  @Test func reportsAddedRemovedAndChangedPathsWithSubtrees() throws {
    let fixture = try Fixture()
    try populate(fixture)
    let a = try fixture.backup()
    try FileManager.default.removeItem(atPath: fixture.path("Documents/Nested"))
    try fixture.write("Documents/New/one", "1")
    #expect(chmod(fixture.path("Documents/private"), 0o640) == 0)
    try fixture.setAttribute("Documents/A.txt", "user.new", [1])
    let b = try fixture.backup()
    let diff = try fixture.repository.diff(a.snapshot, b.snapshot)
    func strings(_ paths: [[UInt8]]) -> [String] { paths.map { String(decoding: $0, as: UTF8.self) } }
    #expect(strings(diff.added) == ["Documents/New", "Documents/New/one"])
    #expect(
      strings(diff.removed) == [
        "Documents/Nested", "Documents/Nested/deeper", "Documents/Nested/deeper/file.bin",
        "Documents/Nested/hardlink-to-A",
      ])
    #expect(strings(diff.changed) == ["Documents/A.txt", "Documents/private"])
  }

  /// Changes come in the byte order of their whole paths, as a sort of all of them gives:
  /// "d-e/y" and "d.txt" before "d/x" ('-' and '.' sort before '/'), a path whose type changed
  /// added then removed. `kinds` keeps only those asked for, in the same order.
  @Test func changesComeInTheByteOrderOfTheirPaths() throws {
    let fixture = try Fixture()
    for path in ["Documents/d/x", "Documents/d.txt", "Documents/d-e/y", "Documents/t"] {
      try fixture.write(path, "1")
    }
    let a = try fixture.backup()
    try fixture.write("Documents/d/x", "22")
    try fixture.write("Documents/d.txt", "22")
    try FileManager.default.removeItem(atPath: fixture.path("Documents/d-e/y"))
    try fixture.write("Documents/d-f", "new")
    try FileManager.default.removeItem(atPath: fixture.path("Documents/t"))
    try fixture.write("Documents/t/inner", "new")
    let b = try fixture.backup()
    func changes(_ kinds: Set<SnapshotChange.Kind>) throws -> [String] {
      var seen: [String] = []
      try fixture.repository.diff(a.snapshot, b.snapshot, kinds: kinds) {
        seen.append("\($0.kind) \(String(decoding: $0.path, as: UTF8.self))")
      }
      return seen
    }
    #expect(
      try changes(Set(SnapshotChange.Kind.allCases)) == [
        "removed Documents/d-e/y", "added Documents/d-f", "changed Documents/d.txt", "changed Documents/d/x",
        "added Documents/t", "removed Documents/t", "added Documents/t/inner",
      ])
    #expect(try changes([.removed]) == ["removed Documents/d-e/y", "removed Documents/t"])
    #expect(try changes([.added]) == ["added Documents/d-f", "added Documents/t", "added Documents/t/inner"])
    #expect(try changes([]) == [])
  }
}
