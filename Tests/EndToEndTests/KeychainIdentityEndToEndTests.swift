import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// The keychain's identities cannot be forged: an app without a team cannot pass for a team's
/// app or shared group, from the host CLI or through its broker (issue 24, item 1).
struct KeychainIdentityEndToEndTests {
  static let impostor = "ABCDE12345.com.example.notes"
  static let sharedImpostor = "ABCDE12345.shared"

  /// A copy of Vault (no team) whose bundle identifier is `identifier`.
  static func teamlessBundle(_ identifier: String, in device: Device) throws -> String {
    let bundle = device.dir.url("bundle-\(UUID().uuidString)/Vault.app")
    try FileManager.default.createDirectory(
      atPath: splitPath(bundle).directory, withIntermediateDirectories: true)
    try copyTree(fixturePath("bundles/Vault-1.0/Vault.app"), to: bundle)
    let info = try String(contentsOfFile: bundle + "/Info.plist", encoding: .utf8)
      .replacingOccurrences(of: "<string>com.example.vault</string>", with: "<string>\(identifier)</string>")
    try info.write(toFile: bundle + "/Info.plist", atomically: false, encoding: .utf8)
    return bundle
  }

  /// A device made by an appbox from before access-group namespaces, with both impostors
  /// installed (Fixtures/devices/README.md).
  static func legacyDevice() throws -> Device {
    let device = Device()
    let root = try extractFixtureDevice("keychain-v2", into: device.dir)
    #expect(rename(root, device.root) == 0)
    return device
  }

