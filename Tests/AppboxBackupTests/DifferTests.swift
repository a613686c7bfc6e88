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
}
