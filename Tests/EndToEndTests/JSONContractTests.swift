import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// docs/json.md IS the JSON contract: every command the fixtures reach runs with --json, and
/// what it prints is checked against that page's tables (JSONContract.swift). A field printed
/// but not documented, documented but never printed, missing where the page says it is always
/// there, or of another type fails, as does anything on stdout that is not one JSON document.
final class JSONContractRun: @unchecked Sendable {
  let contract: JSONContract
  let device: ProtectedDevice
  let work = TemporaryDirectory("json-contract")
  var checks: [String: ContractCheck] = [:]
  var errorCheck: ContractCheck
  var problems: [String] = []
  /// The command names (as docs/json.md's headings spell them) that ran.
  var exercised: Set<String> = ["error"]

  init() throws {
    contract = try JSONContract.load()
    device = try ProtectedDevice(passcode: nil, megabytes: 256)
    errorCheck = ContractCheck(section: "error", fields: contract.tables["error"] ?? [])
  }

  /// Runs `appbox --json ARGUMENTS`, expects `status`, and checks stdout against `section` (or,
  /// for a failure document, against the error section). Returns the document.
  @discardableResult
  func run(
    _ section: String, _ arguments: [String], status: Int32 = 0, input: String = "",
    environment: [String: String] = [:], root: String? = nil,
    sourceLocation: SourceLocation = #_sourceLocation
  ) throws -> JSON {
    let result = try appbox(
      ["--json"] + arguments, root: root ?? device.root, environment: environment, input: Array(input.utf8))
    let shown = arguments.joined(separator: " ")
    #expect(result.status == status, "\(shown): \(result.err)", sourceLocation: sourceLocation)
    guard let document = JSON.document(result.stdout) else {
      problems.append("\(shown): stdout is not one JSON document: \(result.out)")
      return .null
    }
    if case .object(let members) = document, Array(members.keys) == ["error"] {
      errorCheck.check(document, context: shown)
      #expect(
        document["error"]?["status"] == .integer(Int64(result.status)), "\(shown): \(result.out)",
        sourceLocation: sourceLocation)
      #expect(section == "error", "\(shown) failed: \(result.out)", sourceLocation: sourceLocation)
      return document
    }
    guard let heading = contract.headingOf[section], let fields = contract.tables[heading] else {
      problems.append("docs/json.md has no section for '\(section)' (\(shown))")
      return document
    }
    exercised.insert(section)
    checks[heading, default: ContractCheck(section: heading, fields: fields)].check(document, context: shown)
    return document
  }

  func home(_ app: String) throws -> String {
    try run("path", ["path", app])["path"]?.string ?? ""
  }
}

struct JSONContractTests {
  /// Fields no fixture reaches: each needs an entry root cannot fail to read, or a file that
  /// changes while it is read (HardeningTests and BackupEndToEndTests check those fields).
  static let unreached: [String: Set<String>] = [
    // An install of another version over an offloaded app (LifecycleEndToEndTests).
    "install": ["update"],
    "backup · backup --tag": [
      "[].incomplete", "[].unreadable", "[].unreadablePaths", "[].torn", "[].tornPaths",
    ],
    // Damage is recorded for objects of a shared store found damaged (DamagedObjectTests).
    "snapshots · snapshots --tag": [
      "[].incomplete", "[].unreadable", "[].unreadablePaths", "[].torn", "[].tornPaths", "[].damaged",
      "[].damage",
    ],
    "update": ["preUpdateIncomplete", "preUpdateUnreadable", "preUpdateUnreadablePaths"],
    "export": ["incomplete", "unreadable", "unreadablePaths"],
    "export-backup": ["domains[].incomplete", "domains[].unreadable", "domains[].unreadablePaths"],
    // A failed entry, a skipped path and a domain not imported need a backup folder made elsewhere
    // (extensions, Library/Caches in it, a domain failing mid-import: DeviceBackupEndToEndTests).
    "import-backup": [
      "snapshots[].incomplete", "snapshots[].unreadable", "snapshots[].unreadablePaths", "snapshots[].error",
      "snapshots[].error.status", "snapshots[].error.message", "snapshots[].skipped[].path",
      "snapshots[].skipped[].members", "notImported[].domain", "notImported[].reason",
    ],
  ]

