import AppboxContainer
import AppboxCore
import AppboxCrypto
import AppboxPlist
import AppboxStore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

/// One Manifest.db row of a hand-built backup, and the content file it comes with.
struct HandRow: Sendable {
  var domain = "AppDomain-com.example.notes"
  var path: String
  var flags: Int64 = 1
  var mode: UInt32 = UInt32(S_IFREG | 0o644)
  var size: Int64?
  var content: [UInt8]? = Array("data".utf8)
  var target: String?
  var fileID: String?
  var blob: [UInt8]?
  var protectionClass: Int64 = 4

  static func file(_ path: String, _ content: String = "data", mode: UInt32 = 0o644) -> HandRow {
    HandRow(path: path, mode: UInt32(S_IFREG) | mode, content: Array(content.utf8))
  }
  static func directory(_ path: String) -> HandRow {
    HandRow(path: path, flags: 2, mode: UInt32(S_IFDIR | 0o755), content: nil)
  }
  static func symlink(_ path: String, _ target: String) -> HandRow {
    HandRow(path: path, flags: 4, mode: UInt32(S_IFLNK | 0o777), content: nil, target: target)
  }
}

/// Writes a plain backup folder from rows, as a hostile tool might. `primaryKey: false` makes
/// a Files table that accepts two rows of one path.
func handBuiltBackup(_ folder: String, _ rows: [HandRow], primaryKey: Bool = true) throws {
  try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
  let manifest: PropertyList = .dictionary([
    "IsEncrypted": .bool(false), "Version": .string("10.0"),
    "Lockdown": .dictionary(["ProductVersion": .string("17.0"), "UniqueDeviceID": .string("00008030-0011")]),
  ])
  try manifest.binaryData().write(to: URL(fileURLWithPath: folder + "/Manifest.plist"))
  let status: PropertyList = .dictionary(["SnapshotState": .string("finished")])
  try status.binaryData().write(to: URL(fileURLWithPath: folder + "/Status.plist"))
  let database = try Database(path: folder + "/Manifest.db")
  try database.execute(
    "CREATE TABLE Files (fileID TEXT\(primaryKey ? " PRIMARY KEY" : ""), domain TEXT, relativePath TEXT, flags INTEGER, file BLOB)"
  )
  let all = [HandRow.directory("")] + rows
  for row in all {
    let id = row.fileID ?? DeviceBackupNames.fileID(domain: row.domain, relativePath: Array(row.path.utf8))
    var record = MBFileRecord(
      mode: row.mode, size: row.size ?? Int64(row.content?.count ?? 0), lastModified: 1_700_000_000,
      lastStatusChange: 1_700_000_000, birth: 1_700_000_000, protectionClass: row.protectionClass)
    record.target = row.target.map { Array($0.utf8) }
    let blob = row.blob ?? [UInt8](record.encoded(relativePath: Array(row.path.utf8)))
    try database.execute(
      "INSERT INTO Files VALUES (?, ?, ?, ?, ?)", .text(id), .text(row.domain), .text(row.path),
      .integer(row.flags),
      .blob(blob))
    if let content = row.content, DeviceBackupNames.isFileID(Array(id.utf8)) {
      try FileManager.default.createDirectory(
        atPath: folder + "/" + id.prefix(2), withIntermediateDirectories: true)
      try Data(content).write(to: URL(fileURLWithPath: folder + "/" + id.prefix(2) + "/" + id))
    }
  }
}

func contentPath(_ folder: String, _ path: String, domain: String = "AppDomain-com.example.notes") -> String {
  let id = DeviceBackupNames.fileID(domain: domain, relativePath: Array(path.utf8))
  return folder + "/" + id.prefix(2) + "/" + id
}

