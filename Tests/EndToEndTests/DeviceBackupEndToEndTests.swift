// export-backup and import-backup as a user runs them, checked by independent readers of the
// format from PyPI (pyiosbackup, iphone_backup_decrypt: scripts/device-backup-readers.sh puts
// them in a virtualenv of their own; a machine that cannot install them fails these tests,
// never skips them), and by a round trip onto another device compared byte for byte.

import AppboxCore
import AppboxCrypto
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// The python of the readers' virtualenv, made on first use.
private let readersPython: Result<String, Error> = Result {
  let result = try runProcess("/bin/bash", [repositoryRoot + "/scripts/device-backup-readers.sh"])
  guard result.status == 0 else {
    throw SystemError(
      "install the device backup readers (scripts/device-backup-readers.sh exited \(result.status)): "
        + result.err.trimmingCharacters(in: .whitespacesAndNewlines))
  }
  return result.out.trimmingCharacters(in: .whitespacesAndNewlines)
}

/// What the readers found in a backup folder.
private func readBackup(_ folder: String, password: String? = nil) throws -> [String: Any] {
  let python = try readersPython.get()
  // pyiosbackup copies the manifest database to a temporary file it never removes: into a
  // directory of this read's, not /tmp.
  let scratch = TemporaryDirectory("backup-reader")
  var environment = ProcessInfo.processInfo.environment
  environment["TMPDIR"] = scratch.path
  let result = try runProcess(
    python, [repositoryRoot + "/scripts/read-device-backup.py", folder] + (password.map { [$0] } ?? []),
    environment: environment)
  #expect(result.status == 0, "\(result.err)")
  return try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [String: Any] ?? [:]
}

/// One entry as the readers describe it: kind, mode, size, whole-second mtime, content digest.
private struct Described: Equatable, CustomStringConvertible {
  var kind: String
  var mode: Int
  var size: Int
  var mtime: Int
  var sha256: String?
  var description: String { "\(kind) \(String(mode, radix: 8)) \(size) \(mtime) \(sha256 ?? "-")" }
}

/// Documents and Library of `home` (not Library/Caches) as the readers should describe them.
private func describeHome(_ home: String) throws -> [String: Described] {
  var result: [String: Described] = [:]
  for (path, entry) in try captureTree(home) {
    let text = String(decoding: path, as: UTF8.self)
    guard text.hasPrefix("Documents") || text.hasPrefix("Library"), !text.hasPrefix("Library/Caches") else {
      continue
    }
    var st = stat()
    guard lstat(home + "/" + text, &st) == 0 else { throw SystemError("lstat", path: text) }
    let kind = entry.type == .regular ? "file" : entry.type == .directory ? "directory" : "symlink"
    result[text] = Described(
      kind: kind, mode: Int(st.st_mode), size: entry.type == .regular ? Int(entry.size) : 0,
      mtime: Int(entry.modificationTime / 1_000_000_000), sha256: entry.content.map { SHA256.hash($0).hex })
  }
  return result
}

private func described(_ reading: [String: Any], domain: String) -> [String: Described] {
  var result: [String: Described] = [:]
  for case let entry as [String: Any] in reading["entries"] as? [Any] ?? [] {
    guard entry["domain"] as? String == domain, let path = entry["path"] as? String, !path.isEmpty else {
      continue
    }
    result[path] = Described(
      kind: entry["kind"] as? String ?? "", mode: entry["mode"] as? Int ?? -1,
      size: entry["size"] as? Int ?? -1,
      mtime: entry["mtime"] as? Int ?? -1, sha256: entry["sha256"] as? String)
  }
  return result
}

