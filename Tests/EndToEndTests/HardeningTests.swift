import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// What an app plants cannot break appbox (issue 11): each test sets the trap the way a
/// confined app would (`appbox run APP -- sh -c ...`), then runs the command a user would.
struct PlantedPreferencesTests {
  /// `Library/Preferences -> ../Notes.app` stays inside the home, so following links
  /// "beneath the home" would write into the sealed bundle. No link is followed at all,
  /// before and after an update (which moves Library, link included, to the new home).
  @Test func aPreferencesLinkIntoTheBundleIsRefusedBeforeAndAfterAnUpdate() throws {
    let device = Device()
    var home = device.home(try device.install("Notes-1.0/Notes.app"))
    let planted = try device.sh(
      "com.example.notes", "rm -rf Library/Preferences && ln -s ../Notes.app Library/Preferences")
    #expect(planted.status == 0, "\(planted.err)")
    for round in ["before", "after"] {
      let bundle = treeSnapshot(home + "/Notes.app")
      let write = try device.run("defaults", "com.example.notes", "write", "evil", "1")
      #expect(write.status == 77, "\(round): \(write.err)")
      #expect(
        write.err
          == "Error: Path 'Library/Preferences' goes through a symbolic link, which is not followed here\n")
      #expect(try device.run("defaults", "com.example.notes", "read").status == 77)
      #expect(treeSnapshot(home + "/Notes.app") == bundle)
      #expect(!exists(home + "/Notes.app/com.example.notes.plist"))
      let launched = try device.run("launch", "com.example.notes")
      #expect(launched.status == 0, "\(round): \(launched.err)")
      if round == "before" {
        let update = try device.run("update", "com.example.notes", fixturePath("bundles/Notes-2.0/Notes.app"))
        #expect(update.status == 0, "\(update.err)")
        home = device.home(
          try #require(try device.json("list") as? [[String: Any]]).first?["containerID"] as? String ?? "")
        #expect(exists(home + "/Library/Preferences"))  // the link moved with Library
      }
    }
  }
}

struct DeepTreeTests {
  /// 18 nested 250-byte names: a 4.5 KB path, beyond PATH_MAX. The backup walks it with
  /// descriptors, the snapshot is complete, and a restore brings the deepest file back.
  @Test func aTreeDeeperThanPathMaxIsBackedUpAndRestored() throws {
    let device = Device()
    let home = device.home(try device.install("Notes-1.0/Notes.app"))
    let planted = try device.sh("com.example.notes", deepTreeScript)
    #expect(planted.status == 0, "\(planted.err)")
    let backup = try device.run("--json", "backup", "com.example.notes")
    #expect(backup.status == 0, "\(backup.err)")
    let result = try #require(try JSONSerialization.jsonObject(with: Data(backup.stdout)) as? [[String: Any]])
    #expect(result.first?["incomplete"] == nil)
    #expect(result.first?["files"] as? Int == 2)  // bottom.txt and Documents/Notes
    let check = try device.run("check", "--read-data")
    #expect(check.status == 0, "\(check.out)")
    let removed = try device.sh("com.example.notes", "rm -rf Documents/0*")
    #expect(removed.status == 0, "\(removed.err)")
    let restore = try device.run("restore", "com.example.notes")
    #expect(restore.status == 0, "\(restore.err)")
    let deep = try device.sh(
      "com.example.notes",
      "exec /usr/bin/perl -e 'chdir \"Documents\" or die; for $i (1..18) { chdir sprintf(\"%0250d\", $i) or die \"$!\" }"
        + " open F, \"bottom.txt\" or die; print <F>'")
    #expect(deep.out == "deep\n", "\(deep.err)")
    _ = home
  }
}