  @Test(.enabled(if: EncryptedVolume.isAvailable))
  func everyCommandPrintsWhatDocsJSONSays() throws {
    let run = try JSONContractRun()
    #expect(
      run.contract.malformedRows.isEmpty,
      "rows docs/json.md's tables cannot read: \(run.contract.malformedRows)")
    try exercise(run)
    for problem in run.problems + run.errorCheck.problems { Issue.record(Comment(rawValue: problem)) }
    for (section, check) in run.checks.sorted(by: { $0.key < $1.key }) {
      for problem in check.problems { Issue.record(Comment(rawValue: problem)) }
      let unreached = Self.unreached[section] ?? []
      let never = Set(check.neverPrinted)
      #expect(
        never == unreached,
        "\(section): documented but never printed: \(never.subtracting(unreached).sorted()); printed although listed as unreached: \(unreached.subtracting(never).sorted())"
      )
    }
    #expect(run.errorCheck.neverPrinted.isEmpty, "error: \(run.errorCheck.neverPrinted)")
    // Every command the page names ran.
    let unexercised = Set(run.contract.headingOf.keys).subtracting(run.exercised)
    #expect(unexercised.isEmpty, "commands docs/json.md names that did not run: \(unexercised.sorted())")
  }

  func exercise(_ run: JSONContractRun) throws {
    let work = run.work
    let notes = "com.example.notes"
    let group = "group.com.example.shared"
    // Help, version, the device and its passcode.
    try run.run("help", ["help", "backup"])
    try run.run("help", ["forget", "--help"])
    try run.run("--version", ["--version"])
    try run.run("device show", ["device", "show"])
    try run.run("device init", ["device", "init", "--name", "JSON device"])
    try run.run("device passcode set", ["device", "passcode", "set"], input: "1234\n")
    try run.run("device passcode change", ["device", "passcode", "change"], input: "1234\n4321\n")
    // Apps.
    try run.run("install", ["install", fixturePath("bundles/Notes-1.0/Notes.app")])
    try run.run("install", ["install", fixturePath("bundles/Journal-1.0/Journal.app")])
    let other = try run.run("install", ["install", fixturePath("bundles/Other-1.0/Other.app")])
    try run.run("list", ["list"])
    try run.run("list --groups", ["list", "--groups"])
    try run.run("path", ["path", notes, "documents"])
    try run.run("path", ["path", notes, group])
    let home = try run.home(notes)
    // Files, preferences, exclusion, protection, the keychain.
    try run.run("files push", ["files", notes, "push", "-", "note.txt"], input: "hello\n")
    #expect(symlink("note.txt", home + "/Documents/link") == 0)
    try run.run("files ls", ["files", notes, "ls"])
    try run.run("files pull", ["files", notes, "pull", "note.txt"])
    try run.run("files pull", ["files", notes, "pull", "note.txt", work.url("note.txt")])
    try run.run("files push", ["files", notes, "push", work.url("note.txt"), "gone.txt"])
    try run.run("files rm", ["files", notes, "rm", "gone.txt"])
    try run.run("defaults write", ["defaults", notes, "write", "launchCount", "4", "--type", "int"])
    try run.run("defaults write", ["defaults", notes, "write", "theme", "dark", "--suite", group])
    try run.run("defaults read KEY", ["defaults", notes, "read", "launchCount"])
    try run.run("defaults read", ["defaults", notes, "read"])
    try run.run("defaults delete", ["defaults", notes, "delete", "launchCount"])
    try work.write("big.bin", bytes: randomBytes(2_000_000))
    try run.run("files push", ["files", notes, "push", work.url("big.bin"), "big.bin"])
    try run.run("exclude", ["exclude", notes, "Documents/note.txt"])
    try run.run("exclude", ["exclude", notes, "Documents/note.txt", "--undo"])
    try run.run("protect", ["protect", notes, "Documents"])
    try run.run("protect --class", ["protect", notes, "Documents", "--class", "until-first-unlock"])
    let item = ["--service", "sync", "--account", "ada"]
    try run.run("keychain add", ["keychain", notes, "add"] + item + ["--data", "s3cret"])
    try run.run("keychain get", ["keychain", notes, "get"] + item)
    try run.run("keychain update", ["keychain", notes, "update"] + item + ["--comment", "rotated"])
    try run.run("keychain list", ["keychain", notes, "list"])
    try run.run("keychain delete", ["keychain", notes, "delete"] + item)
    try run.run("keychain add", ["keychain", notes, "add"] + item + ["--data", "again"])
    try run.run("keychain reset", ["keychain", "com.example.journal", "reset"])
    // Backups: a big file that changes on every backup makes findings for advise and inspect.
    let first = try run.run("backup", ["backup", notes])
    for round in 1...3 {
      _ = round
      try work.write("big.bin", bytes: randomBytes(2_000_000))
      try run.run("files push", ["files", notes, "push", work.url("big.bin"), "big.bin"])
      try run.run("backup", ["backup", notes])
    }
    try run.run("why", ["why", notes, "Documents/big.bin"])
    try run.run("why", ["why", notes, "Documents"])
    try run.run("advise", ["advise", notes, "--html", work.url("advice.html")])
    try run.run("inspect", ["inspect", notes])
    try run.run("backup", ["backup", "--all"])
    try run.run("backup", ["backup", notes, "com.example.nope"], status: 66)
    let latest = try run.run("backup", ["backup", notes])
    let a = first.elements.first?["snapshot"]?.string ?? ""
    let b = latest.elements.first?["snapshot"]?.string ?? ""
    try run.run("snapshots", ["snapshots"])
    try run.run("diff", ["diff", a, b])
    try run.run("check", ["check", "--read-data"])
    // A tagged snapshot, and browsing one: its folders, a file and a folder out of it, a search.
    try run.run("backup --tag", ["backup", notes, "--tag", "json-contract"])
    try run.run("snapshots --tag", ["snapshots", "--tag", "json-contract"])
    try run.run("ls", ["ls", b])
    try run.run("ls", ["ls", "latest", "Documents", "--app", notes, "--long", "--recursive"])
    try run.run("dump", ["dump", b, "Documents/note.txt", "--output", work.url("dumped.txt")])
    #expect(try String(contentsOfFile: work.url("dumped.txt"), encoding: .utf8) == "hello\n")
    try run.run("dump", ["dump", b, "Documents", "--output", work.url("dumped.tar")])
    try run.run("error", ["dump", b, "Documents/note.txt"], status: 64)
    try run.run("find", ["find", "link", "--app", notes])
    try run.run("find", ["find", "Documents/*.txt", "--newest", "2"])
    try run.run("restore --include", ["restore", notes, "--snapshot", b, "--include", "Documents/note.txt"])
    try FileManager.default.createDirectory(atPath: work.url("then"), withIntermediateDirectories: true)
    try run.run("restore --target", ["restore", notes, "--snapshot", b, "--target", work.url("then")])
    #expect(FileManager.default.fileExists(atPath: work.url("then/Documents/note.txt")))
    // Export and import: a tar, into a directory, an .xcappdata package; a whole home's tar.
    try run.run("export", ["export", notes, work.url("data.tar")])
    try FileManager.default.createDirectory(atPath: work.url("exports"), withIntermediateDirectories: true)
    try run.run("export", ["export", notes, work.url("exports")])
    try run.run("export", ["export", notes, work.url("Notes.xcappdata")])
    try run.run("import", ["import", notes, work.url("data.tar")])
    try run.run("import", ["import", notes, work.url("Notes.xcappdata")])
    try work.write("whole/Documents/a.txt", "a\n")
    try work.write("whole/tmp/scratch", "x\n")
    _ = try runProcess(
      "/bin/tar", ["-cf", work.url("whole.tar"), "-C", work.url("whole"), "Documents", "tmp"])
    try run.run("import", ["import", notes, work.url("whole.tar")])
    // Repositories.
    let plain = work.url("plain-repo")
    let vault = work.url("vault")
    try work.write("pw", "first password\n")
    try work.write("pw2", "second password\n")
    chmod(work.url("pw"), 0o600)
    chmod(work.url("pw2"), 0o600)
    try run.run("repo init", ["repo", "init", "--repo", plain])
    try run.run("repo show", ["repo", "show"])
    try run.run(
      "repo init", ["repo", "init", "--repo", vault, "--encrypt", "--password-file", work.url("pw")])
    try run.run(
      "repo passwd",
      [
        "repo", "passwd", "--repo", vault, "--password-file", work.url("pw"), "--new-password-file",
        work.url("pw2"),
      ])
    let vaulted = try run.run(
      "backup", ["backup", notes, "--repo", vault, "--password-file", work.url("pw2")])
    try run.run(
      "archive decrypt",
      [
        "archive", "decrypt", vaulted.elements.first?["snapshot"]?.string ?? "", "--repo", vault,
        "--password-file", work.url("pw2"), "--output", work.url("plain.tar"),
      ])
    // iOS device backups: written from the app, listed, imported back (the app and its group).
    let deviceBackup = work.url("device-backup")
    try run.run("export-backup", ["export-backup", notes, deviceBackup])
    try run.run("import-backup --list", ["import-backup", deviceBackup, "--list"])
    try run.run("import-backup", ["import-backup", deviceBackup, "--all"])
    try run.run("error", ["import-backup", deviceBackup, "--app", "com.example.nope"], status: 66)
    // Update, revert with the groups, forget, restores.
    try run.run("update", ["update", notes, fixturePath("bundles/Notes-2.0/Notes.app")])
    try run.run("revert", ["revert", notes, "--with-groups"])
    try run.run("forget", ["forget", notes, "--keep-last", "2", "--dry-run"])
    try run.run("forget", ["forget", notes, "--keep-last", "2"])
    try run.run("restore --dry-run", ["restore", notes, "--dry-run"])
    try run.run("restore", ["restore", notes])
    try run.run("restore", ["restore", group])
    try run.run("snapshots", ["snapshots", notes])
    // A restore that installs the app and recreates its group restores the group too.
    try run.run("uninstall", ["uninstall", "com.example.journal"])
    try run.run("uninstall", ["uninstall", notes])
    try run.run("restore", ["restore", notes, "--snapshot", "latest"])
    // Reset, offload, and the install that puts the bundle back.
    try run.run("reset", ["reset", notes])
    try run.run("reset", ["reset", notes, "--keychain"])
    try run.run("offload", ["offload", "org.other.app"])
    try run.run("list", ["list"])
    try run.run("install", ["install", fixturePath("bundles/Other-1.0/Other.app")])
    // A bundle changed since install: a broken seal.
    let otherHome = other["home"]?.string ?? ""
    try "tampered".write(toFile: otherHome + "/Other.app/Info.plist", atomically: false, encoding: .utf8)
    try run.run("inspect", ["inspect", "org.other.app"])
    // Lock, unlock, reboot, clear the passcode.
    try run.run("device lock", ["device", "lock"])
    try run.run("device show", ["device", "show"])
    try run.run("device unlock", ["device", "unlock"], input: "4321\n")
    try run.run("device reboot", ["device", "reboot"])
    try run.run("device unlock", ["device", "unlock"], input: "4321\n")
    try run.run("device passcode clear", ["device", "passcode", "clear"], input: "4321\n")
    try exerciseRunningApps(run)
    // Failures: one document each, usage errors with the page to read.
    try run.run("error", ["inspect", "com.example.nope"], status: 66)
    try run.run("error", ["list", "--bogus"], status: 64)
    try run.run("error", ["run", notes, "--", "true"], status: 64)
    try run.run("error", ["simctl", "list", "devices"], status: 64)
    try run.run("error", ["restore", notes, "--snapshot", "ffffffff"], status: 66)
    // Copies of a device, which has no file protection keys (a device that had a passcode keeps
    // them: clone refuses it), then this device erased (last: nothing is left after it).
    let template = work.url("plain-device")
    try run.run("device init", ["device", "init", "--name", "Template"], root: template)
    try run.run("install", ["install", fixturePath("bundles/Notes-1.0/Notes.app")], root: template)
    try run.run("keychain add", ["keychain", notes, "add"] + item + ["--data", "s3cret"], root: template)
    try run.run("device clone", ["device", "clone", work.url("clone")], root: template)
    try run.run("device clone", ["device", "clone", work.url("clone-new"), "--new-device"], root: template)
    try run.run("device erase", ["device", "erase", "--keep-backups"])
  }
}

/// `count` bytes from /dev/urandom (content no chunk of which repeats, so each copy is stored whole).
func randomBytes(_ count: Int) -> [UInt8] {
  Array(FileHandle(forReadingAtPath: "/dev/urandom")?.readData(ofLength: count) ?? Data())
}