/// A home with what a backup format must carry: nesting, sizes around the AES block and the
/// read buffer, an empty file, modes, symlinks, a name that is not ASCII; whole-second times.
private func populate(_ device: Device) throws {
  try device.install("Notes-1.0/Notes.app")
  let home = device.home
  let files: [(String, [UInt8], mode_t)] = [
    ("Documents/notes.txt", Array("hello\n".utf8), 0o644),
    ("Documents/empty", [], 0o644),
    ("Documents/block16", [UInt8](repeating: 0x42, count: 16), 0o600),
    ("Documents/naïve ✓.txt", Array("unicode".utf8), 0o644),
    ("Documents/a/b/c/deep.bin", (0..<40_000).map { UInt8(truncatingIfNeeded: $0) }, 0o640),
    ("Documents/large.bin", (0..<(600 << 10)).map { UInt8(truncatingIfNeeded: $0 &* 131 &+ 7) }, 0o644),
    ("Documents/run.sh", Array("#!/bin/sh\n".utf8), 0o755),
    ("Library/Preferences/com.example.notes.plist", Array("<plist/>".utf8), 0o600),
    ("Library/Application Support/store.db", [UInt8](repeating: 7, count: 4097), 0o644),
    ("Library/Caches/never.bin", Array("cache".utf8), 0o644),
  ]
  for (path, bytes, mode) in files {
    try FileManager.default.createDirectory(
      atPath: splitPath(home + "/" + path).directory, withIntermediateDirectories: true)
    let fd = try FileDescriptor.open(home + "/" + path, O_WRONLY | O_CREAT | O_TRUNC, mode: mode)
    try fd.closeAfter { try $0.writeAll(bytes) }
    guard chmod(home + "/" + path, mode) == 0 else { throw SystemError("chmod", path: path) }
  }
  guard symlink("../notes.txt", home + "/Documents/a/up"), symlink("/etc/hostname", home + "/Documents/out")
  else {
    throw SystemError("symlink")
  }
  var paths: [String] = []
  for top in ["Documents", "Library"] {
    paths.append(home + "/" + top)
    let walker = FileManager.default.enumerator(atPath: home + "/" + top)
    while let next = walker?.nextObject() as? String { paths.append(home + "/" + top + "/" + next) }
  }
  for (index, path) in paths.sorted(by: { $0.count > $1.count }).enumerated() {
    var times = [
      timespec(tv_sec: 1_650_000_000 + index * 7, tv_nsec: 0),
      timespec(tv_sec: 1_650_000_000 + index * 7, tv_nsec: 0),
    ]
    guard utimensat(AT_FDCWD, path, &times, AT_SYMLINK_NOFOLLOW) == 0 else {
      throw SystemError("utimensat", path: path)
    }
  }
}

private func symlink(_ target: String, _ path: String) -> Bool { Glibc.symlink(target, path) == 0 }

struct DeviceBackupEndToEndTests {
  @Test func independentReadersAgreeWithAPlainAndAnEncryptedExportByteForByte() throws {
    let device = Device()
    try populate(device)
    let expected = try describeHome(device.home)
    #expect(expected.count == 18)
    let plain = device.dir.url("plain")
    let exported = try device.run("--json", "export-backup", "com.example.notes", plain)
    #expect(exported.status == 0, "\(exported.err)")
    let plainReading = try readBackup(plain)
    #expect(plainReading["encrypted"] as? Bool == false)
    #expect(described(plainReading, domain: "AppDomain-com.example.notes") == expected)

    let passwordFile = try device.dir.write("password", "correct horse ✓\n", mode: 0o600)
    let encrypted = device.dir.url("encrypted")
    let sealed = try device.run(
      "export-backup", "com.example.notes", encrypted, "--encrypt", "--password-file", passwordFile,
      environment: ["APPBOX_DEVICE_BACKUP_ROUNDS": "1000"])
    #expect(sealed.status == 0, "\(sealed.err)")
    let reading = try readBackup(encrypted, password: "correct horse ✓")
    #expect(reading["encrypted"] as? Bool == true)
    #expect(described(reading, domain: "AppDomain-com.example.notes") == expected)
    // iphone_backup_decrypt, a second reader, decrypts every file to the same bytes and times.
    let decrypted = reading["decrypted"] as? [String: String] ?? [:]
    let extracted = reading["extracted"] as? [String: [String: Any]] ?? [:]
    for (path, entry) in expected where entry.kind == "file" {
      #expect(decrypted["AppDomain-com.example.notes/" + path] == entry.sha256, "\(path)")
      let written = extracted["AppDomain-com.example.notes/" + path]
      #expect(written?["sha256"] as? String == entry.sha256, "\(path)")
      #expect(written?["mtime"] as? Int == entry.mtime, "\(path)")
    }
    // The files are encrypted on disk: no plaintext of a file is there.
    let grep = try runProcess("/bin/grep", ["-rl", "unicode", encrypted])
    #expect(grep.out.isEmpty)
  }

