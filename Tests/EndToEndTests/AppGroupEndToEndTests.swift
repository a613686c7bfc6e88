import AppboxCore
import AppboxPlist
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// App group containers end to end: real jails (as root, and as `nobody`), real archives
/// read by GNU tar, bytes and owners on disk. Notes and Journal (team ABCDE12345) list
/// group.com.example.shared; Other (team ZZZZZ99999) does not.
struct AppGroupEndToEndTests {
  /// A device with Notes and Journal; their group's container.
  func sharingDevice() throws -> (device: Device, notes: String, journal: String, container: String) {
    let device = Device()
    let notes = try device.install("Notes-1.0/Notes.app")
    let journal = try device.install("Journal-1.0/Journal.app")
    return (device, notes, journal, try device.groupContainer())
  }

  @Test func twoAppsOfOneTeamShareTheirGroupFromInsideTheSandbox() throws {
    let (device, notesID, journalID, container) = try sharingDevice()
    #expect(container.hasPrefix(device.root + "/Shared/AppGroup/"))
    #expect(try device.groupContainer("com.example.journal") == container)
    let containerID = String(container.split(separator: "/").last ?? "")
    #expect(UUID(uuidString: containerID) != nil && containerID == containerID.uppercased())
    #expect(permissions(container) == 0o700)
    for directory in ["Library", "Library/Preferences", "Library/Caches"] {
      var isDirectory: ObjCBool = false
      #expect(FileManager.default.fileExists(atPath: container + "/" + directory, isDirectory: &isDirectory))
      #expect(isDirectory.boolValue, "\(directory)")
    }
    let metadata = try PropertyList.decode(
      try Data(
        contentsOf: URL(fileURLWithPath: container + "/.com.apple.mobile_container_manager.metadata.plist")))
    #expect(metadata["MCMMetadataIdentifier"]?.string == sharedGroup)
    #expect(metadata["MCMMetadataUUID"]?.string == containerID)
    #expect(metadata["MCMMetadataContentClass"]?.integer == 7)

    // Notes writes a file, and a private folder with a private file (umask 077, chmod 600)…
    let notes = try device.sh(
      "com.example.notes",
      inGroup(
        "echo from-notes > \"$G/note.txt\" && umask 077 && mkdir \"$G/Library/db\" && "
          + "echo secret > \"$G/Library/db/private\" && chmod 600 \"$G/Library/db/private\""))
    #expect(notes.status == 0, "\(notes.err)")
    // …which Journal, another uid, reads, appends to, adds to and removes from, in its own jail,
    // seeing each file as its own.
    let journal = try device.sh(
      "com.example.journal",
      inGroup(
        "cat \"$G/note.txt\" \"$G/Library/db/private\" && echo from-journal >> \"$G/Library/db/private\" && "
          + "echo j > \"$G/Library/db/journal.txt\" && rm \"$G/note.txt\" && "
          + "[ \"$(stat -c %u \"$G/Library/db/private\")\" = \"$(id -u)\" ] && echo own"))
    #expect(journal.status == 0, "\(journal.err)")
    #expect(journal.out == "from-notes\nsecret\nown\n")
    let back = try device.sh(
      "com.example.notes", inGroup("cat \"$G/Library/db/private\" \"$G/Library/db/journal.txt\""))
    #expect(back.status == 0 && back.out == "secret\nfrom-journal\nj\n", "\(back.err)")
    #expect(contents(container + "/Library/db/private") == Array("secret\nfrom-journal\n".utf8))
    #expect(!exists(container + "/note.txt"))
    if getuid() == 0 {
      // On disk everything belongs to the group's own uid, neither app's.
      let group = try #require(owner(container))
      #expect(Set(owners(below: container).values) == [group])
      #expect(group != owner(device.home(notesID) + "/Documents"))
      #expect(group != owner(device.home(journalID) + "/Documents"))
    }

    // list --groups and inspect show it.
    let listed = try #require(try device.groups()[sharedGroup])
    #expect(listed["containerID"] as? String == containerID && listed["path"] as? String == container)
    #expect(listed["teamIdentifier"] as? String == "ABCDE12345")
    #expect(listed["members"] as? [String] == ["com.example.journal", "com.example.notes"])
    let text = try device.run("list", "--groups")
    #expect(text.status == 0 && text.out.contains("com.example.journal, com.example.notes"))
    let inspect = try #require(try device.json("inspect", "com.example.notes") as? [String: Any])
    let usage = try #require((inspect["groups"] as? [[String: Any]])?.first)
    #expect(usage["group"] as? String == sharedGroup && usage["path"] as? String == container)
    #expect(usage["files"] as? Int == 3)  // the metadata plist, private, journal.txt
    #expect((usage["bytes"] as? Int ?? 0) > 20)
    #expect(try device.run("inspect", "com.example.journal").out.contains("app groups    " + sharedGroup))
  }