@Suite(.enabled(if: canRunAsNobody))
struct UnreadableEntriesTests {
  /// As a non-root owner, a mode-000 directory the app made cannot be listed: the backup
  /// records it (empty) and marks the snapshot incomplete instead of failing (it used to
  /// exit 77, and so block the app's own updates), and `update` goes ahead, saying so.
  @Test func anUnreadableDirectoryMakesTheSnapshotIncompleteAndTheUpdateProceeds() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try device.giveToNobody()
    let planted = try device.shAsNobody(
      "com.example.notes",
      "mkdir -p Documents/locked/inner && echo x > Documents/locked/x && chmod 000 Documents/locked")
    #expect(planted.status == 0, "\(planted.err)")
    let backup = try device.runAsNobody("backup", "com.example.notes")
    #expect(backup.status == 0, "\(backup.err)")
    #expect(
      backup.err.contains(
        "is incomplete: 1 entry could not be read and was left out: 'Documents/locked'"), "\(backup.err)")

    let update = try device.runAsNobody(
      "--json", "update", "com.example.notes", fixturePath("bundles/Notes-2.0/Notes.app"))
    #expect(update.status == 0, "\(update.err)")
    #expect(update.err.contains("the pre-update snapshot"), "\(update.err)")
    #expect(update.err.contains("is incomplete") && update.err.contains("the update went ahead"))
    let report = try #require(try JSONSerialization.jsonObject(with: Data(update.stdout)) as? [String: Any])
    #expect(report["newVersion"] as? String == "2.0")
    #expect(report["preUpdateIncomplete"] as? Bool == true)
    #expect(report["preUpdateUnreadablePaths"] as? [String] == ["Documents/locked"])
    let text = try device.runAsNobody("snapshots")
    #expect(text.out.contains("INCOMPLETE") && text.out.contains("1 unreadable"), "\(text.out)")
  }

  /// `backup --all` over four apps: a good one, one with a tree deeper than PATH_MAX, one
  /// with an unreadable directory, and one whose home cannot even be opened. Every app is
  /// tried and reported; the exit status is the first failure's (77), and the others have
  /// their snapshots (the unreadable one marked incomplete).
  @Test func backupAllTriesEveryAppAndReportsEach() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    let journal = try device.install("Journal-1.0/Journal.app")
    try device.install("Other-1.0/Other.app")
    try device.giveToNobody()
    #expect(try device.shAsNobody("com.example.notes", deepTreeScript).status == 0)
    #expect(
      try device.shAsNobody("org.other.app", "mkdir Documents/locked && chmod 000 Documents/locked").status
        == 0)
    #expect(chmod(device.home(journal), 0) == 0)  // not the app's doing: its home is broken
    defer { chmod(device.home(journal), 0o700) }

    let result = try device.runAsNobody("--json", "backup", "--all")
    #expect(result.status == 77, "\(result.err)")
    let reports = try #require(
      try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [[String: Any]])
    #expect(
      reports.map { $0["app"] as? String } == [
        "com.example.journal", "com.example.notes", "org.other.app", "group.com.example.shared",
      ])
    let failed = try #require(reports.first?["error"] as? [String: Any])
    #expect(failed["status"] as? Int == 77)
    #expect(reports[1]["snapshot"] is String && reports[1]["incomplete"] == nil)
    #expect(reports[2]["snapshot"] is String && reports[2]["incomplete"] as? Bool == true)
    let errors = result.err.split(separator: "\n").filter { $0.hasPrefix("Error: ") }
    #expect(errors.count == 1 && errors[0].contains("backup of com.example.journal failed"), "\(result.err)")
    #expect(result.err.contains("warning: snapshot") && result.err.contains("'Documents/locked'"))
    // Without the broken app, everything succeeds (incomplete is still success) unless --strict.
    #expect(chmod(device.home(journal), 0o700) == 0)
    #expect(try device.runAsNobody("backup", "--all").status == 0)
    #expect(try device.runAsNobody("backup", "--all", "--strict").status == 74)
    #expect(try device.runAsNobody("check", "--read-data").status == 0)
  }

  /// `FileTree` met a 000 directory, got EACCES, and changed its mode with
  /// fchmodat(parent, name), which follows a symlink: an app that swapped the directory for
  /// a link at that moment had appbox chmod a file outside its home. The swap is made at
  /// exactly that moment here (the process pauses there); the mode is only ever changed
  /// through the directory's own descriptor, so nothing outside changes.
  @Test func removingA000DirectorySwappedForALinkChangesNoModeOutside() throws {
    let device = Device()
    let home = device.home(try device.install("Notes-1.0/Notes.app"))
    let outside = try device.dir.write("outside.txt", "not the app's", mode: 0o600)
    try device.giveToNobody()
    #expect(
      try device.shAsNobody("com.example.notes", "mkdir Documents/trap && chmod 000 Documents/trap").status
        == 0)
    let remove = try device.startPausing(
      at: "filetree.unreadable", asNobody: true, "files", "com.example.notes", "rm", "trap")
    #expect(remove.waitUntilPaused())
    // The app's move: the unreadable directory out of the way, a link to the victim in its place.
    #expect(rename(home + "/Documents/trap", home + "/Documents/trap.moved") == 0)
    #expect(symlink(outside, home + "/Documents/trap") == 0)
    let result = remove.finish()
    #expect(result.status != 0)
    #expect(permissions(outside) == 0o600)
    #expect(try String(contentsOfFile: outside, encoding: .utf8) == "not the app's")
    _ = chmod(home + "/Documents/trap.moved", 0o700)
  }
}

