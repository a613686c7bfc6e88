import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

struct AdviceEndToEndTests {
  /// Notes with a 2 MB file in Documents rewritten before each of three backups after the first.
  func churningNotes() throws -> Device {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    let writer = ContentWriter(seed: 3)
    try makeDirectories(device.home + "/Documents/Drafts")
    try Data("dear ada".utf8).write(to: URL(fileURLWithPath: device.home + "/Documents/Drafts/letter.txt"))
    for round in 0..<4 {
      try writer.write(device.home + "/Documents/big.bin", size: 2_000_000)
      if round > 0 { try device.trustSnapshots() }
      _ = try device.backup()
    }
    try device.trustSnapshots()
    return device
  }

  @Test func whyAnswersInAParagraphAndInJSON() throws {
    let device = try churningNotes()
    let text = try device.run("why", "com.example.notes", "Documents/Drafts/letter.txt")
    #expect(text.status == 0, "\(text.err)")
    #expect(text.out.contains("'Documents/Drafts/letter.txt' is backed up: it is in Documents"))
    #expect(text.out.contains("unchanged since snapshot"))
    let report = try #require(
      try device.json("why", "com.example.notes", "Documents/big.bin") as? [String: Any])
    #expect(
      Set(report.keys) == [
        "app", "path", "exists", "type", "bytes", "backedUp", "rule", "reason", "excludedBy",
        "protectionClass",
        "unreadable", "next", "history", "summary",
      ])
    #expect(report["rule"] as? String == "documents" && report["backedUp"] as? Bool == true)
    let history = try #require(report["history"] as? [String: Any])
    #expect(history["changes"] as? Int == 3 && history["bytesAdded"] as? Int == 6_000_000)
    let next = try #require(report["next"] as? [String: Any])
    #expect(next["action"] as? String == "reuse")

    let missing = try device.run("why", "com.example.notes", "Documents/nothing.txt")
    #expect(missing.status == 66 && missing.out.isEmpty)
    #expect(missing.err.split(separator: "\n").count == 1 && missing.err.contains("Documents/nothing.txt"))
    #expect(try device.run("why", "com.example.notes", "../other/Documents").status == 77)
    #expect(try device.run("why", "com.example.notes").status == 64)
    #expect(try device.run("why", "com.example.nope", "Documents/a").status == 66)
  }

  @Test func advisePointsAtTheChurningFileAndWritesTheHTMLPage() throws {
    let device = try churningNotes()
    let page = device.dir.url("advice.html")
    let result = try device.run("--json", "advise", "com.example.notes", "--last", "10", "--html", page)
    #expect(result.status == 0, "\(result.err)")
    let report = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [String: Any])
    #expect(report["snapshots"] as? Int == 4 && report["backups"] as? Int == 3)
    #expect(report["bytesPerBackup"] as? Int == 2_000_000)
    let findings = try #require(report["findings"] as? [[String: Any]])
    let top = try #require(findings.first)
    #expect(top["kind"] as? String == "large-changing-file" && top["path"] as? String == "Documents/big.bin")
    #expect(top["bytesPerBackup"] as? Int == 2_000_000)
    #expect(top["command"] as? String == "appbox exclude com.example.notes Documents/big.bin")
    #expect(report["html"] as? String == page)
    let html = try String(contentsOfFile: page, encoding: .utf8)
    #expect(html.contains("<svg") && html.contains("Documents/big.bin") && !html.contains("<script"))

    let text = try device.run("advise", "com.example.notes")
    #expect(text.status == 0)
    #expect(text.out.contains("1. Documents/big.bin  [large-changing-file]  saves about 2.0 MB per backup"))
    #expect(text.out.contains("$ appbox exclude com.example.notes Documents/big.bin"))

    // The command it prints works, and the next advice no longer finds the file changing.
    #expect(try device.run("exclude", "com.example.notes", "Documents/big.bin").status == 0)
    let inspect = try device.run("inspect", "com.example.notes")
    #expect(
      inspect.out.contains("advice        Documents/big.bin: a 2.0 MB file that changed on 3 of 3 backups"))
    let json = try #require(try device.json("inspect", "com.example.notes") as? [String: Any])
    #expect((json["advice"] as? [String: Any])?["path"] as? String == "Documents/big.bin")

    #expect(try device.run("advise", "com.example.notes", "--last", "0").status == 64)
  }

  @Test func withoutBackupsThereIsNothingToAdvise() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    let advise = try device.run("advise", "com.example.notes")
    #expect(advise.status == 66 && advise.err.contains("No snapshots"))
    #expect(try device.run("inspect", "com.example.notes").out.contains("advice        no backups yet"))
    let json = try #require(try device.json("inspect", "com.example.notes") as? [String: Any])
    #expect(json["advice"] is NSNull)
    #expect(try device.run("advise", "com.example.nope").status == 66)
  }
}