/// A hostile backup: its rows, what to do to the folder after, and what the refusal says.
struct HostileDeviceBackup: Sendable, CustomTestStringConvertible {
  var name: String
  var rows: [HandRow]
  var primaryKey = true
  var limits = ImportLimits()
  var tamper: (@Sendable (String) throws -> Void)? = nil
  var says: String
  var testDescription: String { name }
}

let hostileDeviceBackups: [HostileDeviceBackup] = [
  .init(
    name: "a path climbing out", rows: [.file("Documents/../../../escape")], says: "climbs out with '..'"),
  .init(name: "an absolute path", rows: [.file("/etc/cron.d/evil")], says: "has an absolute path"),
  .init(name: "an empty component", rows: [.file("Documents//x")], says: "empty or '.' component"),
  .init(
    name: "one path twice", rows: [.file("Documents/a", "one"), .file("Documents/a", "two")],
    primaryKey: false,
    tamper: { folder in
      // Both rows share the content file; the second is what the folder holds.
      try Data("two".utf8).write(to: URL(fileURLWithPath: contentPath(folder, "Documents/a")))
    }, says: "appears twice"),
  .init(
    name: "a write through a symlink", rows: [.symlink("Documents/l", "../../.."), .file("Documents/l/x")],
    says: "would be written through the symbolic link"),
  .init(
    name: "a file inside a file", rows: [.file("Documents/f"), .file("Documents/f/x")],
    says: "which is a file"),
  .init(
    name: "a huge size", rows: [HandRow(path: "Documents/bomb", size: 1 << 50, content: Array("x".utf8))],
    says: "a disk bomb"),
  .init(
    name: "a sparse-looking file beyond the limit",
    rows: [HandRow(path: "Documents/sparse", size: 64 << 20, content: nil)],
    limits: ImportLimits(maxEntries: 100, maxBytes: 1 << 20),
    tamper: { folder in
      let path = contentPath(folder, "Documents/sparse")
      try FileManager.default.createDirectory(
        atPath: splitPath(path).directory, withIntermediateDirectories: true)
      guard creat(path, 0o644) >= 0, truncate(path, 64 << 20) == 0 else {
        throw SystemError("truncate", path: path)
      }
    }, says: "a disk bomb"),
  .init(
    name: "too many rows", rows: (0..<20).map { .file("Documents/f\($0)") },
    limits: ImportLimits(maxEntries: 10),
    says: "more than 10 members"),
  .init(
    name: "content that is a symlink out", rows: [.file("Documents/secret")],
    tamper: { folder in
      let path = contentPath(folder, "Documents/secret")
      try FileManager.default.removeItem(atPath: path)
      guard Glibc.symlink("/etc/passwd", path) == 0 else { throw SystemError("symlink", path: path) }
    }, says: "is a symbolic link or leads out of the folder"),
  .init(
    name: "a content folder that is a symlink", rows: [.file("Documents/secret")],
    tamper: { folder in
      let directory = splitPath(contentPath(folder, "Documents/secret")).directory
      try FileManager.default.moveItem(atPath: directory, toPath: folder + "/../elsewhere")
      guard Glibc.symlink("../elsewhere", directory) == 0 else {
        throw SystemError("symlink", path: directory)
      }
    }, says: "is a symbolic link or leads out of the folder"),
  .init(
    name: "content of the wrong size",
    rows: [HandRow(path: "Documents/short", size: 10, content: Array("12345".utf8))],
    says: "is damaged: it holds 5 bytes, Manifest.db says 10"),
  .init(
    name: "a fileID that is not the SHA-1 of the path",
    rows: [
      HandRow(
        path: "Documents/a", fileID: DeviceBackupNames.fileID(domain: "HomeDomain", relativePath: [0x61]))
    ],
    says: "fileID that is not the SHA-1"),
  .init(
    name: "a fileID that is a path",
    rows: [HandRow(path: "Documents/a", fileID: "../../../../../../etc/passwd")],
    says: "fileID that is not the SHA-1"),
  .init(
    name: "flags that disagree with the mode",
    rows: [HandRow(path: "Documents/d", flags: 1, mode: UInt32(S_IFDIR | 0o755))],
    says: "disagrees with its flags"),
  .init(name: "unknown flags", rows: [HandRow(path: "Documents/x", flags: 8)], says: "has flags 8"),
  .init(
    name: "a damaged MBFile", rows: [HandRow(path: "Documents/x", blob: Array("bplist00garbage".utf8))],
    says: "damaged MBFile"),
  .init(name: "a setuid file", rows: [.file("Documents/su", mode: 0o4755)], says: "setuid or setgid"),
  .init(name: "a symlink without a target", rows: [.symlink("Documents/l", "")], says: "empty target"),
  .init(
    name: "Manifest.db that is a symlink", rows: [],
    tamper: { folder in
      try FileManager.default.moveItem(atPath: folder + "/Manifest.db", toPath: folder + "/../other.db")
      guard Glibc.symlink("../other.db", folder + "/Manifest.db") == 0 else { throw SystemError("symlink") }
    }, says: "'Manifest.db' is a symbolic link"),
  .init(
    name: "Manifest.db that is not a database", rows: [],
    tamper: { folder in
      try Data(repeating: 0x41, count: 8192).write(to: URL(fileURLWithPath: folder + "/Manifest.db"))
    },
    says: "Manifest.db is not an SQLite database"),
  .init(
    name: "a Files view", rows: [],
    tamper: { folder in
      try FileManager.default.removeItem(atPath: folder + "/Manifest.db")
      let database = try Database(path: folder + "/Manifest.db")
      try database.execute(
        "CREATE TABLE t (fileID, domain, relativePath, flags, file); CREATE VIEW Files AS SELECT * FROM t")
    }, says: "has no ordinary Files table"),
  .init(
    name: "a damaged Manifest.plist", rows: [],
    tamper: { folder in
      try Data("bplist00\u{0}\u{1}".utf8).write(to: URL(fileURLWithPath: folder + "/Manifest.plist"))
    },
    says: "Manifest.plist is damaged"),
  .init(
    name: "an unfinished backup", rows: [],
    tamper: { folder in
      try PropertyList.dictionary(["SnapshotState": .string("uploading")]).binaryData().write(
        to: URL(fileURLWithPath: folder + "/Status.plist"))
    }, says: "did not finish"),
]

