import AppboxCore
import AppboxPlist
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// File protection end to end on a real fscrypt file system: each test makes its own ext4
/// loop volume (root only) and drives the built `appbox`.
@Suite(.enabled(if: EncryptedVolume.isAvailable, "needs root and loop devices"))
struct ProtectionEndToEndTests {
  static let app = "com.example.vault"

  @Test func protectLockThenEveryReaderIsRefusedUntilUnlock() throws {
    let device = try ProtectedDevice()
    let home = try device.install("Vault-1.0/Vault.app")
    let plain = marker("plain")
    let secret = marker("secret")
    try writeDurably(home + "/Documents/notes.txt", plain)
    try writeDurably(home + "/Documents/vault.txt", secret)
    #expect(try device.imageContains(secret), "the plaintext is on the disk before protection")
    try expectSuccess(device.run("defaults", Self.app, "write", "token", secret + "-pref"))

    let protect = try device.run("protect", Self.app, "Documents/vault.txt", "--class", "complete")
    try expectSuccess(protect)
    #expect(protect.out.contains("Documents/vault.txt: none -> complete"))
    try expectSuccess(
      device.run("protect", Self.app, "Library/Preferences/\(Self.app).plist", "--class", "complete"))
    #expect(
      try device.classes(Self.app, "Documents")
        == ["Documents/notes.txt": "none", "Documents/vault.txt": "complete"])
    #expect(try device.imageContains(plain), "unprotected data is on the disk as is")
    #expect(try !device.imageContains(secret), "no block holds the protected file's plaintext")
    #expect(try !device.imageContains(secret + "-pref"))
    #expect(try String(contentsOfFile: home + "/Documents/vault.txt", encoding: .utf8) == secret)

    try expectSuccess(device.run("repo", "init", "--repo", device.volume.path + "/repo"))
    try device.lock()
    let status = try device.status()
    #expect(status["locked"] as? Bool == true && status["protectedDataAvailable"] as? Bool == false)
    #expect(openError(home + "/Documents/vault.txt") == .keyNotAvailable, "not even root reads it")
    #expect(openError(home + "/Documents/notes.txt") == Errno(rawValue: 0))

    let confined = try device.run(
      "run", Self.app, "--", "/bin/sh", "-c",
      "echo available=$APPBOX_PROTECTED_DATA_AVAILABLE; cat Documents/notes.txt; echo; cat Documents/vault.txt"
    )
    #expect(confined.status == 1)
    #expect(confined.out == "available=0\n\(plain)\n")
    #expect(confined.err.contains("Documents/vault.txt: Required key not available"))
    #expect(confined.err.contains("the device is locked"))

    let pulled = device.volume.path + "/pulled.txt"
    for (arguments, what) in [
      (["files", Self.app, "pull", "vault.txt", pulled], "pull"),
      (["defaults", Self.app, "read"], "defaults"),
      (["export", Self.app, device.volume.path + "/data.tar"], "export"),
      (["backup", Self.app, "--repo", device.volume.path + "/repo"], "backup"),
    ] {
      let result = try appbox(arguments, root: device.root)
      #expect(result.status == 69, "\(what): \(result.err)")
      #expect(isOneLine(result.err) && result.err.contains("locked"), "\(what): \(result.err)")
    }
    let leftovers = try FileManager.default.contentsOfDirectory(atPath: device.volume.path).filter {
      $0.contains("pulled") || $0.contains("data.tar")
    }
    #expect(leftovers.isEmpty, "nothing pulled or exported, not even a temp file")
    let snapshots = try device.json("snapshots", "--repo", device.volume.path + "/repo") as? [Any]
    #expect(snapshots?.isEmpty == true)

