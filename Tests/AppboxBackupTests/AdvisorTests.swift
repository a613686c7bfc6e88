import AppboxCLI
import AppboxContainer
import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

/// A seeded history: a small home from the benchmark's generator, backed up once, then
/// `backups` more times with known churners changed before each backup and a few generated
/// files rewritten as noise. Records what every churner cost, to check the advisor against.
final class SeededHistory: @unchecked Sendable {
  let fixture: Fixture
  let backups: Int
  /// Bytes each churner's content added over the measured backups, by path.
  private(set) var written: [String: Int64] = [:]
  let writer = ContentWriter(seed: 99)

  static let largeFile = "Documents/Exports/report.bin"
  static let largeSize = 1_500_000
  static let database = "Library/Application Support/Index.sqlite"
  static let thumbnails = "Documents/Thumbnails"
  static let log = "Documents/app.log"
  static let excluded = "Documents/Offline Cache"

  init(backups: Int = 6) throws {
    fixture = try Fixture()
    self.backups = backups
    let home = fixture.home
    try generateData(home: home, shape: HomeShape(files: 300, bytes: 3_000_000, seed: 5))
    var noise: [String] = []
    for area in ["Documents", "Library/Application Support"] {
      let enumerator = FileManager.default.enumerator(atPath: home + "/" + area)
      while let relative = enumerator?.nextObject() as? String {
        if relative.hasSuffix(".bin") { noise.append(home + "/" + area + "/" + relative) }
      }
    }
    noise.sort()
    try makeDirectories(home + "/Documents/Exports")
    try makeDirectories(home + "/" + Self.thumbnails)
    try makeDirectories(home + "/" + Self.excluded)
    try writer.write(home + "/" + Self.excluded + "/blob.bin", size: 200_000)
    try fixture.setAttribute(Self.excluded, excludeFromBackupAttribute, Array("1".utf8))
    try change(0, measured: false)
    _ = try fixture.backup()
    var random = SeededRandom(seed: 17)
    for round in 1...backups {
      // Noise: a few generated files rewritten in place, same size.
      for _ in 0..<4 {
        let path = noise[random.below(noise.count)]
        var st = stat()
        lstat(path, &st)
        try writer.write(path, size: Int(st.st_size))
      }
      try change(round, measured: true)
      try fixture.trustSnapshots()
      _ = try fixture.backup()
    }
  }

  /// Changes every churner; counts their bytes when the coming backup is measured.
  private func change(_ round: Int, measured: Bool) throws {
    let home = fixture.home
    func count(_ path: String, _ bytes: Int) { if measured { written[path, default: 0] += Int64(bytes) } }
    // A large file rewritten in place (same inode) with all-new content on every backup: no
    // chunk of it can be reused.
    var bytes = [UInt8](repeating: 0, count: Self.largeSize)
    var random = SeededRandom(seed: UInt64(1000 + round))
    bytes.withUnsafeMutableBytes { random.fill($0) }
    try Data(bytes).write(to: URL(fileURLWithPath: home + "/" + Self.largeFile))
    count(Self.largeFile, Self.largeSize)
    // A database written anew and renamed over the old one, with a similar size.
    let size = 600_000 + round * 3_000
    try writer.write(home + "/" + Self.database + ".new", size: size)
    guard rename(home + "/" + Self.database + ".new", home + "/" + Self.database) == 0 else {
      throw SystemError("rename", path: Self.database)
    }
    count(Self.database, size)
    // Three new thumbnails per backup.
    for index in 0..<3 {
      try writer.write(home + "/\(Self.thumbnails)/thumb-\(round)-\(index).jpg", size: 30_000)
      count(Self.thumbnails, 30_000)
    }
    // A log that grows.
    try writer.write(home + "/" + Self.log, size: 10_000 * (round + 1))
    count(Self.log, 10_000 * (round + 1))
  }

  /// What `path` added per measured backup.
  func perBackup(_ path: String) -> Int64 { (written[path] ?? 0) / Int64(backups) }
}

/// `estimate` is within 5% of `expected`.
func isClose(_ estimate: Int64, _ expected: Int64) -> Bool {
  abs(Double(estimate - expected)) <= 0.05 * Double(expected)
}

