import AppboxCore
import AppboxPlist
import AppboxStore
import AppboxTestSupport
import Foundation
import Testing

@testable import AppboxContainer

/// App groups below the command line: the entitlement, the registry's rules, the jail.
/// (End to end, with real jails: AppGroupEndToEndTests.)
struct AppGroupTests {
  static let info = PropertyList.dictionary([
    "CFBundleIdentifier": .string("com.example.notes"), "CFBundleVersion": .string("1.0"),
    "CFBundleExecutable": .string("Notes"),
  ]).xmlData()

  static func entitlements(_ groups: PropertyList?, team: String? = "TEAM1") -> Data {
    var members: [String: PropertyList] = [:]
    if let team { members["com.apple.developer.team-identifier"] = .string(team) }
    if let groups { members["com.apple.security.application-groups"] = groups }
    return PropertyList.dictionary(members).xmlData()
  }

  static func parse(_ entitlements: Data, info: Data = AppGroupTests.info) throws -> BundleInfo {
    try BundleInfo(infoPlist: info, entitlements: entitlements, bundleName: "Notes", bundle: "Notes.app")
  }

  @Test func groupIdentifiersAreGroupDotAReverseDNSName() {
    for good in ["group.com.example.shared", "group.io.x", "group.Com.Example-Co.a1"] {
      #expect(AppGroupIdentifier.isValid(good), "\(good)")
    }
    for bad in [
      "com.example.shared", "group.shared", "group.", "group..com.x", "group.com..x", "group.com.x.",
      "group.com/x", "group.com x", "Group.com.x", "group.com.é",
      "group." + String(repeating: "a.", count: 130),
    ] {
      #expect(!AppGroupIdentifier.isValid(bad), "\(bad)")
    }
  }

  @Test func theEntitlementListsGroupsInOrderWithoutRepeats() throws {
    let info = try Self.parse(
      Self.entitlements(
        .array([.string("group.com.b.x"), .string("group.com.a.x"), .string("group.com.b.x")])))
    #expect(info.entitlements?.applicationGroups == ["group.com.b.x", "group.com.a.x"])
    #expect(try Self.parse(Self.entitlements(nil)).entitlements?.applicationGroups == [])
  }