struct OutputEscapingTests {
  /// Names, keys and paths an app chose reach the terminal escaped: an ESC sequence (here
  /// OSC 52, a clipboard write) never arrives whole, and a newline in a name cannot forge
  /// a line. `--json` stays exact, and what `ls` shows can be typed back.
  @Test func appChosenBytesAreEscapedInHumanOutput() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    let osc = "\u{1B}]52;c;cHduZWQ=\u{07}"
    let plant = """
      cd Documents && printf x > "$(printf 'a\\033]52;c;cHduZWQ=\\007b')" && printf y > "$(printf 'line\\nforged 1 2 3')" \
      && printf z > "$(printf 'caf\\351.txt')" && printf w > 'back\\slash'
      """
    #expect(try device.sh("com.example.notes", plant).status == 0)
    #expect(try device.run("backup", "com.example.notes").status == 0)
    let ls = try device.run("files", "com.example.notes", "ls")
    #expect(ls.status == 0, "\(ls.err)")
    #expect(!ls.stdout.contains(0x1B) && !ls.stdout.contains(0x07))
    #expect(ls.out.contains("a\\x1b]52;c;cHduZWQ=\\x07b"), "\(ls.out)")
    #expect(ls.out.contains("line\\nforged 1 2 3"))
    #expect(ls.out.contains("caf\\xe9.txt") && ls.out.contains("back\\\\slash"))
    #expect(ls.out.split(separator: "\n").count == 5)  // the header and four entries
    let json = try #require(try device.json("files", "com.example.notes", "ls") as? [[String: Any]])
    #expect(json.contains { $0["name"] as? String == "a" + osc + "b" })
    #expect(json.contains { $0["escapedName"] as? String == "caf\\xe9.txt" })

    // The escaped form reads back: a name that is not UTF-8, and one with a backslash.
    let pulled = try device.run("files", "com.example.notes", "pull", "caf\\xe9.txt")
    #expect(pulled.status == 0 && pulled.out == "z", "\(pulled.err)")
    #expect(try device.run("files", "com.example.notes", "pull", "back\\\\slash").out == "w")
    // Pulled into a folder, the file keeps its exact name there too.
    let copy = device.dir.url("copy-dir")
    #expect(mkdir(copy, 0o755) == 0)
    #expect(try device.run("files", "com.example.notes", "pull", "caf\\xe9.txt", copy).status == 0)
    let folder = try FileDescriptor.open(copy, O_RDONLY | O_DIRECTORY)
    defer { folder.close() }
    let copied = try folder.open(rawName: Array("caf".utf8) + [0xE9] + Array(".txt".utf8), O_RDONLY)
    #expect(try copied.closeAfter { try $0.readAll() } == Array("z".utf8))
    #expect(try device.run("files", "com.example.notes", "rm", "caf\\xe9.txt").status == 0)
    #expect(!(try device.run("files", "com.example.notes", "ls").out.contains("caf")))

    // diff, defaults and errors escape too.
    #expect(try device.sh("com.example.notes", "rm Documents/line*").status == 0)
    #expect(try device.run("backup", "com.example.notes").status == 0)
    let snapshots = try #require(try device.json("snapshots") as? [[String: Any]]).compactMap {
      $0["snapshot"] as? String
    }
    let diff = try device.run("diff", snapshots[0], snapshots[1])
    #expect(diff.status == 0 && !diff.stdout.contains(0x1B))
    #expect(
      diff.out.contains("- Documents/line\\nforged 1 2 3") && diff.out.contains("- Documents/caf\\xe9.txt"))
    let key = "k\u{1B}[2J"
    #expect(
      try device.run("defaults", "com.example.notes", "write", key, "v\u{1B}]0;title\u{07}").status == 0)
    let read = try device.run("defaults", "com.example.notes", "read")
    #expect(!read.stdout.contains(0x1B), "\(read.out)")
    #expect(read.out.contains("k\\x1b[2J = "))
    let missing = try device.run("files", "com.example.notes", "pull", "no\u{1B}[31mpe")
    #expect(missing.status == 66 && !missing.stderr.contains(0x1B), "\(missing.err)")
  }

  /// The update report lists files that still mention the old home: their names are the
  /// app's and are escaped like any other.
  @Test func theUpdateReportEscapesPaths() throws {
    let device = Device()
    let id = try device.install("Notes-1.0/Notes.app")
    let script = "printf '%s' '\(device.home(id))/Documents' > \"Documents/$(printf 'x\\033[2Jy.txt')\""
    #expect(try device.sh("com.example.notes", script).status == 0)
    let update = try device.run("update", "com.example.notes", fixturePath("bundles/Notes-2.0/Notes.app"))
    #expect(update.status == 0, "\(update.err)")
    #expect(!update.stdout.contains(0x1B) && !update.stderr.contains(0x1B))
    #expect(update.out.contains("Documents/x\\x1b[2Jy.txt"), "\(update.out)")
    #expect(update.err.contains("(Documents/x\\x1b[2Jy.txt)"), "\(update.err)")
    _ = id
  }
}