  @Test(.enabled(if: canRunAsNobody)) func unprivilegedEveryAppSharesTheCallersFiles() throws {
    let device = Device()
    #expect(try device.run("device", "init").status == 0)
    try device.giveToNobody()
    for fixture in ["Notes-1.0/Notes.app", "Journal-1.0/Journal.app"] {
      let result = try device.runAsNobody("install", fixturePath("bundles/" + fixture))
      #expect(result.status == 0, "\(result.err)")
    }
    let write = try device.shAsNobody(
      "com.example.notes", inGroup("umask 077 && echo private > \"$G/p.txt\" && id -u"))
    #expect(write.status == 0, "\(write.err)")
    let read = try device.shAsNobody(
      "com.example.journal", inGroup("cat \"$G/p.txt\" && echo more >> \"$G/p.txt\" && id -u"))
    #expect(read.status == 0, "\(read.err)")
    let lines = read.out.split(separator: "\n")
    #expect(lines.first == "private")
    #expect(lines.last != write.out.split(separator: "\n").last)  // two apps, two uids
    let container = try #require(
      device.appGroupEntries().first.map { device.root + "/Shared/AppGroup/" + $0 })
    #expect(contents(container + "/p.txt") == Array("private\nmore\n".utf8))
    #expect(Set(owners(below: container).values) == [65534])
  }

  @Test func nonMembersSeeNothingOfTheGroup() throws {
    let (device, _, _, container) = try sharingDevice()
    try device.install("Other-1.0/Other.app")  // another team
    // The same team, no member.
    try device.install(path: try device.makeBundle(identifier: "com.example.lite", groupsXML: nil))
    let marker = try device.sh("com.example.notes", inGroup("echo mine > \"$G/marker\""))
    #expect(marker.status == 0, "\(marker.err)")
    let before = treeSnapshot(container)
    for app in ["org.other.app", "com.example.lite"] {
      let probe = try device.sh(
        app,
        "echo \"[$APPBOX_APP_GROUP_CONTAINERS]\"; ls /var/mobile/Containers/Shared/AppGroup; "
          + "cat '\(container)/marker'; echo planted > '\(container)/planted'")
      #expect(probe.out == "[]\n", "\(app): \(probe.out)")
      #expect(probe.status != 0)
      #expect(!probe.err.contains("mine") && probe.err.contains("No such file"), "\(app): \(probe.err)")
      for arguments in [
        ["path", app, sharedGroup], ["defaults", app, "read", "--suite", sharedGroup],
        ["defaults", app, "write", "k", "v", "--suite", sharedGroup],
      ] {
        let refused = try appbox(arguments, root: device.root)
        #expect(refused.status == 77, "\(arguments): \(refused.err)")
        #expect(
          refused.err
            == "Error: \(app) is not a member of the app group '\(sharedGroup)' (its entitlements do "
            + "not list it in com.apple.security.application-groups)\n")
      }
    }
    #expect(treeSnapshot(container) == before)
    #expect(!exists(container + "/planted"))
  }

  @Test func anAppOfAnotherTeamCannotJoinTheGroup() throws {
    let (device, _, _, container) = try sharingDevice()
    let intruder = try device.makeBundle(
      identifier: "org.other.intruder", team: "ZZZZZ99999", groupsXML: groupsXML(sharedGroup))
    let refused = try device.run("install", intruder)
    #expect(refused.status == 77)
    #expect(
      refused.err
        == "Error: Cannot give org.other.intruder the app group '\(sharedGroup)': on this device it "
        + "belongs to team ABCDE12345, and org.other.intruder is of team ZZZZZ99999\n")
    #expect(device.applicationRootEntries().count == 2)
    #expect(device.appGroupEntries() == [String(container.split(separator: "/").last!)])
    #expect(
      try device.groups()[sharedGroup]?["members"] as? [String] == [
        "com.example.journal", "com.example.notes",
      ])

    // The group belongs to the team that brought it: where the other team came first, Notes
    // is the one refused.
    let other = Device()
    try other.install(path: intruder)
    #expect(try other.groups()[sharedGroup]?["teamIdentifier"] as? String == "ZZZZZ99999")
    #expect(try other.run("install", fixturePath("bundles/Notes-1.0/Notes.app")).status == 77)
    #expect(other.applicationRootEntries().count == 1)
  }

  @Test func malformedGroupEntitlementsAreRefusedWith65() throws {
    let device = Device()
    for xml in [
      groupsXML("com.example.shared"), groupsXML("group.shared"), groupsXML("group.com..x"),
      "<string>\(sharedGroup)</string>", "<array><integer>1</integer></array>",
    ] {
      let bundle = try device.makeBundle(identifier: "com.example.bad", groupsXML: xml)
      let result = try device.run("install", bundle)
      #expect(result.status == 65, "\(xml): \(result.err)")
      #expect(
        result.err.hasPrefix("Error: Invalid bundle 'Notes.app': ")
          && result.err.split(separator: "\n").count == 1)
    }
    let groupLike = try device.makeBundle(identifier: "group.com.example.app", groupsXML: nil)
    let result = try device.run("install", groupLike)
    #expect(result.status == 65 && result.err.contains("starts with 'group.'"), "\(result.err)")
    #expect(device.applicationRootEntries().isEmpty && device.appGroupEntries().isEmpty)
  }

  @Test func theGroupStaysUntilItsLastMemberIsUninstalled() throws {
    let (device, _, _, container) = try sharingDevice()
    try device.install("Other-1.0/Other.app")
    #expect(try device.sh("com.example.journal", inGroup("echo kept > \"$G/kept.txt\"")).status == 0)
    #expect(try device.run("uninstall", "com.example.journal").status == 0)
    #expect(contents(container + "/kept.txt") == Array("kept\n".utf8))
    #expect(try device.groups()[sharedGroup]?["members"] as? [String] == ["com.example.notes"])
    // A reinstalled member finds the same container.
    try device.install("Journal-1.0/Journal.app")
    #expect(try device.groupContainer("com.example.journal") == container)
    #expect(try device.run("uninstall", "com.example.notes").status == 0)
    #expect(contents(container + "/kept.txt") == Array("kept\n".utf8))
    #expect(try device.run("uninstall", "com.example.journal").status == 0)
    #expect(!exists(container) && device.appGroupEntries().isEmpty)
    #expect(try device.groups().isEmpty)
    #expect(try device.run("list", "--groups").out == "No app groups.\n")
    // A later member gets a new, empty container.
    try device.install("Notes-1.0/Notes.app")
    let again = try device.groupContainer()
    #expect(again != container && !exists(again + "/kept.txt") && exists(again + "/Library/Preferences"))
  }

  @Test func aGroupIsASnapshotSubjectOfItsOwn() throws {
    let (device, _, journalID, container) = try sharingDevice()
    try device.install("Other-1.0/Other.app")
    let write = try device.sh(
      "com.example.notes",
      inGroup(
        "echo v1 > \"$G/shared.txt\" && mkdir \"$G/tmp\" && echo t > \"$G/tmp/kept\" && "
          + "echo cache > \"$G/Library/Caches/cache.bin\""))
    #expect(write.status == 0, "\(write.err)")
    #expect(
      try device.run("defaults", "com.example.notes", "write", "k", "v", "--suite", sharedGroup).status == 0)

    // backup --all backs up every app, then every group, and reports each.
    let all = try #require(try device.json("backup", "--all") as? [[String: Any]])
    #expect(
      all.map { $0["app"] as? String } == [
        "com.example.journal", "com.example.notes", "org.other.app", sharedGroup,
      ])
    let entry = all[3]
    #expect(entry["kind"] as? String == "full")
    let snapshot = try #require(entry["snapshot"] as? String)
    // Its archive holds the container's data relative to the container, all but Library/Caches
    // (a top-level tmp is data here); GNU tar reads it.
    let listing = try runProcess("/bin/tar", ["-tf", try #require(entry["archive"] as? String)])
    #expect(listing.status == 0, "\(listing.err)")
    let members = Set(listing.out.split(separator: "\n").map(String.init))
    #expect(members.contains("shared.txt") && members.contains("tmp/kept"))
    #expect(members.contains("Library/Preferences/\(sharedGroup).plist"))
    #expect(!members.contains { $0.hasPrefix("Library/Caches/") })
    let snapshots = try #require(try device.json("snapshots", sharedGroup) as? [[String: Any]])
    #expect(snapshots.map { $0["snapshot"] as? String } == [snapshot])
    #expect(snapshots.first?["app"] as? String == sharedGroup)

    // Changes, then a restore brings the snapshot back exactly, Library/Caches empty.
    try FileManager.default.removeItem(atPath: container + "/shared.txt")
    try Data("new".utf8).write(to: URL(fileURLWithPath: container + "/later.txt"))
    let again = try #require(try device.json("backup", sharedGroup) as? [[String: Any]])
    #expect(again.first?["kind"] as? String == "incremental")
    let restore = try device.run("--json", "restore", sharedGroup, "--snapshot", snapshot)
    #expect(restore.status == 0, "\(restore.err)")
    #expect(contents(container + "/shared.txt") == Array("v1\n".utf8))
    #expect(contents(container + "/tmp/kept") == Array("t\n".utf8))
    #expect(!exists(container + "/later.txt"))
    #expect(try FileManager.default.contentsOfDirectory(atPath: container + "/Library/Caches").isEmpty)
    #expect(try device.groupContainer() == container)  // same container id
    #expect(
      try device.run("defaults", "com.example.journal", "read", "k", "--suite", sharedGroup).out == "v\n")
    if getuid() == 0 { #expect(Set(owners(below: container).values) == [owner(container)!]) }
    // The repository's other commands take a group's snapshots like an app's.
    let check = try device.run("check", "--rebuild-catalog", "--read-data")
    #expect(check.status == 0, "\(check.err)")
    #expect((try device.json("snapshots", sharedGroup) as? [Any])?.count == 2)
    #expect(try device.run("forget", sharedGroup, "--keep-last", "1").status == 0)
    #expect(
      (try device.json("snapshots", sharedGroup) as? [[String: Any]])?.first?["kind"] as? String
        == "incremental")

    // A running member: the container is in its jail; busy.
    let running = try device.startSleepingApp("com.example.journal", home: device.home(journalID))
    let busy = try device.run("restore", sharedGroup)
    running.stop()
    #expect(busy.status == 75 && busy.err.contains("com.example.journal is running"), "\(busy.err)")
    #expect(!exists(container + "/later.txt"))
    // No such group here.
    for command in ["backup", "restore"] {
      let missing = try device.run(command, "group.com.example.none")
      #expect(
        missing.status == 66 && missing.err.contains("No app group 'group.com.example.none'"),
        "\(missing.err)")
    }
  }

  @Test func restoringAMemberOntoADeviceWithoutTheGroupBringsTheGroupBack() throws {
    let (first, _, _, container) = try sharingDevice()
    try Data("v1".utf8).write(to: URL(fileURLWithPath: container + "/shared.txt"))
    #expect(try first.run("backup", "--all").status == 0)
    let repository = first.root + "/Backups"

    let second = Device()
    #expect(try second.run("device", "init").status == 0)
    let result = try #require(
      try second.json("restore", "com.example.notes", "--snapshot", "latest", "--repo", repository)
        as? [String: Any])
    #expect(result["installedBundle"] as? Bool == true)
    let groups = try #require(result["groups"] as? [[String: Any]])
    #expect(groups.map { $0["group"] as? String } == [sharedGroup])
    let restored = try second.groupContainer()
    #expect(!restored.isEmpty && restored != container)
    #expect(contents(restored + "/shared.txt") == Array("v1".utf8))
    // Once the group is there, restoring another member leaves its data alone.
    try Data("live".utf8).write(to: URL(fileURLWithPath: restored + "/shared.txt"))
    let journal = try #require(
      try second.json("restore", "com.example.journal", "--snapshot", "latest", "--repo", repository)
        as? [String: Any])
    #expect((journal["groups"] as? [Any])?.isEmpty == true)
    #expect(contents(restored + "/shared.txt") == Array("live".utf8))
    #expect(try second.groupContainer("com.example.journal") == restored)
  }

  @Test func sharedDefaultsGoThroughSuite() throws {
    let (device, _, _, container) = try sharingDevice()
    try device.install("Other-1.0/Other.app")
    let write = try device.run(
      "defaults", "com.example.notes", "write", "count", "3", "--type", "int", "--suite", sharedGroup)
    #expect(write.status == 0, "\(write.err)")
    #expect(write.out == "Set count = 3 in Library/Preferences/\(sharedGroup).plist\n")
    #expect(
      try device.run("defaults", "com.example.journal", "read", "count", "--suite", sharedGroup).out == "3\n")
    let all = try #require(
      try device.json("defaults", "com.example.journal", "read", "--suite", sharedGroup) as? [String: Any])
    #expect(all["count"] as? Int == 3 && all.count == 1)
    // Not the apps' own preferences.
    #expect(try device.run("defaults", "com.example.notes", "read", "count").status == 66)
    // A binary property list in the group's container, the group's, which the apps read in their jails.
    let file = container + "/Library/Preferences/\(sharedGroup).plist"
    #expect(contents(file).map { Array($0.prefix(8)) } == Array("bplist00".utf8))
    if getuid() == 0 { #expect(owner(file) == owner(container)) }
    let seen = try device.sh(
      "com.example.journal", inGroup("head -c 8 \"$G/Library/Preferences/\(sharedGroup).plist\""))
    #expect(seen.status == 0 && seen.out == "bplist00", "\(seen.err)")
    #expect(
      try device.run("defaults", "com.example.journal", "delete", "count", "--suite", sharedGroup).status == 0
    )
    let gone = try device.run("defaults", "com.example.notes", "read", "count", "--suite", sharedGroup)
    #expect(gone.status == 66 && gone.err.contains("of the app group \(sharedGroup)"), "\(gone.err)")
    let malformed = try device.run("defaults", "com.example.notes", "read", "--suite", "com.example.shared")
    #expect(malformed.status == 64)
  }

  @Test func updatesKeepTheGroupAndRevertRollsItBackOnlyWithGroups() throws {
    let (device, _, journalID, container) = try sharingDevice()
    func state() -> String { String(decoding: contents(container + "/state.txt") ?? [], as: UTF8.self) }
    func setState(_ text: String) throws {
      try Data(text.utf8).write(to: URL(fileURLWithPath: container + "/state.txt"))
    }
    func update() throws -> [String: Any] {
      try #require(
        try device.json("update", "com.example.notes", fixturePath("bundles/Notes-2.0/Notes.app"))
          as? [String: Any])
    }
    try setState("v1")
    let first = try update()
    #expect(first["groups"] as? [String] == [sharedGroup])
    let v1 = try #require(groupSnapshots(first["preUpdateGroupSnapshots"])[sharedGroup])
    #expect(try device.groupContainer() == container && state() == "v1")
    #expect(
      try device.groups()[sharedGroup]?["members"] as? [String] == [
        "com.example.journal", "com.example.notes",
      ])
    let tagged = try device.run("snapshots", sharedGroup)
    #expect(tagged.out.contains(v1) && tagged.out.contains("pre-update"))

    // revert alone keeps the group's data.
    try setState("v2")
    let plain = try #require(try device.json("revert", "com.example.notes") as? [String: Any])
    #expect(groupSnapshots(plain["restoredGroups"]).isEmpty && plain["restoredGroups"] is [Any])
    #expect(try state() == "v2" && device.groupContainer() == container)

    // revert --with-groups restores the snapshot the update took, after saving the newer data;
    // a running member refuses it before anything changes.
    let second = try update()
    let v2 = try #require(groupSnapshots(second["preUpdateGroupSnapshots"])[sharedGroup])
    try setState("v3")
    let running = try device.startSleepingApp("com.example.journal", home: device.home(journalID))
    let busy = try device.run("revert", "com.example.notes", "--with-groups")
    running.stop()
    #expect(busy.status == 75, "\(busy.err)")
    #expect(try device.run("--json", "list").out.contains("\"2.0\"") && state() == "v3")
    let reverted = try #require(
      try device.json("revert", "com.example.notes", "--with-groups") as? [String: Any])
    #expect(groupSnapshots(reverted["restoredGroups"]) == [sharedGroup: v2])
    let saved = try #require(groupSnapshots(reverted["preRevertGroupSnapshots"])[sharedGroup])
    #expect(try state() == "v2" && device.groupContainer() == container)
    #expect(try device.run("restore", sharedGroup, "--snapshot", saved).status == 0)
    #expect(state() == "v3")
  }

  @Test func anUpdateThatDropsTheGroupKeepsItForTheFormerMember() throws {
    let (device, _, _, container) = try sharingDevice()
    try Data("data".utf8).write(to: URL(fileURLWithPath: container + "/data.txt"))
    let without = try device.makeBundle(identifier: "com.example.notes", version: "3.0", groupsXML: nil)
    let update = try #require(try device.json("update", "com.example.notes", without) as? [String: Any])
    #expect(update["groups"] as? [String] == [])
    #expect(try device.run("path", "com.example.notes", sharedGroup).status == 77)
    #expect(try device.sh("com.example.notes", "echo \"[$APPBOX_APP_GROUP_CONTAINERS]\"").out == "[]\n")
    var group = try #require(try device.groups()[sharedGroup])
    #expect(group["members"] as? [String] == ["com.example.journal"])
    #expect(group["formerMembers"] as? [String] == ["com.example.notes"])
    // Its last member gone, the group stays while its former member is installed.
    #expect(try device.run("uninstall", "com.example.journal").status == 0)
    group = try #require(try device.groups()[sharedGroup])
    #expect((group["members"] as? [String])?.isEmpty == true)
    #expect(contents(container + "/data.txt") == Array("data".utf8))
    // Listing it again makes it a member again, of the same container.
    let with = try device.makeBundle(
      identifier: "com.example.notes", version: "4.0", groupsXML: groupsXML(sharedGroup))
    #expect(try device.run("update", "com.example.notes", with).status == 0)
    #expect(try device.groupContainer() == container)
    #expect(try device.run("uninstall", "com.example.notes").status == 0)
    #expect(!exists(container) && device.appGroupEntries().isEmpty)
  }

  @Test func membersOfOneGroupTakeTurnsOnItsLock() throws {
    let device = Device()
    #expect(try device.run("device", "init").status == 0)
    // Notes' install stops holding the group's lock, its container staged.
    let notes = try device.startPausing(
      at: "groups.staged", "install", fixturePath("bundles/Notes-1.0/Notes.app"))
    #expect(notes.waitUntilPaused())
    let journal = fixturePath("bundles/Journal-1.0/Journal.app")
    let busy = try device.run("install", journal)
    #expect(busy.status == 75)
    #expect(busy.err.hasPrefix("Error: App group \(sharedGroup) is busy"), "\(busy.err)")
    // With --wait, Journal waits for Notes and then joins the group Notes created.
    let waiting = try device.start("--wait", "30", "install", journal)
    let finished = notes.finish()
    #expect(finished.status == 0, "\(finished.err)")
    waiting.waitUntilExit()
    #expect(waiting.terminationStatus == 0)
    let groups = try device.groups()
    #expect(groups.count == 1 && device.appGroupEntries().count == 1)
    #expect(groups[sharedGroup]?["members"] as? [String] == ["com.example.journal", "com.example.notes"])
  }

  @Test func killedGroupWorkIsFinishedByTheNextCommand() throws {
    let device = Device()
    #expect(try device.run("device", "init").status == 0)
    let notes = fixturePath("bundles/Notes-1.0/Notes.app")
    // Killed once the container is staged, before the commit: nothing stays.
    var killed = try device.run("install", notes, environment: ["APPBOX_CRASH_AT": "groups.staged"])
    #expect(killed.status == 128 + SIGKILL)
    #expect(device.appGroupEntries().first?.hasPrefix(".staging-") == true)
    try device.run("device", "init")
    #expect(device.appGroupEntries().isEmpty && device.applicationRootEntries().isEmpty)
    #expect(try device.groups().isEmpty)
    // Killed after the commit: the container is put in place.
    killed = try device.run("install", notes, environment: ["APPBOX_CRASH_AT": "install.committed"])
    #expect(killed.status == 128 + SIGKILL)
    try device.run("device", "init")
    let id = try #require(try device.groups()[sharedGroup]?["containerID"] as? String)
    #expect(device.appGroupEntries() == [id])
    #expect(try device.sh("com.example.notes", inGroup("echo ok > \"$G/ok\"")).status == 0)
    // Killed while uninstalling the last member: the group goes with it.
    killed = try device.run(
      "uninstall", "com.example.notes", environment: ["APPBOX_CRASH_AT": "uninstall.trashed"])
    #expect(killed.status == 128 + SIGKILL)
    #expect(device.appGroupEntries() == [".trash-" + id])
    try device.run("device", "init")
    #expect(try device.appGroupEntries().isEmpty && device.groups().isEmpty)
  }
}