@Suite("Device backups: hostile folders")
struct DeviceBackupHostileTests {
  /// Imports `folder` into a fresh device and repository; returns the refusal.
  private func refusal(_ fixture: Fixture, _ folder: String, limits: ImportLimits = ImportLimits()) throws
    -> BackupError?
  {
    let before = try treeManifest(fixture.dir.path)
    do {
      let backup = try DeviceBackup(at: folder) { nil }
      _ = try fixture.repository.importSnapshot(
        of: .app("com.example.notes", installed: fixture.app), from: backup, in: fixture.session,
        limits: limits)
      Issue.record("imported a hostile backup")
      return nil
    } catch let error as BackupError {
      // All or nothing: no snapshot, no archive, and the folder (and all around it) untouched
      // but for the repository's own lock and debris-free directories.
      #expect(try fixture.repository.catalog.snapshots(app: "com.example.notes").isEmpty)
      let archives = try FileManager.default.contentsOfDirectory(atPath: fixture.repository.archivesPath)
      #expect(archives.isEmpty, "archives left: \(archives)")
      let after = try treeManifest(fixture.dir.path)
      let changed = Set(before.keys).symmetricDifference(after.keys).filter {
        !$0.hasPrefix("repo/") && !$0.hasPrefix("root/.appbox/locks")
      }
      #expect(changed.isEmpty, "changed: \(changed.sorted())")
      #expect(!error.message.contains("\n"))
      return error
    }
  }