struct UninstallRaceTests {
  /// Once the registry has committed the uninstall, it has happened: entries of the old
  /// home vanishing under the removal (another process deleting them) used to make it exit
  /// 66 anyway. The removal pauses as it descends; the test empties the trash meanwhile.
  @Test func uninstallSucceedsOnceCommittedWhateverHappensToTheTrash() throws {
    let device = Device()
    let id = try device.install("Notes-1.0/Notes.app")
    #expect(
      try device.sh("com.example.notes", "mkdir -p Documents/a/b/c && echo x > Documents/a/b/c/f").status == 0
    )
    let uninstall = try device.startPausing(at: "filetree.descend", "uninstall", "com.example.notes")
    #expect(uninstall.waitUntilPaused())
    let trash = device.root + "/ApplicationRoot/.trash-" + id
    #expect(exists(trash))
    // Another process removes the trash's contents under the uninstall's feet.
    #expect(try runProcess("/bin/sh", ["-c", "rm -rf \"$0\"/*", trash]).status == 0)
    let result = uninstall.finish()
    #expect(result.status == 0, "\(result.err)")
    #expect(try device.run("list").out == "No apps installed.\n")
    #expect(device.applicationRootEntries().isEmpty)
  }
}

/// Makes Documents/<18 nested 250-byte names>/bottom.txt ("deep"): a 4.5 KB path, beyond
/// PATH_MAX (perl changes directory one level at a time, which a shell's `cd` cannot do
/// past PATH_MAX).
let deepTreeScript =
  "exec /usr/bin/perl -e 'chdir \"Documents\" or die; for $i (1..18) { $n = sprintf(\"%0250d\", $i);"
  + " mkdir $n or die \"$!\"; chdir $n or die \"$!\" } open F, \">bottom.txt\" or die; print F \"deep\\n\"'"

/// Locks are per app (plus short root-level ones): commands on different apps run in
/// parallel; on one app the second is busy at once (75), or waits with `--wait`.
struct ConcurrencyTests {
  func device(withData bytes: Int) throws -> Device {
    let device = Device()
    let notes = device.home(try device.install("Notes-1.0/Notes.app"))
    let journal = device.home(try device.install("Journal-1.0/Journal.app"))
    let random = try #require(FileHandle(forReadingAtPath: "/dev/urandom"))
    defer { try? random.close() }
    for home in [notes, journal] {
      for index in 0..<4 {
        try random.readData(ofLength: bytes).write(
          to: URL(fileURLWithPath: home + "/Documents/data-\(index).bin"))
      }
    }
    return device
  }