  @Test func bundleIdentifiersThatReadAsATeamsAreRefusedAtInstall() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    for identifier in [Self.impostor, Self.sharedImpostor] {
      let result = try device.run("install", try Self.teamlessBundle(identifier, in: device))
      #expect(result.status == 65, "\(identifier): \(result.out) \(result.err)")
      #expect(
        result.err.contains("'\(identifier)'") && result.err.contains("team identifier"), "\(result.err)")
      #expect(result.err.split(separator: "\n").count == 1)
    }
    // A team whose identifier has another shape: its first label is refused while the team is here.
    let odd = try device.makeBundle(identifier: "com.example.odd", team: "TEAM1", groupsXML: nil)
    try device.install(path: odd)
    let lookalike = try device.run("install", try Self.teamlessBundle("TEAM1.com.example.odd", in: device))
    #expect(lookalike.status == 65 && lookalike.err.contains("com.example.odd"), "\(lookalike.err)")
    let listed = (try device.json("list") as? [[String: Any]] ?? []).compactMap {
      $0["app"] as? String
    }
    #expect(listed.sorted() == ["com.example.notes", "com.example.odd"])
  }

  /// The impostors installed before the fix, from the host CLI and through their brokers.
  @Test func installedImpostorsReachNothingOfTheTeamAfterTheMigration() throws {
    let device = try Self.legacyDevice()
    // Host CLI: nothing listed, nothing found, the team's groups not theirs to name.
    for (impostor, group, service) in [
      (Self.impostor, Self.impostor, "notes-private"), (Self.sharedImpostor, Self.sharedImpostor, "team"),
    ] {
      let list = try device.run("--json", "keychain", impostor, "list")
      #expect(
        list.status == 0 && list.out.trimmingCharacters(in: .whitespacesAndNewlines) == "[]", "\(list.out)")
      let get = try device.run("keychain", impostor, "get", "--service", service, "--account", "a")
      #expect(get.status == 66 && get.out.isEmpty, "\(get.out) \(get.err)")
      let named = try device.run(
        "keychain", impostor, "get", "--service", service, "--account", "a", "--group", group)
      #expect(named.status == 77 && named.out.isEmpty, "\(named.out) \(named.err)")
      let add = try device.run(
        "keychain", impostor, "add", "--service", "planted2", "--account", "a", "--data", "x", "--group",
        group)
      #expect(add.status == 77, "\(add.err)")
    }
    // Inside the jail, through the broker.
    let script = """
      appbox-secitem list; echo "list $?"
      appbox-secitem get --service notes-private --account a; echo "get $?"
      appbox-secitem get --service notes-private --account a --group \(Self.impostor); echo "private $?"
      appbox-secitem get --service team --account a --group \(Self.sharedImpostor); echo "shared $?"
      appbox-secitem add --service own --account a --data mine; echo "add $?"
      appbox-secitem list --json
      """
    let jailed = try device.sh(Self.impostor, script)
    #expect(jailed.status == 0, "\(jailed.err)")
    for line in ["list 0", "get 66", "private 77", "shared 77", "add 0"] {
      #expect(jailed.out.contains(line + "\n"), "\(line): \(jailed.out) \(jailed.err)")
    }
    #expect(!jailed.out.contains("notes-secret") && !jailed.out.contains("team-secret"))
    #expect(jailed.out.contains("\"noteam:\(Self.impostor)\""), "\(jailed.out)")
    let sharedJailed = try device.sh(
      Self.sharedImpostor,
      "appbox-secitem get --service team --account a; echo \"get $?\"; "
        + "appbox-secitem get --service team --account a --group \(Self.sharedImpostor); echo \"named $?\"")
    #expect(
      sharedJailed.out.contains("get 66\n") && sharedJailed.out.contains("named 77\n"), "\(sharedJailed.out)")
    #expect(!sharedJailed.out.contains("team-secret"))

    // The team still has its items; the teamless Vault keeps its own, now in its namespace.
    let notes = try device.run("keychain", "com.example.notes", "get", "--service", "team", "--account", "a")
    #expect(notes.out == "team-secret", "\(notes.err)")
    let vault = try #require(try device.json("keychain", "com.example.vault", "list") as? [[String: Any]])
    #expect(vault.map { $0["accessGroup"] as? String } == ["noteam:com.example.vault"])
    #expect(vault.map { $0["label"] as? String } == ["vault label"])
    let secret = try device.run(
      "keychain", "com.example.vault", "get", "--service", "vault", "--account", "a")
    #expect(secret.out == "vault-secret", "\(secret.err)")
    let inJail = try device.sh("com.example.vault", "appbox-secitem get --service vault --account a")
    #expect(inJail.out == "vault-secret", "\(inJail.err)")
  }

  /// Snapshots taken before the fix: Vault's items come back into its own group; an impostor's
  /// (which hold what it could see then: Notes' items) bring it nothing and take nothing from Notes.
  @Test func oldSnapshotsRestoreOnlyWhatIsTheAppsOwn() throws {
    let device = try Self.legacyDevice()
    #expect(try device.run("keychain", "com.example.vault", "reset").status == 0)
    let restored = try device.run("restore", "com.example.vault")
    #expect(restored.status == 0, "\(restored.err)")
    let secret = try device.run(
      "keychain", "com.example.vault", "get", "--service", "vault", "--account", "a")
    #expect(secret.out == "vault-secret", "\(secret.err)")
    for impostor in [Self.impostor, Self.sharedImpostor] {
      let result = try device.run("restore", impostor)
      #expect(result.status == 0, "\(result.err)")
      let list = try device.run("--json", "keychain", impostor, "list")
      #expect(list.out.trimmingCharacters(in: .whitespacesAndNewlines) == "[]", "\(impostor): \(list.out)")
    }
    let notes = try #require(try device.json("keychain", "com.example.notes", "list") as? [[String: Any]])
    #expect(
      notes.compactMap { $0["service"] as? String }.sorted() == ["notes-private", "planted", "team"],
      "\(notes)")
  }

  /// Each app's keychain is bounded: through the broker and the host CLI, 1 MiB items stop at
  /// the 16 MiB quota with 73, and `inspect` shows the use.
  @Test func theKeychainQuotaStopsAFloodWith73() throws {
    let device = Device()
    try device.install("Vault-1.0/Vault.app")
    let flood = try device.sh(
      "com.example.vault",
      """
      i=0
      while [ $i -lt 20 ]; do
        head -c 1048576 /dev/zero | appbox-secitem add --service big$i --account a --data-file -
        s=$?
        if [ $s -ne 0 ]; then echo "stopped at $i with $s"; break; fi
        i=$((i + 1))
      done
      """)
    #expect(flood.out == "stopped at 15 with 73\n", "\(flood.out) \(flood.err)")
    let file = device.dir.url("big")
    try Data(count: 1 << 20).write(to: URL(fileURLWithPath: file))
    let host = try device.run(
      "keychain", "com.example.vault", "add", "--service", "host", "--account", "a", "--data-file", file)
    #expect(host.status == 73 && host.err.contains("16777216 bytes"), "\(host.err)")
    let small = try device.run(
      "keychain", "com.example.vault", "add", "--service", "small", "--account", "a", "--data", "x")
    #expect(small.status == 0, "\(small.err)")
    let inspect = try #require(try device.json("inspect", "com.example.vault") as? [String: Any])
    let usage = try #require(inspect["keychainUsage"] as? [String: Any])
    #expect(usage["items"] as? Int == 16 && usage["maximumItems"] as? Int == 1000)
    #expect((usage["bytes"] as? Int ?? 0) > 15 << 20 && usage["maximumBytes"] as? Int == 16 << 20)
    let text = try device.run("inspect", "com.example.vault")
    #expect(text.out.contains("keychain use  16 of 1000 items"), "\(text.out)")
  }
}
