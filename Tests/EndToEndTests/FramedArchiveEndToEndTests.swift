// Framed zstd archives through the real binary: the default backup writes `<id>.tar.zst`, which
// GNU tar, bsdtar and zstd read as is; `--compress none` and `gzip` still write what they did;
// restore, dump, check and forget work across all three in one repository; `archive decrypt` of
// an encrypted framed archive gives the .tar.zst; import takes a framed archive as input.

import AppboxArchive
import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

struct FramedArchiveEndToEndTests {
  /// Text that compresses, a photo that does not, and the sample data's every kind of entry.
  static func populate(_ device: Device) throws {
    try writeSampleData(home: device.home)
    var text: [UInt8] = []
    var random = SeededRandom(seed: 4)
    let words = ["ledger", "entry", "total", "march", "april", "paid", "due", "\n", "note", "the"]
    while text.count < 600_000 { text += Array((words[random.below(words.count)] + " ").utf8) }
    try Data(text).write(to: URL(fileURLWithPath: device.home + "/Documents/ledger.txt"))
    var photo = [UInt8](repeating: 0, count: 400_000)
    photo.withUnsafeMutableBytes { random.fill($0) }
    photo.replaceSubrange(0..<4, with: [0xFF, 0xD8, 0xFF, 0xE0])
    try Data(photo).write(to: URL(fileURLWithPath: device.home + "/Documents/photo.jpg"))
  }

  @Test func theDefaultBackupIsAFramedArchiveThatStandardToolsRead() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try Self.populate(device)
    let snapshot = try device.backup()
    let id = try #require(snapshot["snapshot"] as? String)
    let archive = try #require(snapshot["archive"] as? String)
    #expect(archive == device.repository + "/archives/\(id).tar.zst")
    let stored = try #require(try FileManager.default.attributesOfItem(atPath: archive)[.size] as? Int)
    #expect(stored < 1_000_000 + 400_000, "\(stored) bytes stored")

