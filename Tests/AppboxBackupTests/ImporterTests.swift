import AppboxArchive
import AppboxContainer
import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

/// One member of an archive built by `ArchiveWriter`.
struct Member: Sendable {
  var entry: ArchiveEntry
  var data: [UInt8] = []
  static func file(_ path: String, _ content: String = "x", permissions: UInt32 = 0o644) -> Member {
    Member(
      entry: .file(Array(path.utf8), size: Int64(content.utf8.count), permissions: permissions),
      data: Array(content.utf8))
  }
  static func directory(_ path: String, permissions: UInt32 = 0o755) -> Member {
    Member(entry: .directory(Array(path.utf8), permissions: permissions))
  }
  static func symlink(_ path: String, _ target: String) -> Member {
    Member(entry: .symlink(Array(path.utf8), target: Array(target.utf8)))
  }
  static func hardlink(_ path: String, _ target: String) -> Member {
    Member(entry: .hardlink(Array(path.utf8), target: Array(target.utf8)))
  }
  static func special(_ path: String, _ type: mode_t) -> Member {
    Member(entry: ArchiveEntry(path: Array(path.utf8), type: .other(UInt32(type)), permissions: 0o644))
  }
}

/// A hostile archive: a name for the test report and how to make its bytes.
struct HostileArchive: Sendable, CustomTestStringConvertible {
  var name: String
  var members: [Member]? = nil
  var raw: [UInt8]? = nil
  var compression: ArchiveCompression = .none
  var testDescription: String { name }
}

func writeArchive(_ path: String, _ members: [Member], compression: ArchiveCompression = .none) throws {
  let fd = try FileDescriptor.open(path, O_WRONLY | O_CREAT | O_TRUNC)
  try fd.closeAfter { fd in
    let writer = try ArchiveWriter(fileDescriptor: fd.rawValue, compression: compression)
    for member in members {
      try writer.writeHeader(member.entry)
      if !member.data.isEmpty { try writer.writeData(member.data) }
      try writer.finishEntry()
    }
    try writer.finish()
  }
}

let hostileCorpus: [HostileArchive] = {
  var corpus: [HostileArchive] = [
    HostileArchive(name: "parent traversal", members: [.file("Documents/../../escape")]),
    HostileArchive(name: "leading dot-dot", members: [.file("../escape")]),
    HostileArchive(name: "outside Documents and Library", members: [.file("tmp/x")]),
    HostileArchive(name: "into the bundle", members: [.file("Notes.app/Notes", "#!/bin/sh\n")]),
    HostileArchive(name: "appbox metadata", members: [.file(".appbox/manifest")]),
    HostileArchive(name: "top-level file", members: [.file("Documents")]),
    HostileArchive(
      name: "write through a symlink",
      members: [.symlink("Documents/link", "../Library"), .file("Documents/link/x")]),
    HostileArchive(name: "Documents as a symlink", members: [.symlink("Documents", "Library")]),
    HostileArchive(
      name: "hard link outside", members: [.hardlink("Documents/passwd", "../../../etc/passwd")]),
    HostileArchive(
      name: "hard link to a missing file", members: [.hardlink("Documents/h", "Documents/missing")]),
    HostileArchive(
      name: "hard link to a symlink",
      members: [.symlink("Documents/s", "x"), .hardlink("Documents/h", "Documents/s")]),
    HostileArchive(name: "character device", members: [.special("Documents/null", S_IFCHR)]),
    HostileArchive(name: "FIFO", members: [.special("Documents/pipe", S_IFIFO)]),
    HostileArchive(name: "setuid file", members: [.file("Documents/su", "x", permissions: 0o4755)]),
    HostileArchive(name: "setgid directory", members: [.directory("Documents/sg", permissions: 0o2755)]),
    HostileArchive(name: "file then directory", members: [.file("Documents/x"), .directory("Documents/x")]),
    HostileArchive(name: "file then symlink", members: [.file("Documents/x"), .symlink("Documents/x", "y")]),
    HostileArchive(name: "file twice", members: [.file("Documents/x"), .file("Documents/x")]),
    HostileArchive(name: "inside a file", members: [.file("Documents/f"), .file("Documents/f/g")]),
    HostileArchive(name: "zip file", raw: Array("PK\u{3}\u{4}".utf8) + [UInt8](repeating: 0, count: 600)),
    HostileArchive(
      name: "random bytes", raw: (0..<4096).map { UInt8(truncatingIfNeeded: $0 &* 2_654_435_761 >> 7) }),
    HostileArchive(name: "text file", raw: Array("just some text\n".utf8)),
  ]
  var capability = Member.file("Documents/tool")
  capability.entry.extendedAttributes = [
    ArchiveExtendedAttribute(name: "security.capability", value: [1, 2])
  ]
  corpus.append(HostileArchive(name: "non-user extended attribute", members: [capability]))

  var absolute = RawTar()
  absolute.header("/etc/cron.d/evil", size: 1)
  absolute.data([0x41])
  absolute.end()
  corpus.append(HostileArchive(name: "absolute name", raw: absolute.bytes))

  var override = RawTar()
  override.pax([("path", "../../evil")])
  override.header("Documents/harmless.txt", size: 1)
  override.data([0x41])
  override.end()
  corpus.append(HostileArchive(name: "pax path override", raw: override.bytes))

  var linkOverride = RawTar()
  linkOverride.pax([("linkpath", "/etc/shadow")])
  linkOverride.header("Documents/l", type: "1", linkName: "Documents/fine")
  linkOverride.end()
  corpus.append(HostileArchive(name: "pax linkpath override of a hard link", raw: linkOverride.bytes))

  var short = RawTar()
  short.header("Documents/big.bin", size: 1_000_000)
  short.data([UInt8](repeating: 1, count: 1000))
  short.end()
  corpus.append(HostileArchive(name: "declared size larger than the data", raw: short.bytes))
  return corpus
}()

