import AppboxBackup
import AppboxRepository
import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// Repositories from before layout 2 open unchanged and are upgraded by the next writer.
struct RepositoryLayoutEndToEndTests {
  @Test func aLayoutOneRepositoryWorksAndIsUpgradedByTheNextBackup() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try writeSampleData(home: device.home)
    let expected = try captureHomeData(device.home)
    let first = try #require(try device.backup()["snapshot"] as? String)
    try Data("two".utf8).write(to: URL(fileURLWithPath: device.home + "/Documents/a.txt"))
    _ = try device.backup()
    // What a repository from before looked like: the catalog, the archives, no objects beside.
    for name in ["config", "manifests", "snapshots"] {
      try FileManager.default.removeItem(atPath: device.repository + "/" + name)
    }
    let listed = try #require(try device.json("snapshots") as? [[String: Any]])
    #expect(listed.count == 2)
    #expect(try device.run("check", "--read-data").status == 0)
    let show = try #require(try device.json("repo", "show") as? [String: Any])
    #expect(show["layout"] as? Int == 1)
    #expect(try device.run("restore", "com.example.notes", "--snapshot", first).status == 0)
    #expect(differences(expected, try captureHomeData(device.home)) == [])
    #expect(!FileManager.default.fileExists(atPath: device.repository + "/config"))

    _ = try device.backup()
    #expect(FileManager.default.fileExists(atPath: device.repository + "/config"))
    #expect(try FileManager.default.contentsOfDirectory(atPath: device.repository + "/manifests").count == 3)
    #expect(try FileManager.default.contentsOfDirectory(atPath: device.repository + "/snapshots").count == 3)
    #expect((try device.json("repo", "show") as? [String: Any])?["layout"] as? Int == 2)
    #expect(try device.run("check", "--read-data").status == 0)
    // The catalog is now a cache: rebuilt from the objects, it is the same.
    let rebuilt = try device.run("check", "--rebuild-catalog")
    #expect(rebuilt.status == 0 && rebuilt.out.contains("3 snapshots"), "\(rebuilt.out) \(rebuilt.err)")
    #expect(try device.run("restore", "com.example.notes", "--snapshot", first).status == 0)
    #expect(differences(expected, try captureHomeData(device.home)) == [])
  }
}