    #expect(try runProcess("/usr/bin/zstd", ["-t", "-q", archive]).status == 0)
    for (tool, arguments) in [
      ("/usr/bin/tar", ["--zstd", "--warning=no-unknown-keyword", "-xf", archive]),
      ("/usr/bin/bsdtar", ["-xf", archive]),
    ] {
      let target = TemporaryDirectory("framed-extract")
      let result = try runProcess(tool, arguments + ["-C", target.path])
      #expect(result.status == 0, "\(tool): \(result.err)")
      #expect(
        try Data(contentsOf: URL(fileURLWithPath: target.url("Documents/ledger.txt")))
          == Data(contentsOf: URL(fileURLWithPath: device.home + "/Documents/ledger.txt")), "\(tool)")
      #expect(try String(contentsOfFile: target.url("Documents/a.txt"), encoding: .utf8) == "lower case")
    }

    // dump reads the file in place, restore brings the whole home back, check reads every frame.
    let dumped = try device.run("dump", id, "Documents/photo.jpg")
    #expect(dumped.status == 0, "\(dumped.err)")
    #expect(
      Data(dumped.stdout)
        == (try Data(contentsOf: URL(fileURLWithPath: device.home + "/Documents/photo.jpg"))))
    let before = try captureTree(device.home, skipping: ["Notes.app", "tmp", "Library/Caches"])
    try FileManager.default.removeItem(atPath: device.home + "/Documents/ledger.txt")
    #expect(try device.run("restore", "com.example.notes").status == 0)
    #expect(try captureTree(device.home, skipping: ["Notes.app", "tmp", "Library/Caches"]) == before)
    let check = try device.run("check", "--read-data")
    #expect(check.status == 0, "\(check.out)\(check.err)")
  }

  /// Every `--compress` value still works, and one repository holds them all: each snapshot
  /// restores, `forget` repacks what it keeps into a framed archive, check finds nothing wrong.
  @Test func everyCompressionInOneRepositoryAndAForget() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try Self.populate(device)
    var captures: [(String, [[UInt8]: CapturedEntry])] = []
    for (index, compression) in ["none", "gzip", "zstd"].enumerated() {
      try Data("version \(index)".utf8).write(to: URL(fileURLWithPath: device.home + "/Documents/v.txt"))
      try device.trustSnapshots()
      let snapshot = try device.backup("--compress", compression)
      let suffix = ["none": ".tar", "gzip": ".tar.gz", "zstd": ".tar.zst"][compression]!
      #expect((snapshot["archive"] as? String)?.hasSuffix(suffix) == true, "\(compression)")
      captures.append(
        (
          snapshot["snapshot"] as! String,
          try captureTree(device.home, skipping: ["Notes.app", "tmp", "Library/Caches"])
        ))
    }
    for (id, capture) in captures.reversed() {
      let restored = try device.run("restore", "com.example.notes", "--snapshot", id)
      #expect(restored.status == 0, "\(restored.err)")
      #expect(try captureTree(device.home, skipping: ["Notes.app", "tmp", "Library/Caches"]) == capture)
    }
    let forget = try device.json("forget", "com.example.notes", "--keep-last", "1") as? [String: Any]
    let repack = try #require(forget?["newArchive"] as? String)
    #expect(repack.hasSuffix(".tar.zst"))
    #expect(
      try runProcess("/usr/bin/tar", ["--zstd", "-tf", device.repository + "/archives/" + repack]).status == 0
    )
    let check = try device.run("check", "--read-data")
    #expect(check.status == 0, "\(check.out)\(check.err)")
    #expect(try device.run("restore", "com.example.notes").status == 0)
    #expect(
      try captureTree(device.home, skipping: ["Notes.app", "tmp", "Library/Caches"]) == captures.last!.1)
  }

  /// An encrypted repository seals the framed archive: `archive decrypt` gives the .tar.zst
  /// (its JSON says `zstd`), and restore reads it through the sealed segments.
  @Test func anEncryptedFramedArchiveDecryptsToATarZst() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try Self.populate(device)
    let password = device.dir.url("pw.txt")
    try "correct horse\n".write(toFile: password, atomically: true, encoding: .utf8)
    let vault = device.dir.url("vault")
    #expect(
      try device.run("repo", "init", "--repo", vault, "--encrypt", "--password-file", password).status == 0)
    let snapshot = try device.backup("--repo", vault, "--password-file", password)
    let id = try #require(snapshot["snapshot"] as? String)
    let output = device.dir.url("out.tar.zst")
    let summary = try device.run(
      "--json", "archive", "decrypt", id, "--repo", vault, "--password-file", password, "--output", output)
    #expect(summary.status == 0, "\(summary.err)")
    let object = try JSONSerialization.jsonObject(with: Data(summary.stdout)) as? [String: Any]
    #expect(object?["compression"] as? String == "zstd")
    let listing = try runProcess("/usr/bin/tar", ["--zstd", "-tf", output])
    #expect(listing.status == 0 && listing.out.contains("Documents/ledger.txt"), "\(listing.err)")
    try FileManager.default.removeItem(atPath: device.home + "/Documents/ledger.txt")
    let restored = try device.run(
      "restore", "com.example.notes", "--repo", vault, "--password-file", password)
    #expect(restored.status == 0, "\(restored.err)")
    #expect(FileManager.default.fileExists(atPath: device.home + "/Documents/ledger.txt"))
  }

  /// import reads a framed archive (any zstd is one layer of compression to libarchive).
  @Test func importTakesAFramedArchive() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    let path = device.dir.url("data.tar.zst")
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
    let writer = try ArchiveWriter(fileDescriptor: fd, compression: .zstd, name: path, framing: .standard)
    let content = Array(String(repeating: "imported line\n", count: 50_000).utf8)
    try writer.writeHeader(.directory(Array("Documents".utf8)))
    try writer.finishEntry()
    try writer.writeHeader(.file(Array("Documents/big.txt".utf8), size: Int64(content.count)))
    try writer.writeData(content)
    try writer.finishEntry()
    try writer.finish()
    close(fd)
    let result = try device.run("import", "com.example.notes", path)
    #expect(result.status == 0, "\(result.err)")
    #expect(Array(try Data(contentsOf: URL(fileURLWithPath: device.home + "/Documents/big.txt"))) == content)
  }
}