struct AdvisorTests {
  @Test func rankedFindingsNameTheKnownChurnersWithEstimatesWithinFivePercent() throws {
    let history = try SeededHistory()
    let report = try history.fixture.repository.advise(app: history.fixture.app.bundleIdentifier)
    #expect(report.snapshots.count == history.backups + 1)
    #expect(report.backups == history.backups)

    let findings = report.findings
    let paths = findings.map { display($0.path) }
    #expect(
      Array(paths.prefix(4)) == [
        SeededHistory.largeFile, SeededHistory.database, SeededHistory.thumbnails, SeededHistory.log,
      ], "\(paths)")
    #expect(findings[0].kind == .largeAndChanging)
    #expect(findings[1].kind == .databaseRewrittenWhole)
    #expect(
      findings[2].kind == .regenerable && findings[2].regenerable == .thumbnails && findings[2].isDirectory)
    #expect(findings[3].kind == .regenerable && findings[3].regenerable == .logs && !findings[3].isDirectory)
    for finding in findings.prefix(4) {
      let expected = history.perBackup(display(finding.path))
      #expect(
        isClose(finding.bytesPerBackup, expected),
        "\(display(finding.path)): \(finding.bytesPerBackup) vs \(expected)")
    }
    #expect(findings[0].changes == history.backups && findings[0].backups == history.backups)
    #expect(findings[0].command == "appbox exclude com.example.notes Documents/Exports/report.bin")
    #expect(
      findings[1].command == "appbox exclude com.example.notes 'Library/Application Support/Index.sqlite'")

    // Marked data in Documents comes last, saving nothing (it is already excluded), with no command.
    let last = try #require(findings.last)
    #expect(last.kind == .excludedInDocuments && display(last.path) == SeededHistory.excluded)
    #expect(last.bytesPerBackup == 0 && last.command == nil && last.isDirectory)

    // The rankings: the same two files lead; the thumbnails folder is among the directories.
    #expect(
      report.files.prefix(2).map { display($0.path) } == [SeededHistory.largeFile, SeededHistory.database])
    #expect(isClose(report.files[0].bytesPerBackup, history.perBackup(SeededHistory.largeFile)))
    #expect(report.files[0].size == Int64(SeededHistory.largeSize))
    #expect(report.frequentlyChanged.first?.changes == history.backups)
    let thumbnails = try #require(report.directories.first { display($0.path) == SeededHistory.thumbnails })
    #expect(thumbnails.changes == history.backups && thumbnails.files == 3 * (history.backups + 1))
  }

  @Test func everyMeasuredBackupIsAttributedToTheBytesItsArchiveAdded() throws {
    let history = try SeededHistory(backups: 3)
    let report = try history.fixture.repository.advise(app: history.fixture.app.bundleIdentifier)
    #expect(report.chart.bars.count == 3)
    for (bar, snapshot) in zip(report.chart.bars, report.snapshots.dropFirst()) {
      #expect(bar.snapshot == snapshot.id)
      // The engine's own count of what the archive added: the chart accounts for all of it.
      #expect(bar.bytes.reduce(0, +) == snapshot.bytesAdded, "\(bar.bytes) vs \(snapshot.bytesAdded)")
    }
    #expect(report.chart.groups.first == "Documents/Exports")
    #expect(report.bytesAdded == report.snapshots.dropFirst().reduce(0) { $0 + $1.bytesAdded })
  }

  @Test func lastLimitsTheWindowAndAFirstSnapshotMeasuresNothing() throws {
    let history = try SeededHistory(backups: 3)
    let repository = history.fixture.repository
    let app = history.fixture.app.bundleIdentifier
    let two = try repository.advise(app: app, options: AdviceOptions(last: 2))
    #expect(two.snapshots.count == 2 && two.backups == 2)
    #expect(isClose(two.findings[0].bytesPerBackup, Int64(SeededHistory.largeSize)))
    let one = try repository.advise(app: app, options: AdviceOptions(last: 1))
    #expect(one.backups == 1)

    let fresh = try Fixture()
    try fresh.write("Documents/Thumbnails/a.jpg", bytes: [UInt8](repeating: 7, count: 100_000))
    _ = try fresh.backup()
    let first = try fresh.repository.advise(app: fresh.app.bundleIdentifier)
    #expect(first.backups == 0 && first.bytesAdded == 0 && first.chart.bars.isEmpty)
    // Regenerable data is flagged from the latest snapshot alone, saving nothing measured yet.
    #expect(first.findings.map(\.kind) == [.regenerable])
    #expect(first.findings[0].bytesPerBackup == 0 && first.findings[0].size == 100_000)

    #expect(throws: BackupError.self) { try fresh.repository.advise(app: "com.example.none") }
  }

  @Test func contentTheRepositoryHoldsCostsOnlyWhenItStreams() throws {
    let fixture = try Fixture()
    let small = [UInt8](repeating: 1, count: 50_000)
    let large = (0..<400_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
    try fixture.write("Documents/small.bin", bytes: small)
    try fixture.write("Documents/large.bin", bytes: large)
    _ = try fixture.backup()
    // Touched: same content, new mtime. The small file is deduplicated; the large one streams
    // into the archive again.
    var times = [timespec(tv_sec: 1_000_000, tv_nsec: 0), timespec(tv_sec: 1_000_000, tv_nsec: 0)]
    for name in ["small.bin", "large.bin"] {
      #expect(utimensat(AT_FDCWD, fixture.path("Documents/" + name), &times, 0) == 0)
    }
    try fixture.trustSnapshots()
    let second = try fixture.backup()
    #expect(second.snapshot.bytesAdded == Int64(large.count))
    // Changed, then back to the first version: content the repository holds, written again
    // when it streams.
    try fixture.write("Documents/large.bin", bytes: large.reversed())
    try fixture.write("Documents/small.bin", bytes: [UInt8](repeating: 2, count: 50_000))
    try fixture.trustSnapshots()
    let third = try fixture.backup()
    try fixture.write("Documents/large.bin", bytes: large)
    try fixture.write("Documents/small.bin", bytes: small)
    try fixture.trustSnapshots()
    let fourth = try fixture.backup()
    #expect(fourth.snapshot.bytesAdded == Int64(large.count))
    let report = try fixture.repository.advise(app: fixture.app.bundleIdentifier)
    let byPath = Dictionary(uniqueKeysWithValues: report.files.map { (display($0.path), $0) })
    #expect(byPath["Documents/large.bin"]?.bytesAdded == Int64(3 * large.count))
    #expect(
      byPath["Documents/small.bin"]?.bytesAdded == 50_000 && byPath["Documents/small.bin"]?.changes == 3)
    for (bar, snapshot) in zip(report.chart.bars, [second.snapshot, third.snapshot, fourth.snapshot]) {
      #expect(bar.bytes.reduce(0, +) == snapshot.bytesAdded)
    }
  }

  /// A file marked exclude-from-backup after it changed is still there: its size now is its
  /// size, not "gone" (nil); a deleted one is gone.
  @Test func aFileExcludedLaterKeepsItsSizeAndADeletedOneIsGone() throws {
    let fixture = try Fixture()
    for name in ["maps.bin", "old.bin"] {
      try fixture.write("Documents/" + name, bytes: [UInt8](repeating: 1, count: 30_000))
    }
    _ = try fixture.backup()
    for name in ["maps.bin", "old.bin"] {
      try fixture.write("Documents/" + name, bytes: [UInt8](repeating: 2, count: 40_000))
    }
    try fixture.trustSnapshots()
    _ = try fixture.backup()
    try fixture.setAttribute("Documents/maps.bin", excludeFromBackupAttribute, Array("1".utf8))
    try FileManager.default.removeItem(atPath: fixture.path("Documents/old.bin"))
    try fixture.trustSnapshots()
    _ = try fixture.backup()
    let report = try fixture.repository.advise(app: fixture.app.bundleIdentifier)
    let byPath = Dictionary(uniqueKeysWithValues: report.files.map { (display($0.path), $0) })
    #expect(byPath["Documents/maps.bin"]?.size == 40_000)
    #expect(byPath["Documents/old.bin"] != nil && byPath["Documents/old.bin"]?.size == nil)
  }

  @Test func namesAreClassifiedByWordsNotSubstrings() {
    func directory(_ name: String) -> RegenerableKind? {
      NameClassifier.regenerableKind(ofDirectory: Array(name.utf8))
    }
    func file(_ name: String, media: Bool = false) -> RegenerableKind? {
      NameClassifier.regenerableKind(ofFile: Array(name.utf8), inMediaSource: media)
    }
    #expect(directory("Thumbnails") == .thumbnails)
    #expect(directory("ThumbnailCache") == .thumbnails)
    #expect(directory("image_cache") == .caches)
    #expect(directory("Logs") == .logs)
    #expect(directory("Downloads") == .downloads)
    #expect(directory("Catalog") == nil && directory("Blog") == nil && directory("Dialogs") == nil)
    #expect(directory("Templates") == nil && directory("Photos") == nil)
    #expect(file("crash.log") == .logs)
    #expect(file("video.mp4.part") == .temporary)
    #expect(file("episode-12.mp3") == .downloads)
    #expect(file("song.m4a", media: true) == .downloads)
    #expect(file("holiday.mov") == nil)
    #expect(file("catalog.json") == nil && file("report.pdf") == nil)
    #expect(
      NameClassifier.isDatabase(Array("Model.sqlite".utf8)) && NameClassifier.isDatabase(Array("x.DB".utf8)))
    #expect(
      !NameClassifier.isDatabase(Array("Model.sqlite-wal".utf8))
        && !NameClassifier.isDatabase(Array("db".utf8)))
  }

  @Test func theHTMLPageIsSelfContainedAndEscapesHostileNames() throws {
    let history = try SeededHistory(backups: 2)
    let hostile = "Documents/<script>alert(1)</script>&\"'.log"
    try history.fixture.write(hostile, bytes: [UInt8](repeating: 9, count: 70_000))
    try history.fixture.trustSnapshots()
    _ = try history.fixture.backup()
    let report = try history.fixture.repository.advise(app: history.fixture.app.bundleIdentifier)
    #expect(report.findings.contains { display($0.path) == hostile })
    let page = report.html()
    #expect(page.hasPrefix("<!DOCTYPE html>") && page.contains("<svg") && page.contains("</html>"))
    #expect(!page.lowercased().contains("<script"))
    #expect(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;&amp;&quot;&#39;.log"))
    // Nothing fetched: no script, stylesheet, image or font from anywhere.
    for reference in ["src=", "href=", "url(", "@import"] {
      #expect(!page.contains(reference), "\(reference)")
    }
    #expect(page.contains(SeededHistory.largeFile) && page.contains("Documents/Exports"))
  }

  @Test func printablePathsAndShellWordsNeverCarryControlBytes() {
    #expect(printablePath(Array("a\nb\u{1B}[2J".utf8)) == "a\\x0ab\\x1b[2J")
    #expect(printablePath([0x66, 0xFF, 0x2F, 0x78]) == "f\\xff/x")
    #expect(printablePath(Array("café\\".utf8)) == "café\\\\")
    #expect(printablePath(Array("a\u{202E}b\u{2066}".utf8)) == "a\\u{202e}b\\u{2066}")
    #expect(shellCommand([Array("Documents/a b's".utf8)]) == "'Documents/a b'\\''s'")
    #expect(shellCommand([Array("Documents/x\ny".utf8)]) == "p1=$(printf 'Documents/x\\012y.'); \"${p1%.}\"")
    #expect(shellCommand([Array("Documents/plain.txt".utf8)]) == "Documents/plain.txt")
    #expect(formattedByteCount(999) == "999 B" && formattedByteCount(1_500_000) == "1.5 MB")
  }

  /// Each command runs in dash, sh and bash as one command of exactly its words, whatever the
  /// names hold, and shows no control or direction character.
  @Test func suggestedCommandsAreOneCommandInEveryPOSIXShell() throws {
    let directory = TemporaryDirectory("shell-words")
    let names: [[UInt8]] = [
      Array("Documents/x'$(touch PWNED)'\ny".utf8), Array("Documents/x'$(touch PWNED) #\n.bin".utf8),
      Array("Documents/a\\b%s%%\t`touch PWNED`\u{1B}[2J".utf8),
      Array("Documents/\u{202E}nib.exe".utf8), Array("Documents/ends in newlines\n\n".utf8),
      Array("Documents/'\"'\"".utf8), Array("".utf8), [0x44, 0xFF, 0x0A, 0x27],
      Array("Documents/\u{85}".utf8),
    ]
    for name in names {
      let command = shellCommand([Array("/usr/bin/printf".utf8), Array("%s|".utf8), name, Array("end".utf8)])
      #expect(!command.unicodeScalars.contains { $0.value < 0x20 || $0.value >= 0x7F }, "\(command)")
      for shell in ["/usr/bin/dash", "/bin/sh", "/usr/bin/bash"] {
        let result = try runProcess(shell, ["-c", command], currentDirectory: directory.path)
        #expect(result.status == 0 && result.stdout == name + Array("|end|".utf8), "\(shell): \(command)")
      }
      #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty, "\(command)")
    }
  }
}