  @Test(arguments: hostileDeviceBackups)
  func aHostileFolderIsRefusedWithOneLineAndNothingRecorded(_ hostile: HostileDeviceBackup) throws {
    let fixture = try Fixture()
    let folder = fixture.dir.url("hostile")
    try handBuiltBackup(folder, hostile.rows, primaryKey: hostile.primaryKey)
    try hostile.tamper?(folder)
    let error = try refusal(fixture, folder, limits: hostile.limits)
    #expect(error?.code == .refusedArchive)
    #expect(error?.message.contains(hostile.says) == true, "\(error?.message ?? "no error")")
    #expect(error?.message.contains(folder) == true)
  }

  @Test func missingContentIsReportedAndMakesTheSnapshotIncomplete() throws {
    let fixture = try Fixture()
    let folder = fixture.dir.url("b")
    try handBuiltBackup(
      folder, [.file("Documents/here", "here"), .file("Documents/gone", "gone"), .file("Documents/none", "")])
    try FileManager.default.removeItem(atPath: contentPath(folder, "Documents/gone"))
    try FileManager.default.removeItem(atPath: contentPath(folder, "Documents/none"))
    let observer = RecordingObserver()
    let result = try fixture.repository.importSnapshot(
      of: .app("com.example.notes", installed: fixture.app), from: try DeviceBackup(at: folder) { nil },
      in: fixture.session, observer: observer)
    #expect(result.snapshot.isIncomplete)
    #expect(result.snapshot.unreadable == 1)
    #expect(result.snapshot.unreadablePaths == [Array("Documents/gone".utf8)])
    #expect(observer.warnings.contains { $0.contains("is not in the backup folder") })
    _ = try fixture.repository.restore("com.example.notes", snapshot: result.snapshot.id, in: fixture.session)
    // Never invented: the missing file is absent; an empty one needs no content file.
    #expect(!FileManager.default.fileExists(atPath: fixture.path("Documents/gone")))
    #expect(fixture.names(in: "Documents") == ["here", "none"])
  }

