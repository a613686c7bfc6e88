import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// Confined apps using the keychain from inside their sandbox, through the broker of their
/// `appbox run`/`launch`: shell scripts with `appbox-secitem`, and the C probe.
struct SecItemEndToEndTests {
  /// Notes, Journal (team ABCDE12345, sharing ABCDE12345.shared) and Other (team ZZZZZ99999).
  func threeApps() throws -> Device {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try device.install("Journal-1.0/Journal.app")
    try device.install("Other-1.0/Other.app")
    return device
  }

  @Test func aShellScriptAddsFindsUpdatesAndDeletesItsOwnItems() throws {
    let device = try threeApps()
    let script = """
      s() { "$@"; echo "status $?"; }
      s appbox-secitem add --service mail --account bob --data pw1 --label Mail
      s appbox-secitem add --service mail --account bob --data again
      v=$(appbox-secitem get --service mail --account bob); echo "status $?"; echo "data:$v"
      printf 'pw2 from stdin' | appbox-secitem update --service mail --account bob --data-file - --comment note
      echo "status $?"
      s appbox-secitem get --service mail --account bob --return attributes --json
      s appbox-secitem get --service mail --account bob --return both --json
      s appbox-secitem get --service mail --account bob --return none
      s appbox-secitem list
      s appbox-secitem delete --service mail --account bob
      s appbox-secitem get --service mail --account bob
      s appbox-secitem delete --service mail --account bob
      s appbox-secitem update --service mail --account bob --data x
      s appbox-secitem list
      printf kept > tmp/secret; s appbox-secitem add --service kept --account k --data-file tmp/secret --accessible after-first-unlock
      s appbox-secitem add --service x --account y
      s appbox-secitem add --service x --account y --data a --data-file tmp/secret
      s appbox-secitem get --limit zero
      s appbox-secitem frob
      """
    let result = try device.sh(SecItemApps.notes, script)
    #expect(result.status == 0, "\(result.err)")
    let out = result.out.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    let statuses = out.filter { $0.hasPrefix("status ") }.map { String($0.dropFirst(7)) }
    #expect(
      statuses == [
        "0", "73", "0", "0", "0", "0", "0", "0", "0", "66", "66", "66", "0", "0", "64", "64", "64", "64",
      ])
    #expect(out[3] == "data:pw1", "raw data, as stored")
    let attributes = try #require(
      try JSONSerialization.jsonObject(with: Data(out[5].utf8)) as? [String: Any], "\(out)")
    #expect(
      Set(attributes.keys) == [
        "class", "service", "account", "accessGroup", "label", "comment", "accessible", "created", "modified",
      ])
    #expect(attributes["label"] as? String == "Mail" && attributes["comment"] as? String == "note")
    #expect(attributes["accessGroup"] as? String == "ABCDE12345.com.example.notes")
    let both = try #require(try JSONSerialization.jsonObject(with: Data(out[7].utf8)) as? [String: Any])
    #expect(both["data"] as? String == Data("pw2 from stdin".utf8).base64EncodedString())
    #expect(result.out.contains("generic   mail"))
    #expect(result.out.contains("No keychain items."))
    let errors = result.err.split(separator: "\n").map(String.init)
    #expect(
      errors.contains {
        $0.hasPrefix(
          "appbox-secitem: The keychain already holds a generic password service 'mail' account 'bob'")
          && $0.hasSuffix("(errSecDuplicateItem, -25299)")
      }, "\(errors)")
    #expect(errors.contains { $0.hasSuffix("(errSecItemNotFound, -25300)") })
    #expect(errors.contains("appbox-secitem: add needs --data or --data-file"))
    #expect(errors.contains("appbox-secitem: give the secret with --data or --data-file, not both"))
    #expect(errors.contains("appbox-secitem: unknown command (add, get, update, delete or list)"))
    // What the app left, as the host sees it: its own group, its accessibility.
    let items = try #require(try device.json("keychain", SecItemApps.notes, "list") as? [[String: Any]])
    #expect(items.count == 1)
    #expect(
      items.first?["service"] as? String == "kept"
        && items.first?["accessible"] as? String == "after-first-unlock")
    #expect(
      try device.run("keychain", SecItemApps.notes, "get", "--service", "kept", "--account", "k").out
        == "kept")
  }

  /// `appbox-secitem --help` (anywhere on its command line) matches the golden file; outside
  /// appbox there is no broker (exit 69, one line).
  @Test func theCommandsHelpAndItsAbsenceOfABroker() throws {
    let tool = productsDirectory + "/appbox-secitem"
    let help = try runProcess(tool, ["--help"])
    #expect(help.status == 0 && help.err.isEmpty)
    #expect(try runProcess(tool, ["get", "--service", "s", "--help"]).out == help.out)
    let file = fixturePath("golden/help/appbox-secitem.txt")
    if ProcessInfo.processInfo.environment["APPBOX_UPDATE_GOLDEN"] != nil {
      try help.out.write(toFile: file, atomically: true, encoding: .utf8)
    }
    #expect(help.out == (try String(contentsOfFile: file, encoding: .utf8)))
    var environment = ProcessInfo.processInfo.environment
    environment.removeValue(forKey: "APPBOX_SECITEM_FD")
    let outside = try runProcess(tool, ["get", "--service", "s", "--account", "a"], environment: environment)
    #expect(outside.status == 69)
    #expect(
      outside.err
        == "appbox-secitem: no keychain broker: APPBOX_SECITEM_FD is not set (run this inside 'appbox run' or "
        + "'appbox launch') (errSecNotAvailable, -25291)\n")
  }

  @Test func appsOfATeamShareThroughItsGroupAndOtherTeamsAreRefused() throws {
    let device = try threeApps()
    let add = try device.sh(
      SecItemApps.notes,
      "printf 'team secret' | appbox-secitem add --service sync --account ada --group \(SecItemApps.shared) --data-file -"
    )
    #expect(add.status == 0, "\(add.err)")
    let journal = try device.sh(
      SecItemApps.journal, "appbox-secitem get --service sync --account ada; echo; appbox-secitem list")
    #expect(journal.status == 0, "\(journal.err)")
    #expect(journal.out.hasPrefix("team secret\n") && journal.out.contains(SecItemApps.shared))
    let refused = try device.sh(
      SecItemApps.other, "appbox-secitem get --service sync --account ada --group \(SecItemApps.shared)")
    #expect(refused.status == 77 && refused.out.isEmpty)
    #expect(
      refused.err
        == "appbox-secitem: org.other.app is not entitled to keychain access group 'ABCDE12345.shared' (its "
        + "groups: ZZZZZ99999.org.other.app) (errSecMissingEntitlement, -34018)\n")
    let unseen = try device.sh(
      SecItemApps.other,
      "appbox-secitem get --service sync --account ada; echo \"status $?\"; appbox-secitem list")
    #expect(unseen.out == "status 66\nNo keychain items.\n", "\(unseen.err)")
  }

  /// The fixture apps: Notes 1.0 stores a sync token at its first launch and 2.0 reads it
  /// back after the update; Journal reads it through the team's group; Other is refused.
  @Test func theFixtureAppsUseTheKeychainFromInside() throws {
    let device = try threeApps()
    let early = try device.run("launch", SecItemApps.journal)
    #expect(early.out == "Journal 1.0\n")
    #expect(early.err == "Journal 1.0: keychain: no shared sync token (appbox-secitem exit 66)\n")
    let first = try device.run("launch", SecItemApps.notes)
    #expect(first.status == 0 && first.out == "Notes 1.0: 1 note(s) in Documents/Notes\n", "\(first.err)")
    #expect(first.err == "Notes 1.0: keychain: stored a new sync token\n")
    let token = try device.run(
      "keychain", SecItemApps.notes, "get", "--service", "com.example.notes.sync", "--account", "default")
    #expect(token.status == 0 && token.stdout.count == 32, "16 random bytes in hex")
    #expect(
      try device.run("launch", SecItemApps.notes).err == "Notes 1.0: keychain: the sync token is there\n")
    #expect(
      try device.run("update", SecItemApps.notes, fixturePath("bundles/Notes-2.0/Notes.app")).status == 0)
    let fingerprint = String(SHA256Hex(token.stdout).prefix(12))
    let second = try device.run("launch", SecItemApps.notes)
    #expect(second.out == "Notes 2.0: 3 note(s) in Documents/Notes\n")
    #expect(second.err == "Notes 2.0: keychain: read the sync token back (sha256 \(fingerprint)...)\n")
    let journal = try device.run("launch", SecItemApps.journal)
    #expect(journal.err == "Journal 1.0: keychain: read the shared sync token (sha256 \(fingerprint)...)\n")
    let other = try device.run("launch", SecItemApps.other)
    #expect(other.out == "Other 3.1\n")
    #expect(
      other.err.hasPrefix("Other 3.1: keychain: org.other.app is not entitled to keychain access group")
        && other.err.hasSuffix("(errSecMissingEntitlement, -34018)\n"), "\(other.err)")
  }

  @Test func everyReturnTypeCombinationFromAConfinedCClient() throws {
    let device = Device()
    try device.installProbe("com.example.probe")
    let result = try device.probe("com.example.probe", "combos")
    let report = ProbeReport(result)
    #expect(result.status == 0 && report.failures.isEmpty, "\(report.failures) \(result.err)")
    // 3 x 3 x 5 copy combinations, 4 add combinations, cleanup and its check.
    #expect(report.lines.filter { $0.hasPrefix("combo ") && $0.hasSuffix(" ok") }.count == 45 + 4 + 2)
    #expect(report.passed("combo data=true attributes=true limit=all"))
  }

  @Test func malformedHugeAndTruncatedMessagesNeverStopTheBroker() throws {
    let device = Device()
    try device.installProbe("com.example.probe")
    let result = try device.probe("com.example.probe", "hostile")
    let report = ProbeReport(result)
    #expect(result.status == 0 && report.failures.isEmpty, "\(report.failures) \(result.err)")
    for label in [
      "garbage", "truncated-plist", "empty-frame", "not-a-dictionary", "unknown-key", "wrong-type",
      "unknown-operation", "no-class", "deep", "shared-reference-bomb", "oversized-item", "huge-frame",
      "truncated-frame", "bad-magic", "loop", "door-junk", "interleaved-writers", "stalled-session",
      "many-sessions",
    ] {
      #expect(report.passed("hostile " + label), "\(label)")
    }
    // The same app's session goes on: the keychain still works for it afterwards.
    let after = try device.sh(
      "com.example.probe",
      "appbox-secitem add --service s --account a --data d && appbox-secitem get --service s --account a")
    #expect(after.out == "d", "\(after.err)")
  }

  /// Two apps at once (two brokers on one keychain database), threads of one app, a parent and
  /// its forked child, and background jobs of a shell script.
  @Test func concurrentRequestsFromTwoAppsThreadsAndProcesses() throws {
    let device = Device()
    try device.installProbe("com.example.probe")
    try device.installProbe("org.other.probe", team: "ZZZZZ99999", groups: ["probe"])
    let first = try device.start("launch", "com.example.probe", "--", "threads", "4", "15")
    let second = try spawnProbe(device, "org.other.probe", "threads", "4", "15")
    first.waitUntilExit()
    #expect(first.terminationStatus == 0)
    let secondReport = ProbeReport(second)
    #expect(second.status == 0 && secondReport.passed("threads 4 x 15"), "\(second.out) \(second.err)")
    let forked = ProbeReport(try device.probe("com.example.probe", "fork", "10"))
    #expect(forked.passed("fork") && forked.failures.isEmpty, "\(forked.lines)")
    let shell = try device.sh(
      "com.example.probe",
      """
      for i in 1 2 3 4 5 6 7 8; do
        (appbox-secitem add --service jobs --account "a$i" --data "v$i" && \
         [ "$(appbox-secitem get --service jobs --account "a$i")" = "v$i" ] && echo "job $i ok") &
      done
      wait
      """)
    #expect(shell.out.split(separator: "\n").sorted() == (1...8).map { "job \($0) ok" }, "\(shell.err)")
    // The threads cleaned up after themselves; the jobs' items are there.
    let items = try #require(try device.json("keychain", "com.example.probe", "list") as? [[String: Any]])
    #expect(items.map { $0["service"] as? String } == Array(repeating: "jobs", count: 8))
  }

  /// The broker reads the class secrets for every request: a device locked while the app
  /// runs makes its when-unlocked items unavailable at once (errSecInteractionNotAllowed), an
  /// after-first-unlock item stays readable, and unlocking brings them back.
  @Test(.enabled(if: EncryptedVolume.isAvailable, "needs root and loop devices"))
  func aLockWhileTheAppRunsReachesItsKeychain() throws {
    let device = try ProtectedDevice()
    let home = try device.install("Notes-1.0/Notes.app")
    for (account, accessible) in [("u", "when-unlocked"), ("f", "after-first-unlock")] {
      try expectSuccess(
        device.run(
          "keychain", SecItemApps.notes, "add", "--service", "s", "--account", account, "--data",
          "v" + account,
          "--accessible", accessible))
    }
    // The app reads both each time a "go" file appears, and writes what it got.
    let script = """
      for round in 1 2 3; do
        while [ ! -e tmp/go$round ]; do sleep 0.05; done
        for a in u f; do v=$(appbox-secitem get --service s --account $a 2>&1); echo "$round $a $? $v"; done > tmp/part
        mv tmp/part tmp/out$round
      done
      """
    let process = try startAppbox(
      ["run", SecItemApps.notes, "--", "/bin/sh", "-c", script], root: device.root)
    defer {
      if process.isRunning { kill(process.processIdentifier, SIGKILL) }
      process.waitUntilExit()
    }
    func round(_ number: Int) -> String? {
      _ = FileManager.default.createFile(atPath: home + "/tmp/go\(number)", contents: nil)
      guard eventually({ FileManager.default.fileExists(atPath: home + "/tmp/out\(number)") }) else {
        return nil
      }
      return try? String(contentsOfFile: home + "/tmp/out\(number)", encoding: .utf8)
    }
    #expect(round(1) == "1 u 0 vu\n1 f 0 vf\n")
    try device.lock()
    let locked = try #require(round(2))
    #expect(
      locked.hasPrefix("2 u 69 appbox-secitem: Keychain items that are when-unlocked cannot be read"),
      "\(locked)")
    #expect(
      locked.contains("(errSecInteractionNotAllowed, -25308)") && locked.hasSuffix("2 f 0 vf\n"), "\(locked)")
    try device.unlock()
    #expect(round(3) == "3 u 0 vu\n3 f 0 vf\n")
  }

  /// Starts a probe app and collects its output (the probe's own report).
  private func spawnProbe(_ device: Device, _ app: String, _ arguments: String...) throws -> ProcessResult {
    try appbox(["launch", app, "--"] + arguments, root: device.root)
  }
}

/// The lowercase hex SHA-256 of `bytes` (sha256sum, as the fixture apps use).
func SHA256Hex(_ bytes: [UInt8]) -> String {
  let result = try? runProcess("/usr/bin/sha256sum", [], input: bytes)
  return String((result?.out ?? "").prefix(64))
}