struct ImporterTests {
  /// A home with known data, the capture of it, and the fixture.
  func prepared() throws -> (Fixture, [[UInt8]: CapturedEntry]) {
    let fixture = try Fixture()
    try fixture.write("Documents/keep.txt", "keep me")
    try fixture.write("Library/Preferences/com.example.notes.plist", "<plist/>")
    return (fixture, try captureTree(fixture.home))
  }

  func expectRefusedAndUnchanged(
    _ fixture: Fixture, _ before: [[UInt8]: CapturedEntry], archive: String, limits: ImportLimits? = nil,
    sourceLocation: SourceLocation = #_sourceLocation
  ) throws {
    #expect(sourceLocation: sourceLocation) {
      try fixture.session.importData(into: fixture.app, from: archive, options: ImportOptions(limits: limits))
    } throws: { error in
      (error as? BackupError)?.kind == .badData && "\(error)".hasPrefix("Refused to import")
    }
    expectSame(before, try captureTree(fixture.home), sourceLocation: sourceLocation)
    #expect(
      try FileManager.default.contentsOfDirectory(atPath: fixture.root.applicationRoot) == [
        fixture.app.containerID
      ],
      sourceLocation: sourceLocation)
  }

  @Test(arguments: hostileCorpus)
  func hostileArchivesAreRefusedWithTheHomeUnchanged(_ hostile: HostileArchive) throws {
    let (fixture, before) = try prepared()
    let archive = fixture.dir.url("hostile.tar")
    if let raw = hostile.raw {
      FileManager.default.createFile(atPath: archive, contents: Data(raw))
    } else {
      try writeArchive(archive, hostile.members ?? [], compression: hostile.compression)
    }
    try expectRefusedAndUnchanged(fixture, before, archive: archive)
  }

  @Test func oversizedContentAndTooManyEntriesAreRefused() throws {
    let (fixture, before) = try prepared()
    let archive = fixture.dir.url("big.tar")
    try writeArchive(archive, [.file("Documents/a", String(repeating: "a", count: 300))])
    try expectRefusedAndUnchanged(fixture, before, archive: archive, limits: ImportLimits(maxBytes: 200))
    try writeArchive(archive, (0..<5).map { .file("Documents/f\($0)") })
    try expectRefusedAndUnchanged(fixture, before, archive: archive, limits: ImportLimits(maxEntries: 3))
  }

  @Test func aDecompressionBombIsRefusedBeforeItExpands() throws {
    let (fixture, before) = try prepared()
    let archive = fixture.dir.url("bomb.tar.gz")
    let zeros = [UInt8](repeating: 0, count: 8 << 20)
    try writeArchive(
      archive, [Member(entry: .file(Array("Documents/zeros".utf8), size: Int64(zeros.count)), data: zeros)],
      compression: .gzip)
    let size = try FileManager.default.attributesOfItem(atPath: archive)[.size] as? Int ?? 0
    #expect(size < 100_000)
    try expectRefusedAndUnchanged(fixture, before, archive: archive, limits: ImportLimits(maxBytes: 1 << 20))
  }

  @Test func exportThenImportRoundTrips() throws {
    let fixture = try Fixture()
    try populate(fixture)
    // Export leaves FIFOs out (and says so); symlinks, absolute ones too, are data.
    try FileManager.default.removeItem(atPath: fixture.path("Documents/pipe"))
    try fixture.write("Documents/excluded.bin", "not exported")
    try fixture.setAttribute("Documents/excluded.bin", excludeFromBackupAttribute, [])
    var expected = try captureTree(
      fixture.home, skipping: ["Notes.app", "tmp", "Library/Caches", Home.metadataFile])
    expected[Array("Documents/excluded.bin".utf8)] = nil
    let archive = fixture.dir.url("export.tar")
    let exported = try fixture.session.exportData(of: fixture.app, to: archive)
    #expect(exported.files > 5)
    #expect(exported.skippedSpecialFiles.isEmpty)
    try FileManager.default.removeItem(atPath: fixture.path("Documents/a.txt"))
    try fixture.write("Documents/stray", "will be replaced")
    try fixture.write("tmp/kept", "tmp is not part of an import")
    _ = try fixture.session.importData(into: fixture.app, from: archive)
    expectSame(
      expected,
      try captureTree(fixture.home, skipping: ["Notes.app", "tmp", "Library/Caches", Home.metadataFile]))
    #expect(fixture.names(in: "tmp") == ["kept", "scratch"])
    #expect(fixture.names(in: "Library/Caches").isEmpty)
    #expect(try Seal.verify(bundleAt: fixture.path("Notes.app"), expectedDigest: fixture.app.seal).isValid)
  }

  @Test func anArchiveMadeByGNUTarIsAccepted() throws {
    let fixture = try Fixture()
    let source = TemporaryDirectory("gnutar")
    try source.write("Documents/notes/one.txt", "one")
    try source.write("Library/Preferences/p.plist", "<plist/>")
    try source.symlink("Documents/link", to: "notes/one.txt")
    let archive = fixture.dir.url("gnu.tar")
    let tar = try runProcess(
      "/usr/bin/tar", ["--format=pax", "-C", source.path, "-cf", archive, "Documents", "Library"])
    #expect(tar.status == 0, "\(tar.err)")
    _ = try fixture.session.importData(into: fixture.app, from: archive)
    expectSame(
      try captureTree(source.path),
      try captureTree(
        fixture.home,
        skipping: [
          "Notes.app", "tmp", "Library/Caches", Home.metadataFile,
        ]))
  }
}