  @Test func anExportReadBackOnAnotherDeviceRestoresTheSameData() throws {
    let device = Device()
    try populate(device)
    let expected = try describeHome(device.home)
    let passwordFile = try device.dir.write("password", "pw\n", mode: 0o600)
    let folder = device.dir.url("backup")
    let environment = ["APPBOX_DEVICE_BACKUP_ROUNDS": "500"]
    #expect(
      try device.run(
        "export-backup", "com.example.notes", folder, "--encrypt", "--password-file", passwordFile,
        environment: environment
      )
      .status == 0)

    let other = Device()
    #expect(try other.run("device", "init").status == 0)
    let listed = try other.run("--json", "import-backup", folder, "--list", "--password-file", passwordFile)
    #expect(listed.status == 0, "\(listed.err)")
    let listing = try #require(try JSONSerialization.jsonObject(with: Data(listed.stdout)) as? [String: Any])
    let domains = listing["domains"] as? [[String: Any]] ?? []
    #expect(domains.map { $0["identifier"] as? String } == ["com.example.notes", "group.com.example.shared"])
    #expect(domains.first?["files"] as? Int == expected.values.filter { $0.kind != "directory" }.count)

    // Not installed there: the snapshot waits, and restore names the bundle to install.
    let imported = try other.run(
      "--json", "import-backup", folder, "--app", "com.example.notes", "--password-file", passwordFile)
    #expect(imported.status == 0, "\(imported.err)")
    let result = try #require(try JSONSerialization.jsonObject(with: Data(imported.stdout)) as? [String: Any])
    let snapshot = try #require((result["snapshots"] as? [[String: Any]])?.first)
    #expect(snapshot["waiting"] as? Bool == true)
    #expect(imported.err.contains("is not installed on this device"))
    let id = try #require(snapshot["snapshot"] as? String)
    let early = try other.run("restore", "com.example.notes", "--snapshot", id)
    #expect(early.status == 66)
    #expect(early.err.contains("install the bundle of com.example.notes"), "\(early.err)")
    #expect(early.err.split(separator: "\n").count == 1)

    try other.install("Notes-1.0/Notes.app")
    let restored = try other.run("restore", "com.example.notes", "--snapshot", id)
    #expect(restored.status == 0, "\(restored.err)")
    #expect(try describeHome(other.home) == expected)
    #expect(!FileManager.default.fileExists(atPath: other.home + "/Library/Caches/never.bin"))
    // The imported snapshot is an ordinary one: check reads every byte of it back.
    let checked = try other.run("check", "--read-data")
    #expect(checked.status == 0, "\(checked.out)\(checked.err)")

