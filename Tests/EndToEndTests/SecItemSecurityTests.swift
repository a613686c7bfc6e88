import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// What an app cannot do with the keychain broker: claim another identity, reach another
/// running app's broker, or find a secret it did not ask for.
struct SecItemSecurityTests {
  /// Keys naming another app are not part of the protocol (errSecParam), another app's groups
  /// are refused (errSecMissingEntitlement), and the app still sees only its own items.
  @Test func forgingAnotherAppsIdentityChangesNothing() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    let notes = try device.sh(
      SecItemApps.notes,
      """
      appbox-secitem add --service private --account a --data notes-only
      appbox-secitem add --service team --account a --data shared --group \(SecItemApps.shared)
      """)
    #expect(notes.status == 0, "\(notes.err)")
    // A probe of Notes' team, entitled to the shared group only, asking for Notes' own group.
    try device.installProbe("com.example.probe")
    let sameTeam = try device.probe("com.example.probe", "forge", "ABCDE12345.com.example.notes")
    let report = ProbeReport(sameTeam)
    #expect(sameTeam.status == 0 && report.failures.isEmpty, "\(report.failures)")
    #expect(report.lines.filter { $0.hasPrefix("forge ") && $0.hasSuffix(" ok") }.count == 14)
    #expect(report.value("visible-groups") == "ABCDE12345.shared/team (status 0)")
    // Another team: nothing of ABCDE12345 at all.
    try device.installProbe("org.other.probe", team: "ZZZZZ99999", groups: ["probe"])
    let otherTeam = ProbeReport(try device.probe("org.other.probe", "forge", SecItemApps.shared))
    #expect(otherTeam.failures.isEmpty, "\(otherTeam.failures)")
    #expect(otherTeam.value("visible-groups") == "(status -25300)")
    // Notes' items are as they were.
    let items = try #require(try device.json("keychain", SecItemApps.notes, "list") as? [[String: Any]])
    #expect(items.compactMap { $0["service"] as? String }.sorted() == ["private", "team"])
  }

  /// The app has its stdio and the door, nothing else; its /proc shows its own processes only,
  /// as root and unprivileged.
  @Test(arguments: Privilege.testable)
  func onlyTheDoorIsInheritedAndOnlyTheAppsOwnProcessesAreVisible(_ privilege: Privilege) throws {
    let device = try HostileDevice(privilege)
    let bundle = try SecItemApps.probeBundle(
      in: device.dir, identifier: "com.example.probe", team: "ABCDE12345", groups: ["shared"])
    let home = device.home(try device.install(bundle))
    let result = try device.appbox(["launch", "com.example.probe", "--", "descriptors"])
    let report = ProbeReport(result)
    #expect(result.status == 0, "\(result.out) \(result.err)")
    #expect(report.value("open-descriptors") == "0 1 2 3")
    #expect(report.passed("door-is-seqpacket"))
    let processes = try #require(report.value("visible-processes")).split(separator: " ")
    let uids = Set(processes.map { $0.split(separator: ":")[1] })
    #expect(processes.count == 2 && uids.count == 1, "\(processes)")  // the jail's reaper and the probe
    if privilege == .root {  // the app's own uid, which owns its data
      var st = stat()
      #expect(stat(home + "/Documents", &st) == 0 && uids == ["\(st.st_uid)"], "\(uids)")
    }
    // The broker works for this user too.
    let roundTrip = try device.appbox([
      "run", "com.example.probe", "--", "/bin/sh", "-c",
      "appbox-secitem add --service s --account a --data d && appbox-secitem get --service s --account a",
    ])
    #expect(roundTrip.out == "d", "\(roundTrip.err)")
  }

  /// While Journal runs (holding its door), Notes' probe tries Journal's processes' descriptor 3
  /// through /proc by their host pids: its own pid namespace has no such processes.
  @Test func anotherRunningAppsBrokerCannotBeReached() throws {
    let device = Device()
    let journalHome = device.home(try device.install("Journal-1.0/Journal.app"))
    try device.installProbe("com.example.probe")
    let journal = try device.startSleepingApp(SecItemApps.journal, home: journalHome)
    defer { journal.stop() }
    var st = stat()
    #expect(stat(journalHome + "/Documents", &st) == 0)
    let journalUID = st.st_uid
    // Journal's processes as the host sees them (their uid is Journal's own).
    let pids = ((try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []).filter { name in
      var status = stat()
      return Int(name) != nil && stat("/proc/" + name, &status) == 0 && status.st_uid == journalUID
    }
    #expect(!pids.isEmpty)
    let result = try appbox(["launch", "com.example.probe", "--", "reach"] + pids, root: device.root)
    let lines = result.out.split(separator: "\n").map(String.init)
    for pid in pids {
      let line = lines.first { $0.hasPrefix("reach \(pid) ") } ?? ""
      #expect(line.hasPrefix("reach \(pid) refused"), "\(line)")
    }
    let visible =
      ProbeReport(try device.probe("com.example.probe", "descriptors")).value("visible-processes") ?? ""
    #expect(!visible.contains(":\(journalUID)"), "\(visible)")
    // And Journal's keychain still works.
    #expect(try device.sh(SecItemApps.journal, "appbox-secitem list").out == "No keychain items.\n")
  }

  /// A secret stored for an app reaches it only as the answer to its own query for the data:
  /// not in its environment, arguments, files, listings or attribute answers.
  @Test func aSecretNeverAppearsInTheAppUnlessItAsksForIt() throws {
    let device = Device()
    let home = device.home(try device.install("Notes-1.0/Notes.app"))
    let secret = "S3CRET-\(UUID().uuidString)"
    let add = try device.run(
      "keychain", SecItemApps.notes, "add", "--service", "svc", "--account", "acct", "--data-file", "-",
      input: Array(secret.utf8))
    #expect(add.status == 0, "\(add.err)")
    let search = """
      for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\\0' '\\n' < "$f"; done
      env
      grep -r -l -F "$(printf '%s' "$needle")" "$HOME" /tmp /run /etc /dev/shm 2>/dev/null
      appbox-secitem list
      appbox-secitem get --service svc --account acct --return attributes --json
      appbox-secitem get --service svc --account acct --return none && echo present
      """
    // The needle is the secret's first half, so it never appears whole in this script.
    let needle = String(secret.prefix(secret.count / 2))
    let unasked = try device.sh(SecItemApps.notes, "needle='\(needle)'; " + search)
    #expect(unasked.status == 0, "\(unasked.err)")
    #expect(!unasked.out.contains(secret) && !unasked.err.contains(secret))
    #expect(unasked.out.contains("present") && unasked.out.contains("\"service\": \"svc\""))
    #expect(!treeContains(home, secret))
    // Asked for, the data arrives (and the same search then finds it where the app put it).
    let asked = try device.sh(
      SecItemApps.notes,
      "appbox-secitem get --service svc --account acct > Documents/asked; needle='\(needle)'; "
        + "grep -r -l -F \"$needle\" \"$HOME\" /tmp 2>/dev/null")
    #expect(asked.out.hasSuffix("/Documents/asked\n"), "\(asked.out) \(asked.err)")
    #expect(contents(home + "/Documents/asked") == Array(secret.utf8))
  }

  /// Whether any regular file below `root` contains `text`.
  private func treeContains(_ root: String, _ text: String) -> Bool {
    let enumerator = FileManager.default.enumerator(atPath: root)
    while let relative = enumerator?.nextObject() as? String {
      if let data = FileManager.default.contents(atPath: root + "/" + relative),
        data.range(of: Data(text.utf8)) != nil
      {
        return true
      }
    }
    return false
  }
}
