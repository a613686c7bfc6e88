import AppboxCore
import AppboxPlist
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// `defaults` (the preferences plist) and `exclude` (the backup mark), end to end.
struct SandboxDefaultsTests {
  @Test func defaultsWriteEveryTypeAsABinaryPlist() throws {
    let device = Device()
    let home = device.home(try device.install("Notes-1.0/Notes.app"))
    let plistPath = home + "/Library/Preferences/com.example.notes.plist"
    #expect(try device.run("defaults", "com.example.notes", "read").out == "")
    #expect(try device.json("defaults", "com.example.notes", "read") as? [String: Any] != nil)

    let writes: [(key: String, value: String, type: String)] = [
      ("name", "Alice B", "string"), ("count", "-42", "int"), ("ratio", "0.5", "float"),
      ("on", "yes", "bool"),
      ("when", "2024-01-02T03:04:05Z", "date"), ("blob", "AAEC/w==", "data"),
    ]
    for write in writes {
      let result = try device.run(
        "defaults", "com.example.notes", "write", write.key, write.value, "--type", write.type)
      #expect(result.status == 0, "\(write): \(result.err)")
    }
    let bytes = try #require(contents(plistPath))
    #expect(bytes.starts(with: Array("bplist00".utf8)))
    let plist = try PropertyList.decode(Data(bytes))
    #expect(
      plist
        == .dictionary([
          "name": .string("Alice B"), "count": .integer(-42), "ratio": .real(0.5), "on": .bool(true),
          "when": .date(Date(timeIntervalSince1970: 1_704_164_645)), "blob": .data(Data([0, 1, 2, 255])),
        ]))

    let text = try device.run("defaults", "com.example.notes", "read")
    #expect(
      text.out == """
        blob = AAEC/w==
        count = -42
        name = "Alice B"
        on = true
        ratio = 0.5
        when = 2024-01-02T03:04:05Z

        """)
    #expect(try device.run("defaults", "com.example.notes", "read", "name").out == "Alice B\n")
    let json = try #require(try device.json("defaults", "com.example.notes", "read") as? [String: Any])
    #expect(json["when"] as? String == "2024-01-02T03:04:05Z" && json["blob"] as? String == "AAEC/w==")
    #expect(json["count"] as? Int == -42 && json["on"] as? Bool == true)
    let one = try #require(
      try device.json("defaults", "com.example.notes", "read", "ratio") as? [String: Any])
    #expect(one["type"] as? String == "float" && one["value"] as? Double == 0.5)

    let delete = try device.run("defaults", "com.example.notes", "delete", "name")
    #expect(delete.status == 0)
    let missing = try device.run("defaults", "com.example.notes", "read", "name")
    #expect(missing.status == 66)
    #expect(
      missing.err == "Error: No preference 'name' in Library/Preferences/com.example.notes.plist of "
        + "com.example.notes\n")
    #expect(try device.run("defaults", "com.example.notes", "delete", "name").status == 66)
  }

  @Test func malformedValuesAndPreferencesAreRefusedWithoutChangingAnything() throws {
    let device = Device()
    let home = device.home(try device.install("Notes-1.0/Notes.app"))
    let plistPath = home + "/Library/Preferences/com.example.notes.plist"
    for (value, type) in [
      ("x", "int"), ("1.5", "int"), ("nan", "float"), ("maybe", "bool"), ("2024-13-01", "date"),
      ("%%%", "data"),
    ] {
      let result = try device.run("defaults", "com.example.notes", "write", "k", value, "--type", type)
      #expect(result.status == 64, "\(value) as \(type)")
    }
    #expect(try device.run("defaults", "com.example.notes", "write", "k", "v", "--type", "uuid").status == 64)
    #expect(!exists(plistPath))

    for garbage in [Array("not a plist".utf8), Array(PropertyList.array([.string("x")]).binaryData())] {
      try Data(garbage).write(to: URL(fileURLWithPath: plistPath))
      for arguments in [["read"], ["read", "k"], ["write", "k", "v"], ["delete", "k"]] {
        let result = try appbox(["defaults", "com.example.notes"] + arguments, root: device.root)
        #expect(result.status == 65, "\(arguments): \(result.err)")
        #expect(result.err.contains("Preferences 'Library/Preferences/com.example.notes.plist'"))
      }
      #expect(contents(plistPath) == garbage)
    }
  }

  @Test func excludeMarksFilesAndFoldersAndInspectCountsThem() throws {
    let device = Device()
    let home = device.home(try device.install("Notes-1.0/Notes.app"))
    try Data(count: 4096).write(to: URL(fileURLWithPath: home + "/Documents/big.bin"))
    try FileManager.default.createDirectory(
      atPath: home + "/Library/Application Support/Models", withIntermediateDirectories: true)
    let marked = try device.run("exclude", "com.example.notes", "Documents/big.bin")
    #expect(
      marked.status == 0 && marked.out == "Documents/big.bin is excluded from backups\n", "\(marked.err)")
    #expect(try device.run("exclude", "com.example.notes", "Library/Application Support/Models").status == 0)
    #expect(
      isExcluded(home + "/Documents/big.bin") && isExcluded(home + "/Library/Application Support/Models"))

    func excludedCounts() throws -> [String: Int] {
      let report = try #require(try device.json("inspect", "com.example.notes") as? [String: Any])
      let locations = try #require(report["locations"] as? [[String: Any]])
      var counts: [String: Int] = [:]
      for location in locations { counts[location["name"] as! String] = location["excludedItems"] as? Int }
      return counts
    }
    #expect(try excludedCounts()["Documents"] == 1 && excludedCounts()["Library"] == 1)
    #expect(
      try device.run("exclude", "com.example.notes", "Documents/big.bin", "--undo").out
        == "Documents/big.bin will be backed up again\n")
    #expect(!isExcluded(home + "/Documents/big.bin"))
    #expect(try excludedCounts()["Documents"] == 0)

    for (path, fragment) in [
      ("tmp", "is never backed up"), ("Library/Caches/x", "is never backed up"),
      ("Notes.app/Notes", "sealed bundle"),
      (".com.apple.mobile_container_manager.metadata.plist", "Only files"),
    ] {
      let result = try device.run("exclude", "com.example.notes", path)
      #expect(result.status == 64 && result.err.contains(fragment), "\(path): \(result.err)")
    }
    #expect(try device.run("exclude", "com.example.notes", "Documents/missing").status == 66)
    #expect(symlink("big.bin", home + "/Documents/link") == 0)
    let link = try device.run("exclude", "com.example.notes", "Documents/link")
    #expect(link.status == 77 && link.err.contains("symbolic link"))
  }
}