  /// One backup is held in the middle of its work (paused after its archive is written,
  /// holding its app's lock, the root lock and the repository lock): a backup of another
  /// app into the same repository runs to the end meanwhile, with no waiting at all, and
  /// so does a change to that other app; the held app itself is busy.
  @Test func aBackupOfAnotherAppDoesNotWaitForARunningOne() throws {
    let device = try device(withData: 256 << 10)
    let first = try device.startPausing(at: "backup.archive-synced", "backup", "com.example.notes")
    #expect(first.waitUntilPaused())
    let second = try device.run("backup", "com.example.journal")
    #expect(second.status == 0, "\(second.err)")
    #expect(try device.run("defaults", "com.example.journal", "write", "k", "v").status == 0)
    #expect(try device.run("files", "com.example.notes", "ls").status == 0)  // reads never wait
    let busy = try device.run("defaults", "com.example.notes", "write", "k", "v")
    #expect(busy.status == 75, "\(busy.err)")
    #expect(
      busy.err.hasPrefix("Error: App com.example.notes is busy") && busy.err.split(separator: "\n").count == 1
    )
    #expect(try device.run("--wait", "0.2", "defaults", "com.example.notes", "write", "k", "v").status == 75)
    // Told to wait, a command on the held app waits for it instead of failing.
    let waiting = ProcessStatuses()
    let group = DispatchGroup()
    DispatchQueue.global().async(group: group) {
      let result = try? device.run("defaults", "com.example.notes", "write", "k", "v", "--wait", "60")
      waiting.add(result?.status ?? -1)
    }
    usleep(300_000)
    let finished = first.finish()
    #expect(finished.status == 0, "\(finished.err)")
    group.wait()
    #expect(waiting.all == [0])
    let check = try device.run("check", "--read-data")
    #expect(check.status == 0, "\(check.out)")
    let snapshots = try #require(try device.json("snapshots") as? [[String: Any]])
    #expect(
      Set(snapshots.compactMap { $0["app"] as? String }) == ["com.example.notes", "com.example.journal"])
  }

  /// Two backups of different apps into one repository, started together: both succeed
  /// (no 75), and the repository checks clean, every stored byte verified.
  /// The first backups of a new device create its repository. One that found no config
  /// while the other was creating it must still commit a layout 2 snapshot: it used to take
  /// the other's fresh catalog for a layout 1 repository and commit to the catalog alone,
  /// and the next sync dropped its snapshot, both backups having exited 0.
  @Test func aBackupThatSawTheRepositoryBeingCreatedKeepsItsSnapshot() throws {
    let device = try device(withData: 1 << 16)
    let paused = try device.startPausing(at: "repository.no-config", "backup", "com.example.notes")
    #expect(paused.waitUntilPaused())
    // The other creates the repository and holds it (shared) while the first goes on.
    let other = try device.startPausing(at: "backup.archive-synced", "backup", "com.example.journal")
    #expect(other.waitUntilPaused())
    paused.resume()
    let first = paused.finish()
    #expect(first.status == 0, "\(first.err)")
    other.resume()
    let second = other.finish()
    #expect(second.status == 0, "\(second.err)")
    let check = try device.run("check", "--read-data")
    #expect(check.status == 0, "\(check.out)")
    #expect(check.out.contains("Checked 2 snapshots"), "\(check.out)")
  }

  @Test func twoBackupsOfDifferentAppsStartedTogetherBothSucceed() throws {
    let device = try device(withData: 2 << 20)
    let statuses = ProcessStatuses()
    let group = DispatchGroup()
    for app in ["com.example.notes", "com.example.journal"] {
      DispatchQueue.global().async(group: group) {
        let result = try? device.run("backup", app)
        statuses.add(result?.status ?? -1)
      }
    }
    group.wait()
    #expect(statuses.all == [0, 0])
    let check = try device.run("check", "--read-data")
    #expect(check.status == 0, "\(check.out)")
    #expect(check.out.contains("Checked 2 snapshots"))
  }
}

/// Work a killed appbox left on one app is finished by the next command on that app, even
/// while other appbox processes are busy with other apps (when all of it cannot be done at
/// once, under the root lock alone).
struct PerAppRecoveryTests {
  @Test(arguments: ["update.moved", "update.committed"])
  func aKilledUpdateIsFinishedByTheNextCommandOnThatApp(_ point: String) throws {
    let device = Device()
    let notes = try device.install("Notes-1.0/Notes.app")
    try device.install("Journal-1.0/Journal.app")
    try Data("mine".utf8).write(to: URL(fileURLWithPath: device.home(notes) + "/Documents/mine.txt"))
    let busy = try device.startPausing(at: "backup.archive-synced", "backup", "com.example.journal")
    #expect(busy.waitUntilPaused())
    let killed = try device.run(
      "update", "com.example.notes", fixturePath("bundles/Notes-2.0/Notes.app"),
      environment: ["APPBOX_CRASH_AT": point])
    #expect(killed.status == 128 + SIGKILL)
    #expect(device.applicationRootEntries().count == 3)  // two homes and the staging one
    // A read of Notes finishes its update first: rolled back before the commit, forward after.
    let pulled = try device.run("files", "com.example.notes", "pull", "mine.txt")
    #expect(pulled.status == 0 && pulled.out == "mine", "\(pulled.err)")
    #expect(device.applicationRootEntries().count == 2)
    #expect(try FileManager.default.contentsOfDirectory(atPath: device.root + "/.appbox/journal").isEmpty)
    let version =
      try #require(try device.json("list") as? [[String: Any]]).first {
        $0["app"] as? String == "com.example.notes"
      }?["version"] as? String
    #expect(version == (point == "update.moved" ? "1.0" : "2.0"))
    let finished = busy.finish()
    #expect(finished.status == 0, "\(finished.err)")
  }
}