  @Test func malformedGroupsAreInvalidBundles() throws {
    let cases: [(Data, String)] = [
      (Self.entitlements(.array([.string("com.example.shared")])), "is not 'group.' followed by"),
      (Self.entitlements(.array([.string("group.shared")])), "is not 'group.' followed by"),
      (Self.entitlements(.string("group.com.example.shared")), "is not an array of strings"),
      (Self.entitlements(.array([.integer(1)])), "is not an array of strings"),
      (
        Self.entitlements(.array([.string("group.com.example.shared")]), team: nil),
        "needs com.apple.developer"
      ),
      (
        Self.entitlements(.array((0...16).map { .string("group.com.example.g\($0)") })),
        "more than 16 app groups"
      ),
    ]
    for (entitlements, message) in cases {
      let error = #expect(throws: ContainerError.self) { try Self.parse(entitlements) }
      #expect(error?.code == .invalidBundle)
      #expect(error?.message.contains(message) == true, "\(error?.message ?? "")")
    }
    // A bundle identifier may not look like a group: `group.` names groups on the command line.
    let groupLike = PropertyList.dictionary([
      "CFBundleIdentifier": .string("group.com.example.app"), "CFBundleVersion": .string("1.0"),
      "CFBundleExecutable": .string("Notes"),
    ]).xmlData()
    let error = #expect(throws: ContainerError.self) {
      try Self.parse(Self.entitlements(nil), info: groupLike)
    }
    #expect(error?.message.contains("starts with 'group.'") == true)
  }

  @Test func aGroupLivesWhileAnAppHasAMembershipAndKeepsItsUid() throws {
    let dir = TemporaryDirectory("groups")
    let root = DeviceRoot(path: dir.url("root"))
    try root.createLayout()
    let registry = try Registry(root: root)
    let uid = try registry.groupUID(for: "group.com.example.shared")
    #expect(AppUser.range.contains(uid))
    let group = GroupRecord(
      identifier: "group.com.example.shared", containerID: UUID().uuidString, teamIdentifier: "TEAM1",
      uid: uid)
    try registry.database.inTransaction {
      try registry.insert(group: group)
      try registry.setMembership(of: "com.example.notes", in: group.identifier, active: true)
      try registry.setMembership(of: "com.example.journal", in: group.identifier, active: true)
    }
    #expect(
      try registry.groupIfPresent(group.containerID)?.members == ["com.example.journal", "com.example.notes"])
    // A former member keeps the group but is not a member.
    try registry.setMembership(of: "com.example.journal", in: group.identifier, active: false)
    #expect(try registry.groups(of: "com.example.journal").isEmpty)
    #expect(
      try registry.groups(of: "com.example.journal", includingFormer: true).map(\.identifier) == [
        group.identifier
      ])
    try registry.remove(bundleIdentifier: "com.example.notes")
    #expect(try registry.groupIfPresent(group.identifier)?.formerMembers == ["com.example.journal"])
    try registry.remove(bundleIdentifier: "com.example.journal")
    #expect(try registry.groups().isEmpty)
    // The uid stays the group's, and no app gets it.
    #expect(try registry.groupUID(for: group.identifier) == uid)
    #expect(try registry.uid(for: "com.example.other") != uid)
  }

  @Test func aVersionTwoRegistryGainsTheGroupTablesAndKeepsItsApps() throws {
    let dir = TemporaryDirectory("groups")
    let root = DeviceRoot(path: dir.url("root"))
    try root.createLayout()
    let database = try Database(path: root.registryFile)
    try database.migrate(Array(Registry.migrations[0..<2]))
    try database.execute(
      """
      INSERT INTO apps(bundle_id, container_id, bundle_name, display_name, executable, version, access_groups,
        file_sharing, seal, installed_at, uid) VALUES ('com.example.notes', 'C', 'N', 'N', 'N', '1.0', '', 0, 'x', 0, 1879048200)
      """)
    try database.execute(
      "INSERT INTO history(bundle_id, event, time) VALUES ('com.example.notes', 'install', 0)")
    let registry = try Registry(root: root)
    #expect(try registry.apps().map(\.uid) == [1_879_048_200])
    #expect(try registry.history(of: "com.example.notes").first?.groupSnapshots == [:])
    #expect(try registry.groups().isEmpty)
    try registry.record(
      .init(
        bundleIdentifier: "com.example.notes", event: "update", groupSnapshots: ["group.com.a.b": "1a2b3c4d"])
    )
    #expect(
      try registry.history(of: "com.example.notes").first?.groupSnapshots == ["group.com.a.b": "1a2b3c4d"])
  }

  @Test func appsInstalledBeforeGroupsJoinTheirGroupsAtTheNextCommand() throws {
    let device = try TestDevice()
    let session = try device.session(mutating: true)
    let group = try #require(try session.registry.groupIfPresent("group.com.example.shared"))
    let container = device.root.groupContainer(group.containerID)
    // As on a device whose registry migration 3 just ran: no group yet, the app listed.
    try FileTree.remove(atPath: container)
    try session.registry.database.execute("DELETE FROM group_members")
    try session.registry.database.execute("DELETE FROM app_groups")
    try session.registry.database.execute(
      "INSERT INTO group_adoption(bundle_id) VALUES ('com.example.notes')")
    // The next command, even one that changes nothing, gives Notes its group.
    let next = try device.session()
    let adopted = try #require(try next.registry.groupIfPresent("group.com.example.shared"))
    #expect(adopted.members == ["com.example.notes"] && adopted.teamIdentifier == "ABCDE12345")
    var status = stat()
    #expect(lstat(device.root.groupContainer(adopted.containerID) + "/Library/Preferences", &status) == 0)
    #expect(try next.registry.appsAwaitingGroups().isEmpty)
    #expect(!next.isLocked && !next.isLocked("com.example.notes"))
  }

  @Test func aSharedDirectoryIsStagedIdmappedOnlyAsRoot() throws {
    let device = try TestDevice()
    var jail = Jail(home: device.home)
    jail.addDataDirectory("/srv/group", at: "/var/mobile/Containers/Shared/AppGroup/G", owner: 1_879_048_999)
    func command(privileged: Bool) -> [String] {
      jail.commandLine(
        helper: "/h", bubblewrap: "/usr/bin/bwrap", command: ["x"], options: SandboxOptions(),
        keptDescriptors: [],
        descriptors: .init(status: 3, passwd: 4, group: 5), cgroup: nil, landlock: true,
        privileged: privileged)
    }
    #expect(command(privileged: true).contains("shared=1879048999:/srv/group"))
    // Unprivileged, every app's files are the caller's already: a plain read-write stage.
    #expect(command(privileged: false).contains("rw:/srv/group"))
    // Either way bubblewrap binds it read-write and Landlock allows it read-write.
    for line in [command(privileged: true), command(privileged: false)] {
      let bind = try #require(line.firstIndex(of: "/var/mobile/Containers/Shared/AppGroup/G"))
      #expect(line[bind - 2] == "--bind")
      let rule = try #require(line.lastIndex(of: "/var/mobile/Containers/Shared/AppGroup/G"))
      #expect(line[rule - 1] == "--rw")
    }
  }
}