    // With the app installed, --all brings the app group's container too.
    let all = try other.run("--json", "import-backup", folder, "--all", "--password-file", passwordFile)
    #expect(all.status == 0, "\(all.err)")
    let kinds =
      (try JSONSerialization.jsonObject(with: Data(all.stdout)) as? [String: Any])?["snapshots"]
      as? [[String: Any]]
    #expect(kinds?.map { $0["kind"] as? String } == ["app", "group"])
    #expect(kinds?.allSatisfy { $0["waiting"] as? Bool == false } == true)
  }

  @Test func theExitStatusesAndTheOneLine() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    let passwordFile = try device.dir.write("password", "right\n", mode: 0o600)
    let wrongFile = try device.dir.write("wrong", "wrong\n", mode: 0o600)
    let folder = device.dir.url("backup")
    let environment = ["APPBOX_DEVICE_BACKUP_ROUNDS": "10"]
    #expect(
      try device.run(
        "export-backup", "com.example.notes", folder, "--encrypt", "--password-file", passwordFile,
        environment: environment
      )
      .status == 0)
    func expectOneLine(
      _ result: ProcessResult, _ status: Int32, _ says: String,
      sourceLocation: SourceLocation = #_sourceLocation
    ) {
      #expect(result.status == status, "\(result.err)", sourceLocation: sourceLocation)
      let lines = result.err.split(separator: "\n")
      #expect(lines.first?.contains(says) == true, "\(result.err)", sourceLocation: sourceLocation)
      // A usage error adds the line pointing at the command's help.
      #expect(lines.count == (status == 64 ? 2 : 1), "\(result.err)", sourceLocation: sourceLocation)
    }
    expectOneLine(
      try device.run("import-backup", folder, "--all", "--password-file", wrongFile), 77, "Wrong password")
    expectOneLine(try device.run("import-backup", folder, "--all"), 77, "is encrypted")
    expectOneLine(
      try device.run("import-backup", device.dir.url("nothing"), "--all"), 66, "No device backup folder")
    expectOneLine(
      try device.run("import-backup", folder, "--app", "com.example.other", "--password-file", passwordFile),
      66,
      "holds no app 'com.example.other'")
    expectOneLine(try device.run("export-backup", "com.example.notes", folder), 73, "already exists")
    expectOneLine(try device.run("import-backup", folder), 64, "choose what to import")
    expectOneLine(try device.run("export-backup", "com.example.notes"), 64, "name at least one app")
    // A damaged Manifest.db: 65, naming it; nothing recorded.
    let damaged = device.dir.url("damaged")
    #expect(try device.run("export-backup", "com.example.notes", damaged).status == 0)
    let database = damaged + "/Manifest.db"
    var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: database)))
    for index in 0..<32 { bytes[index] = 0 }
    try Data(bytes).write(to: URL(fileURLWithPath: database))
    expectOneLine(try device.run("import-backup", damaged, "--all"), 65, "Manifest.db")
    let archives =
      (try? FileManager.default.contentsOfDirectory(atPath: device.root + "/Backups/archives")) ?? []
    #expect(archives.isEmpty)
  }
}

/// Protection classes through the format, on a real encrypted volume (as root, with loop
/// devices, like the other file protection suites).
@Suite(.enabled(if: EncryptedVolume.isAvailable, "needs root and loop devices"))
struct DeviceBackupProtectionEndToEndTests {
  @Test func protectionClassesGoOutInTheFormatAndComeBackOnAnotherDevice() throws {
    let device = try ProtectedDevice()
    let home = try device.install("Notes-1.0/Notes.app")
    try Data("secret".utf8).write(to: URL(fileURLWithPath: home + "/Documents/secret.txt"))
    try Data("plain".utf8).write(to: URL(fileURLWithPath: home + "/Documents/plain.txt"))
    try expectSuccess(
      device.run("protect", "com.example.notes", "Documents/secret.txt", "--class", "complete"))
    let passwordFile = device.volume.path + "/password"
    try Data("pw\n".utf8).write(to: URL(fileURLWithPath: passwordFile))
    guard chmod(passwordFile, 0o600) == 0 else { throw SystemError("chmod", path: passwordFile) }
    let folder = device.volume.path + "/backup"
    try expectSuccess(
      device.run(
        "export-backup", "com.example.notes", folder, "--encrypt", "--password-file", passwordFile,
        environment: ["APPBOX_DEVICE_BACKUP_ROUNDS": "100"]))
    // iphone_backup_decrypt reads the class of each file as the platform numbers them.
    let reading = try readBackup(folder, password: "pw")
    let classes = reading["protection"] as? [String: Int] ?? [:]
    #expect(classes["AppDomain-com.example.notes/Documents/secret.txt"] == 1, "\(classes)")
    #expect(classes["AppDomain-com.example.notes/Documents/plain.txt"] == 4, "\(classes)")

    let other = try device.sibling("other", passcode: ProtectedDevice.passcode)
    _ = try device.install("Notes-1.0/Notes.app", root: other)
    try expectSuccess(
      appbox(
        ["import-backup", folder, "--app", "com.example.notes", "--password-file", passwordFile], root: other)
    )
    try expectSuccess(appbox(["restore", "com.example.notes"], root: other))
    let restored = try device.classes("com.example.notes", "Documents", root: other)
    #expect(restored["Documents/secret.txt"] == "complete", "\(restored)")
    #expect(restored["Documents/plain.txt"] == "none", "\(restored)")
  }
}