    let wrong = try device.run("device", "unlock", input: "0000\n")
    #expect(wrong.status == 77 && wrong.err.contains("wrong passcode"))
    try device.unlock()
    let reading = try device.run("run", Self.app, "--", "/bin/cat", "Documents/vault.txt")
    #expect(reading.status == 0 && reading.out == secret)
    try expectSuccess(device.run("files", Self.app, "pull", "vault.txt", pulled))
    #expect(try String(contentsOfFile: pulled, encoding: .utf8) == secret)
    #expect(try device.run("defaults", Self.app, "read", "token").out == secret + "-pref\n")
    try expectSuccess(device.run("defaults", Self.app, "write", "second", "value"))
    let preferences = "Library/Preferences/\(Self.app).plist"
    #expect(
      try device.classes(Self.app, preferences) == [preferences: "complete"], "a rewrite keeps the class")
    try expectSuccess(device.run("backup", Self.app, "--repo", device.volume.path + "/repo"))
  }

  @Test func completeUnlessOpenFilesStayReadableWhileOpenAcrossALock() throws {
    let device = try ProtectedDevice()
    let home = try device.install("Vault-1.0/Vault.app")
    try writeDurably(home + "/Documents/open.txt", "held open")
    try writeDurably(home + "/Documents/closed.txt", "not open")
    try expectSuccess(device.run("protect", Self.app, "Documents", "--class", "complete-unless-open"))

    // The app opens one file, says so, waits for the lock, then reads it and opens the other.
    let script = """
      exec 3<Documents/open.txt
      : > tmp/ready
      while [ ! -e tmp/go ]; do sleep 0.02; done
      cat <&3 > tmp/held.out 2>&1
      cat Documents/closed.txt > tmp/closed.out 2>&1
      exit 0
      """
    let null = open("/dev/null", O_RDWR)
    defer { close(null) }
    let app = try spawnProcess(
      productsDirectory + "/appbox", ["--root", device.root, "run", Self.app, "--", "/bin/sh", "-c", script],
      stdin: null, stdout: null, stderr: null)
    #expect(eventually { FileManager.default.fileExists(atPath: home + "/tmp/ready") })

    let lock = try #require(try device.json("device", "lock") as? [String: Any])
    #expect(lock["busyClasses"] as? [String] == ["complete-unless-open"])
    #expect(openError(home + "/Documents/closed.txt") == .keyNotAvailable, "new opens fail at once")
    FileManager.default.createFile(atPath: home + "/tmp/go", contents: nil)
    #expect(app.wait() == 0)
    #expect(try String(contentsOfFile: home + "/tmp/held.out", encoding: .utf8) == "held open")
    #expect(
      try String(contentsOfFile: home + "/tmp/closed.out", encoding: .utf8).contains(
        "Required key not available"))
    // Once the app ended, the removal finished: the file it held is locked too.
    #expect(openError(home + "/Documents/open.txt") == .keyNotAvailable)
    let available = try device.status()["availableClasses"] as? [String]
    #expect(available == ["none", "until-first-unlock"])

    try device.unlock()
    #expect(try String(contentsOfFile: home + "/Documents/open.txt", encoding: .utf8) == "held open")
  }

  @Test func untilFirstUnlockSurvivesALockButNotAReboot() throws {
    let device = try ProtectedDevice()
    let home = try device.install("Vault-1.0/Vault.app")
    try writeDurably(home + "/Documents/cache.db", "after first unlock")
    try expectSuccess(device.run("protect", Self.app, "Documents/cache.db", "--class", "until-first-unlock"))
    let file = home + "/Documents/cache.db"

    try device.lock()
    #expect(openError(file) == Errno(rawValue: 0), "a lock keeps the until-first-unlock key")
    let running = try device.run("run", Self.app, "--", "/bin/cat", "Documents/cache.db")
    #expect(running.status == 0 && running.out == "after first unlock")

    // A restart ends every app: refused while one runs.
    let null = open("/dev/null", O_RDWR)
    defer { close(null) }
    let sleeper = try spawnProcess(
      productsDirectory + "/appbox",
      [
        "--root", device.root, "run", Self.app, "--", "/bin/sh", "-c",
        "echo $$ > tmp/up.tmp; mv tmp/up.tmp tmp/up; exec sleep 30",
      ],
      stdin: null, stdout: null, stderr: null)
    #expect(eventually { FileManager.default.fileExists(atPath: home + "/tmp/up") })
    let refused = try device.run("device", "reboot")
    #expect(refused.status == 75 && refused.err.contains("running"))
    let pid = try #require(
      Int32(
        String(contentsOfFile: home + "/tmp/up", encoding: .utf8).trimmingCharacters(
          in: .whitespacesAndNewlines)))
    kill(pid, SIGKILL)
    _ = sleeper.wait()

    try expectSuccess(device.run("device", "reboot"))
    #expect(openError(file) == .keyNotAvailable, "a reboot drops every key")
    let status = try device.status()
    #expect(status["locked"] as? Bool == true && status["availableClasses"] as? [String] == ["none"])
    #expect(try device.run("device", "show").out.contains("not unlocked since the last reboot"))
    try device.unlock()
    #expect(openError(file) == Errno(rawValue: 0))
  }

  @Test func wrongPasscodesCountAndTheDelayGrowsOnDisk() throws {
    let device = try ProtectedDevice()
    try device.lock()
    for attempt in 1...4 {
      let result = try device.run("device", "unlock", input: "9999\n")
      #expect(result.status == 77 && isOneLine(result.err))
      #expect(result.err.contains("wrong passcode (\(attempt) failed attempt"))
      #expect(!result.err.contains("next attempt"), "the first four cost nothing")
    }
    let fifth = try device.run("device", "unlock", input: "9999\n")
    #expect(fifth.status == 77 && fifth.err.contains("next attempt is allowed in 60 seconds"))
    // Even the right passcode waits now; the count is on disk, so a new process knows.
    let waiting = try device.run("device", "unlock", input: ProtectedDevice.passcode + "\n")
    #expect(waiting.status == 75 && waiting.err.contains("after 5 failed attempts"))
    var status = try device.status()
    #expect(status["failedAttempts"] as? Int == 5 && status["unlockAllowedAfter"] is String)
    #expect(status["locked"] as? Bool == true)

    try Self.endDelay(device)
    let sixth = try device.run("device", "unlock", input: "9999\n")
    #expect(sixth.status == 77 && sixth.err.contains("in 300 seconds"), "the delay grows")
    try Self.endDelay(device)
    try device.unlock()
    status = try device.status()
    #expect(status["failedAttempts"] as? Int == 0 && status["locked"] as? Bool == false)

    // Change re-wraps: the old passcode no longer opens the keys, the new one does.
    let badChange = try device.run("device", "passcode", "change", input: "0000\n5678\n")
    #expect(badChange.status == 77)
    try expectSuccess(device.run("device", "passcode", "change", input: "1234\n5678\n"))
    try device.lock()
    #expect(try device.run("device", "unlock", input: "1234\n").status == 77)
    try device.unlock("5678")
    #expect(try device.run("device", "passcode", "set", input: "1111\n").status == 73)
    try expectSuccess(device.run("device", "passcode", "clear", input: "5678\n"))
    #expect(try device.run("device", "lock").status == 69, "no passcode, no lock")
    #expect(try device.status()["passcodeSet"] as? Bool == false)
  }

  /// Moves the delay's end into the past, as time passing would.
  static func endDelay(_ device: ProtectedDevice) throws {
    let path = device.root + "/Keychains/unlock-attempts.plist"
    let current = try PropertyList.decode(Data(contentsOf: URL(fileURLWithPath: path)))
    var fields = current.dictionary ?? [:]
    fields["NotBefore"] = .date(Date(timeIntervalSinceNow: -1))
    try PropertyList.dictionary(fields).xmlData().write(to: URL(fileURLWithPath: path))
  }

  @Test func protectionIsRaisedNeverLoweredAndRefusesWhatItCannotDo() throws {
    let device = try ProtectedDevice()
    let home = try device.install("Vault-1.0/Vault.app")
    try writeDurably(home + "/Documents/a.txt", "a")
    try FileManager.default.createDirectory(
      atPath: home + "/Documents/dir", withIntermediateDirectories: true)
    try writeDurably(home + "/Documents/dir/b.txt", "b")
    try writeDurably(home + "/Documents/dir/c.txt", "c")
    try expectSuccess(device.run("protect", Self.app, "Documents/dir/b.txt", "--class", "complete"))

    for lower in ["until-first-unlock", "complete-unless-open", "none"] {
      let result = try device.run("protect", Self.app, "Documents/dir/b.txt", "--class", lower)
      #expect(result.status == 77 && result.err.contains("never lowered"), "\(lower): \(result.err)")
    }
    // A folder holding a complete file cannot go to a lower class: nothing changes at all.
    let folder = try device.run("protect", Self.app, "Documents/dir", "--class", "until-first-unlock")
    #expect(folder.status == 77)
    #expect(
      try device.classes(Self.app, "Documents/dir") == [
        "Documents/dir/b.txt": "complete", "Documents/dir/c.txt": "none",
      ])
    // Raising the folder raises the rest, keeping what is already there.
    let raised = try #require(
      try device.json("protect", Self.app, "Documents/dir", "--class", "complete") as? [String: Any])
    #expect(raised["unchanged"] as? [String] == ["Documents/dir/b.txt"])
    #expect((raised["raised"] as? [[String: Any]])?.map { $0["path"] as? String } == ["Documents/dir/c.txt"])

    // Mode, mtime and attributes survive; hard links, symlinks and the bundle are refused.
    let path = home + "/Documents/a.txt"
    chmod(path, 0o640)
    var times = [timespec(tv_sec: 1_000_000_000, tv_nsec: 5), timespec(tv_sec: 1_000_000_000, tv_nsec: 5)]
    utimensat(AT_FDCWD, path, &times, 0)
    try FileDescriptor.open(path, O_RDONLY).closeAfter {
      try $0.setExtendedAttribute("user.appbox.exclude-from-backup", [0x31])
    }
    try expectSuccess(device.run("protect", Self.app, "Documents/a.txt", "--class", "complete-unless-open"))
    var st = stat()
    stat(path, &st)
    #expect(st.st_mode & 0o7777 == 0o640 && st.st_mtim.tv_sec == 1_000_000_000 && st.st_mtim.tv_nsec == 5)
    #expect(
      try FileDescriptor.open(path, O_RDONLY).closeAfter {
        try $0.extendedAttribute("user.appbox.exclude-from-backup")
      }
        == [0x31])
    link(path, home + "/Documents/a-link.txt")
    try writeDurably(home + "/Documents/x.txt", "x")
    link(home + "/Documents/x.txt", home + "/Documents/x-link.txt")
    let linked = try device.run("protect", Self.app, "Documents/x.txt", "--class", "complete")
    #expect(linked.status == 77 && linked.err.contains("hard links"))
    symlink("x.txt", home + "/Documents/s.txt")
    #expect(try device.run("protect", Self.app, "Documents/s.txt", "--class", "complete").status == 77)
    #expect(try device.run("protect", Self.app, "Vault.app/Vault", "--class", "complete").status == 77)
    #expect(try device.run("protect", Self.app, "../x", "--class", "complete").status == 77)
    #expect(try device.run("protect", Self.app, "Documents/missing", "--class", "complete").status == 66)

    // No passcode: protection is unavailable.
    let bare = try device.sibling("bare", passcode: nil)
    _ = try device.install("Vault-1.0/Vault.app", root: bare)
    let unprotected = try appbox(["protect", Self.app, "Documents", "--class", "complete"], root: bare)
    #expect(unprotected.status == 69 && unprotected.err.contains("no passcode"))
  }

  @Test func keychainAccessibilityFollowsTheLock() throws {
    let device = try ProtectedDevice(passcode: nil)
    _ = try device.install("Vault-1.0/Vault.app")
    func add(_ account: String, _ accessible: String?) throws -> ProcessResult {
      try device.run(
        "keychain", Self.app, "add", "--service", "s", "--account", account, "--data", "secret-\(account)",
        "--accessible", accessible ?? "when-unlocked")
    }
    func get(_ account: String) throws -> ProcessResult {
      try device.run("keychain", Self.app, "get", "--service", "s", "--account", account)
    }
    try expectSuccess(add("default", nil))
    try expectSuccess(add("first", "after-first-unlock"))
    try expectSuccess(add("device", "when-unlocked-this-device-only"))
    #expect(try add("pin", "when-passcode-set-this-device-only").status == 69, "needs a passcode")
    try expectSuccess(device.run("device", "passcode", "set", input: "1234\n"))
    try expectSuccess(add("pin", "when-passcode-set-this-device-only"))
    #expect(try device.imageContains("secret-") == false, "no secret in the clear anywhere")

    try device.lock()
    for account in ["default", "device", "pin"] {
      let result = try get(account)
      #expect(result.status == 69 && result.err.contains("locked"), "\(account): \(result.err)")
    }
    #expect(try get("first").out == "secret-first")
    #expect(try add("new", nil).status == 69)
    try expectSuccess(add("new-first", "after-first-unlock"))
    let list = try #require(try device.json("keychain", Self.app, "list") as? [[String: Any]])
    #expect(list.count == 5, "listing works while locked: attributes are not secrets")

    try device.unlock()
    for account in ["default", "first", "device", "pin"] {
      #expect(try get(account).out == "secret-\(account)")
    }
    try expectSuccess(device.run("device", "reboot"))
    #expect(try get("first").status == 69, "after a reboot, until the first unlock")
    try device.unlock()
    #expect(try get("first").out == "secret-first")

    let cleared = try #require(
      try device.json("device", "passcode", "clear", input: "1234\n") as? [String: Any])
    #expect(cleared["deletedKeychainItems"] as? Int == 1)
    #expect(try get("pin").status == 66, "clearing the passcode deletes when-passcode-set items")
    #expect(try get("default").out == "secret-default")
  }

  @Test func backupsRecordClassesAndRestoresApplyThem() throws {
    let device = try ProtectedDevice()
    let home = try device.install("Vault-1.0/Vault.app")
    let repo = TemporaryDirectory("protect-repo")  // off the volume: archives hold plain data
    try expectSuccess(device.run("repo", "init", "--repo", repo.path))
    let a = marker("a")
    let b = marker("b")
    try writeDurably(home + "/Documents/a.txt", a)
    try writeDurably(home + "/Documents/b.txt", b)
    try writeDurably(home + "/Documents/c.txt", "c")
    func backup(full: Bool = false) throws -> String {
      let result = try appbox(
        ["--json", "backup", Self.app, "--repo", repo.path] + (full ? ["--full"] : []), root: device.root)
      #expect(result.status == 0, "\(result.err)")
      let snapshots = try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [[String: Any]]
      return snapshots?.first?["snapshot"] as? String ?? ""
    }
    try expectSuccess(
      device.run(
        "keychain", Self.app, "add", "--service", "s", "--account", "here", "--data", "only-here",
        "--accessible", "when-unlocked-this-device-only"))
    let before = try backup()
    try expectSuccess(device.run("protect", Self.app, "Documents/a.txt", "--class", "complete"))
    try expectSuccess(device.run("protect", Self.app, "Documents/b.txt", "--class", "until-first-unlock"))
    // A full backup stores every file again, so its archive stands alone and shows the records
    // (an incremental one keeps them in the snapshot's trees when the content is not new).
    let after = try backup(full: true)
    // The default archive is framed zstd: its pax stream is what zstd decompresses.
    let unpacked = repo.path + "/after.tar"
    let decompressed = try runProcess(
      "/usr/bin/zstd", ["-q", "-d", repo.path + "/archives/\(after).tar.zst", "-o", unpacked])
    #expect(decompressed.status == 0, "\(decompressed.err)")
    let archive = try Data(contentsOf: URL(fileURLWithPath: unpacked))
    let exported = repo.path + "/export.tar"
    try expectSuccess(device.run("export", Self.app, exported))
    for data in [archive, try Data(contentsOf: URL(fileURLWithPath: exported))] {
      for record in ["complete", "until-first-unlock"] {
        let line = Data("SCHILY.xattr.user.appbox.protection-class=\(record)\n".utf8)
        #expect(data.range(of: line) != nil, "a pax record for \(record)")
      }
    }
    let listing = try runProcess("/bin/tar", ["--xattrs", "-tvf", exported])
    #expect(listing.status == 0 && listing.err.isEmpty, "GNU tar reads it: \(listing.err)")
    let expected: [String: String?] = [
      "Documents/a.txt": "complete", "Documents/b.txt": "until-first-unlock", "Documents/c.txt": "none",
    ]

    // Restore while locked: complete files can only be made with their key.
    try device.lock()
    let locked = try device.run("restore", Self.app, "--snapshot", after, "--repo", repo.path)
    #expect(locked.status == 69 && isOneLine(locked.err), "\(locked.err)")
    try device.unlock()

    try FileManager.default.removeItem(atPath: home + "/Documents/a.txt")
    try expectSuccess(device.run("restore", Self.app, "--snapshot", after, "--repo", repo.path))
    #expect(try device.classes(Self.app, "Documents") == expected)
    #expect(try String(contentsOfFile: home + "/Documents/a.txt", encoding: .utf8) == a)
    #expect(
      try !device.imageContains(a) && !device.imageContains(b), "restored straight into encrypted files")

    // A snapshot from before protection brings the files back unprotected.
    try expectSuccess(device.run("restore", Self.app, "--snapshot", before, "--repo", repo.path))
    #expect(
      try device.classes(Self.app, "Documents")
        == ["Documents/a.txt": "none", "Documents/b.txt": "none", "Documents/c.txt": "none"])

    // Another device with a passcode applies the classes with its own keys; one without a
    // passcode restores them unprotected and says so.
    let other = try device.sibling("other", passcode: "2468")
    let elsewhere = try appbox(["restore", Self.app, "--snapshot", after, "--repo", repo.path], root: other)
    #expect(elsewhere.status == 0 && elsewhere.err.contains("another device"), "\(elsewhere.err)")
    #expect(try device.classes(Self.app, "Documents", root: other) == expected)
    let get = ["keychain", Self.app, "get", "--service", "s", "--account", "here"]
    #expect(try appbox(get, root: other).status == 66, "a this-device-only item never restores elsewhere")
    #expect(try appbox(get, root: device.root).out == "only-here", "but it does on its own device")
    let bare = try device.sibling("bare", passcode: nil)
    let plain = try appbox(["restore", Self.app, "--snapshot", after, "--repo", repo.path], root: bare)
    #expect(plain.status == 0 && plain.err.contains("restored unprotected"), "\(plain.err)")
    #expect(try device.classes(Self.app, "Documents", root: bare)["Documents/a.txt"] == "none")
  }

  @Test func anUpdateKeepsProtectedFilesProtected() throws {
    let device = try ProtectedDevice()
    let home = try device.install("Notes-1.0/Notes.app")
    try writeDurably(home + "/Documents/secret.txt", "keep me protected")
    try expectSuccess(
      device.run("protect", "com.example.notes", "Documents/secret.txt", "--class", "complete"))
    let update = try #require(
      try device.json("update", "com.example.notes", fixturePath("bundles/Notes-2.0/Notes.app"))
        as? [String: Any])
    let newHome = try #require(update["home"] as? String)
    #expect(newHome != home)
    #expect(
      try device.classes("com.example.notes", "Documents/secret.txt") == ["Documents/secret.txt": "complete"])
    try device.lock()
    #expect(openError(newHome + "/Documents/secret.txt") == .keyNotAvailable)
    try device.unlock()
    #expect(
      try String(contentsOfFile: newHome + "/Documents/secret.txt", encoding: .utf8) == "keep me protected")
  }

  @Test func aPrewarmedLaunchSeesProtectedDataUnavailable() throws {
    let device = try ProtectedDevice()
    let home = try device.install("Vault-1.0/Vault.app")
    try writeDurably(home + "/Documents/vault.txt", "the combination")
    try expectSuccess(device.run("protect", Self.app, "Documents/vault.txt", "--class", "complete"))
    try device.lock()
    let prewarmed = try device.run("launch", "--prewarm", Self.app)
    #expect(prewarmed.status == 0, "\(prewarmed.err)")
    #expect(
      prewarmed.out
        == "Vault 1.0: prewarm=1 protected-data-available=0\n"
        + "Vault 1.0: cannot read vault.txt (Required key not available); will try again once unlocked\n")
    #expect(!prewarmed.err.contains("note:"), "a prewarm on a locked device is expected")
    try device.unlock()
    let opened = try device.run("launch", Self.app)
    #expect(
      opened.out == "Vault 1.0: prewarm=0 protected-data-available=1\nVault 1.0: vault.txt: the combination\n"
    )
  }

  @Test func aFileSystemWithoutEncryptionRefusesNamingTheFix() throws {
    let device = try ProtectedDevice(encrypt: false, passcode: nil)
    _ = try device.install("Vault-1.0/Vault.app")
    let result = try device.run("device", "passcode", "set", input: "1234\n")
    #expect(result.status == 69 && isOneLine(result.err))
    #expect(result.err.contains("mkfs.ext4 -O encrypt") && result.err.contains("tune2fs -O encrypt"))
    let protect = try device.run("protect", Self.app, "Documents", "--class", "complete")
    #expect(protect.status == 69 && protect.err.contains("mkfs.ext4 -O encrypt"))
    let status = try device.status()
    #expect(status["fileProtectionSupported"] as? Bool == false && status["passcodeSet"] as? Bool == false)
  }

  @Test func aKilledProtectLeavesNoPlaintextOnceRecovered() throws {
    let device = try ProtectedDevice()
    let home = try device.install("Vault-1.0/Vault.app")
    let first = marker("first")
    let second = marker("second")
    try writeDurably(home + "/Documents/first.txt", first)
    try writeDurably(home + "/Documents/second.txt", second)
    #expect(try device.imageContains(first) && device.imageContains(second))

    // Killed before the rename: the file is as it was.
    let staged = try device.run(
      "protect", Self.app, "Documents/first.txt", "--class", "complete",
      environment: ["APPBOX_CRASH_AT": "protect.staged"])
    #expect(staged.status == 128 + SIGKILL)
    #expect(try device.classes(Self.app, "Documents/first.txt") == ["Documents/first.txt": "none"])
    #expect(try String(contentsOfFile: home + "/Documents/first.txt", encoding: .utf8) == first)
    // Killed once the old file was linked into the journal but before the rename: recovery
    // must see that the file still has its name and leave its data alone.
    let linked = try device.run(
      "protect", Self.app, "Documents/first.txt", "--class", "complete",
      environment: ["APPBOX_CRASH_AT": "protect.linked"])
    #expect(linked.status == 128 + SIGKILL)
    try expectSuccess(device.run("list"))
    #expect(try String(contentsOfFile: home + "/Documents/first.txt", encoding: .utf8) == first)
    #expect(try FileManager.default.contentsOfDirectory(atPath: device.root + "/.appbox/journal").isEmpty)

    // Killed after the rename, before the old blocks were overwritten: recovery does it.
    let renamed = try device.run(
      "protect", Self.app, "Documents/second.txt", "--class", "complete",
      environment: ["APPBOX_CRASH_AT": "protect.renamed"])
    #expect(renamed.status == 128 + SIGKILL)
    let journal = try FileManager.default.contentsOfDirectory(atPath: device.root + "/.appbox/journal")
    #expect(journal.filter { $0.hasPrefix("protect-scrub-") }.count == 1)
    #expect(try device.imageContains(second), "still there until recovery")
    try expectSuccess(device.run("list"))
    #expect(try FileManager.default.contentsOfDirectory(atPath: device.root + "/.appbox/journal").isEmpty)
    #expect(try !device.imageContains(second))
    #expect(try String(contentsOfFile: home + "/Documents/second.txt", encoding: .utf8) == second)
    #expect(try device.classes(Self.app, "Documents/second.txt") == ["Documents/second.txt": "complete"])
    for protectionClass in ["complete", "complete-unless-open", "until-first-unlock"] {
      let staging = device.root + "/.appbox/protection/" + protectionClass
      #expect(((try? FileManager.default.contentsOfDirectory(atPath: staging)) ?? []).isEmpty)
    }
    try expectSuccess(device.run("protect", Self.app, "Documents/first.txt", "--class", "complete"))
    #expect(try !device.imageContains(first))
  }
}

/// Without root: a device root on an ordinary file system (/tmp here) cannot have a passcode.
struct ProtectionWithoutEncryptionTests {
  @Test func passcodeAndProtectExit69OnAFileSystemWithoutEncryption() throws {
    let device = Device()
    try device.install("Vault-1.0/Vault.app")
    let result = try device.run("device", "passcode", "set", input: Array("1234\n".utf8))
    #expect(result.status == 69 && isOneLine(result.err) && result.err.contains("mkfs.ext4 -O encrypt"))
    #expect(try device.run("device", "lock").status == 69)
    let show = try #require(try device.json("device", "show") as? [String: Any])
    #expect(show["passcodeSet"] as? Bool == false && show["locked"] as? Bool == false)
    #expect(show["protectedDataAvailable"] as? Bool == true)
    let protect = try device.run("protect", "com.example.vault", "Documents", "--class", "complete")
    #expect(protect.status == 69)
    let listed = try device.run("protect", "com.example.vault", "Documents")
    #expect(listed.status == 0)
  }
}