  @Test func symlinksAreDataAndWhatAHomeDoesNotKeepIsLeftOut() throws {
    let fixture = try Fixture()
    let folder = fixture.dir.url("b")
    try handBuiltBackup(
      folder,
      [
        .symlink("Documents/out", "../../../../../etc/passwd"), .file("Library/Caches/c"),
        .file("SystemData/x"),
        HandRow(path: "Library/secret", content: Array("s".utf8), protectionClass: 1),
      ])
    let result = try fixture.repository.importSnapshot(
      of: .app("com.example.notes", installed: fixture.app), from: try DeviceBackup(at: folder) { nil },
      in: fixture.session)
    #expect(result.skipped.map(\.path).sorted() == ["Library/Caches", "SystemData"])
    let library = try fixture.repository.catalog.tree(
      try #require(
        try fixture.repository.catalog.tree(result.snapshot.rootTree).entry(named: Array("Library".utf8))?
          .digest))
    let secret = try #require(library.entry(named: Array("secret".utf8)))
    #expect(
      secret.extendedAttributes == [
        ExtendedAttribute(name: protectionClassAttribute, value: Array("complete".utf8))
      ])
    _ = try fixture.repository.restore("com.example.notes", snapshot: result.snapshot.id, in: fixture.session)
    var target = [CChar](repeating: 0, count: 256)
    let length = readlink(fixture.path("Documents/out"), &target, 255)
    #expect(
      String(decoding: target[0..<max(0, length)].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        == "../../../../../etc/passwd")
  }

  @Test func theListingCountsAppsGroupsExtensionsAndTheSystem() throws {
    let fixture = try Fixture()
    let folder = fixture.dir.url("b")
    var widget = HandRow.file("Documents/w", "widget")
    widget.domain = "AppDomainPlugin-com.example.notes.widget"
    var home = HandRow.file("Library/Preferences/com.apple.x.plist", "system")
    home.domain = "HomeDomain"
    var group = HandRow.file("shared.db", "123456789")
    group.domain = "AppDomainGroup-group.com.example.shared"
    try handBuiltBackup(
      folder, [.file("Documents/a", "abc"), .directory("Documents/d"), widget, home, group])
    let listing = try DeviceBackup(at: folder) { nil }.listing()
    #expect(
      listing.domains == [
        DeviceBackupDomainSummary(
          kind: .app, identifier: "com.example.notes", files: 1, directories: 2, bytes: 3),
        DeviceBackupDomainSummary(
          kind: .group, identifier: "group.com.example.shared", files: 1, directories: 0, bytes: 9),
        DeviceBackupDomainSummary(
          kind: .plugin, identifier: "com.example.notes.widget", files: 1, directories: 0, bytes: 6),
      ])
    #expect(listing.systemDomains == 1 && listing.systemEntries == 1)
  }

  @Test func damagedEncryptedBackupsAreRefusedNamingWhatIsDamaged() throws {
    let fixture = try Fixture()
    try fixture.write("Documents/a.txt", "some text that fills more than a block")
    let password = Array("pw".utf8)
    func export(_ name: String) throws -> String {
      let folder = fixture.dir.url(name)
      _ = try fixture.session.exportDeviceBackup(
        [.app(fixture.app)], to: folder,
        options: DeviceBackupExportOptions(password: password, rounds: testRounds))
      return folder
    }
    func keybagEdited(_ folder: String, _ edit: (inout DeviceBackupKeybag) -> Void, truncate: Bool = false)
      throws
    {
      let url = URL(fileURLWithPath: folder + "/Manifest.plist")
      guard case .dictionary(var manifest) = try PropertyList.decode(try Data(contentsOf: url)),
        let bag = manifest["BackupKeyBag"]?.data
      else { throw BackupError(.invalidRequest, "no keybag") }
      var keybag = try DeviceBackupKeybag.parse([UInt8](bag))
      edit(&keybag)
      let bytes = keybag.encoded()
      manifest["BackupKeyBag"] = .data(Data(truncate ? Array(bytes.prefix(bytes.count - 3)) : bytes))
      try PropertyList.dictionary(manifest).binaryData().write(to: url)
    }
    let cases: [(String, (String) throws -> Void, String)] = [
      ("a truncated keybag", { try keybagEdited($0, { _ in }, truncate: true) }, "the keybag has a record"),
      (
        "unbounded rounds", { try keybagEdited($0, { $0.passwordIterations = .max }) }, "PBKDF2-SHA256 rounds"
      ),
      (
        "a damaged file",
        { folder in
          let path = contentPath(folder, "Documents/a.txt")
          var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
          bytes[bytes.count - 1] ^= 0x5A
          try Data(bytes).write(to: URL(fileURLWithPath: path))
        }, "is damaged"
      ),
      (
        "a damaged Manifest.db",
        { folder in
          let url = URL(fileURLWithPath: folder + "/Manifest.db")
          var bytes = [UInt8](try Data(contentsOf: url))
          for index in 0..<64 { bytes[index] ^= 0xFF }
          try Data(bytes).write(to: url)
        }, "Manifest.db is not an SQLite database"
      ),
    ]
    for (index, (name, tamper, says)) in cases.enumerated() {
      let folder = try export("enc-\(index)")
      try tamper(folder)
      let error = #expect(throws: BackupError.self, "\(name)") {
        let backup = try DeviceBackup(at: folder) { password }
        _ = try fixture.repository.importSnapshot(
          of: .app("com.example.notes", installed: fixture.app), from: backup, in: fixture.session)
      }
      #expect(error?.code == .refusedArchive, "\(name)")
      #expect(error?.message.contains(says) == true, "\(name): \(error?.message ?? "")")
    }
    #expect(try fixture.repository.catalog.snapshots(app: "com.example.notes").isEmpty)
  }
}
