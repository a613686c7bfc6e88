import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// `appbox run`: real processes confined by the real kernel. Every denial is checked on
/// disk afterwards, not only by the exit status. (The hostile-app suite, HostileAppTests,
/// covers the attacks beyond files.)
struct SandboxRunTests {
  /// A device with Notes (file sharing on) and Journal installed.
  func twoApps() throws -> (device: Device, notes: String, journal: String) {
    let device = Device()
    let notes = try device.install("Notes-1.0/Notes.app")
    let journal = try device.install("Journal-1.0/Journal.app")
    return (device, device.home(notes), device.home(journal))
  }

  @Test func writingInDocumentsLibraryAndTmpWorks() throws {
    let (device, notes, _) = try twoApps()
    let result = try device.sh(
      "com.example.notes",
      "echo doc > Documents/d.txt && echo tmp > \"$TMPDIR/t.txt\" && mkdir Library/Caches/c && "
        + "echo lib > Library/Caches/c/l.txt && mv Documents/d.txt Documents/moved.txt && echo done")
    #expect(result.status == 0, "\(result.err)")
    #expect(result.out == "done\n")
    #expect(contents(notes + "/Documents/moved.txt") == Array("doc\n".utf8))
    #expect(!exists(notes + "/Documents/d.txt"))
    #expect(contents(notes + "/tmp/t.txt") == Array("tmp\n".utf8))
    #expect(contents(notes + "/Library/Caches/c/l.txt") == Array("lib\n".utf8))
  }

  @Test func writingOutsideTheHomeIntoTheBundleOrAnotherHomeIsDenied() throws {
    let (device, notes, journal) = try twoApps()
    try device.dir.makeDirectory("outside")
    let outside = device.dir.url("outside")
    let bundleBefore = treeSnapshot(notes + "/Notes.app")
    let executable = contents(notes + "/Notes.app/Notes")
    let attempts: [(script: String, created: String)] = [
      ("echo x > '\(outside)/new.txt'", outside + "/new.txt"),
      ("echo x > \"$HOME/in-home.txt\"", notes + "/in-home.txt"),
      ("mkdir \"$HOME/folder\"", notes + "/folder"),
      ("echo x > Notes.app/new", notes + "/Notes.app/new"),
      ("echo x >> Notes.app/Notes", ""),
      ("rm Notes.app/Info.plist", ""),
      ("echo x > '\(journal)/Documents/planted.txt'", journal + "/Documents/planted.txt"),
      ("mkdir '\(device.root)/evil'", device.root + "/evil"),
      ("echo x > '\(device.root)/Keychains/evil'", device.root + "/Keychains/evil"),
    ]
    // Each fails: the device's paths do not exist in the jail, the home and the bundle are
    // read-only mounts (Landlock would refuse them too).
    for attempt in attempts {
      let result = try device.sh("com.example.notes", attempt.script)
      #expect(result.status != 0, "\(attempt.script) succeeded")
      let refused = [
        "Read-only file system", "No such file or directory", "Directory nonexistent", "Permission denied",
      ]
      #expect(refused.contains { result.err.contains($0) }, "\(attempt.script): \(result.err)")
      if !attempt.created.isEmpty { #expect(!exists(attempt.created), "\(attempt.script) created a file") }
    }
    // /tmp is the app's own tmp.
    let name = "appbox-escape-\(UUID().uuidString)"
    #expect(try device.sh("com.example.notes", "echo x > /tmp/\(name)").status == 0)
    #expect(contents(notes + "/tmp/" + name) == Array("x\n".utf8))
    #expect(treeSnapshot(notes + "/Notes.app") == bundleBefore)
    #expect(contents(notes + "/Notes.app/Notes") == executable)
    #expect(try FileManager.default.contentsOfDirectory(atPath: outside).isEmpty)
    #expect(try FileManager.default.contentsOfDirectory(atPath: journal + "/Documents").isEmpty)
    let tmpEscapes = try FileManager.default.contentsOfDirectory(atPath: "/tmp").filter {
      $0.hasPrefix("appbox-escape-")
    }
    #expect(tmpEscapes.isEmpty)
  }

  @Test func readingOtherHomesTheRegistryAndTheKeychainIsDenied() throws {
    let (device, notes, journal) = try twoApps()
    try Data("JOURNAL-SECRET\n".utf8).write(to: URL(fileURLWithPath: journal + "/Documents/secret.txt"))
    try Data("KEYCHAIN-SECRET\n".utf8).write(to: URL(fileURLWithPath: device.root + "/Keychains/keychain.db"))
    try Data("own\n".utf8).write(to: URL(fileURLWithPath: notes + "/Documents/own.txt"))
    // What the app may read: its own files, its home's listing and its bundle.
    let allowed = try device.sh(
      "com.example.notes", "cat Documents/own.txt && ls \"$HOME\" && head -c 5 Notes.app/Info.plist")
    #expect(allowed.status == 0, "\(allowed.err)")
    #expect(allowed.out.hasPrefix("own\nDocuments\nLibrary\nNotes.app\ntmp\n<?xml"))
    // None of these paths exists in the jail.
    for script in [
      "cat '\(journal)/Documents/secret.txt'", "ls '\(journal)/Documents'",
      "cat '\(device.root)/registry.db'",
      "cat ../../registry.db", "ls '\(device.root)/Keychains'", "cat '\(device.root)/Keychains/keychain.db'",
      "ls '\(device.root)/ApplicationRoot'", "ls '\(device.root)/.appbox'",
      "cat '\(device.root)/device.plist'",
      "ls /root", "ls /home",
    ] {
      let result = try device.sh("com.example.notes", script)
      #expect(result.status != 0, "\(script) succeeded: \(result.out)")
      #expect(result.err.contains("No such file or directory"), "\(script): \(result.err)")
      #expect(
        !result.out.contains("SECRET") && !result.out.contains("SQLite"), "\(script) read \(result.out)")
    }
  }

  @Test func environmentAndWorkingDirectoryAreTheHomes() throws {
    let (device, notes, _) = try twoApps()
    let result = try device.run(
      "run", "com.example.notes", "--", "/usr/bin/env",
      environment: [
        "APPBOX_ROOT": device.root, "SECRET_TOKEN": "x", "LANG": "C.UTF-8", "LC_TIME": "C",
        "PATH": "/usr/bin:/bin", "TZ": "UTC",
      ])
    #expect(result.status == 0, "\(result.err)")
    let inside = "/var/mobile/Applications/" + splitPath(notes).name  // the home, as the jail shows it
    var variables: [String: String] = [:]
    for line in result.out.split(separator: "\n") {
      let parts = line.split(separator: "=", maxSplits: 1).map(String.init)
      variables[parts[0]] = parts.count > 1 ? parts[1] : ""
    }
    #expect(variables["HOME"] == inside)
    #expect(variables["CFFIXED_USER_HOME"] == inside)
    #expect(variables["TMPDIR"] == inside + "/tmp")
    #expect(variables["PATH"] == "/run/appbox/bin:/usr/bin:/bin")  // appbox-secitem first
    #expect(variables["APPBOX_SECITEM_FD"] == "3")
    #expect(variables["LANG"] == "C.UTF-8" && variables["LC_TIME"] == "C" && variables["TZ"] == "UTC")
    #expect(variables["APPBOX_PROTECTED_DATA_AVAILABLE"] == "1")
    // Notes is a member of an app group: its container is named too.
    #expect(
      variables["APPBOX_APP_GROUP_CONTAINERS"]?.hasPrefix("group.com.example.shared=/var/mobile/") == true)
    let expected: Set<String> = [
      "HOME", "CFFIXED_USER_HOME", "TMPDIR", "PATH", "LANG", "LC_TIME", "TZ",
      "APPBOX_PROTECTED_DATA_AVAILABLE", "APPBOX_APP_GROUP_CONTAINERS", "APPBOX_SECITEM_FD",
    ]
    // TERM, LANGUAGE and other LC_* pass through too when the test runner has them.
    let names = Set(variables.keys).filter {
      !["TERM", "LANGUAGE"].contains($0) && ($0 == "LC_TIME" || !$0.hasPrefix("LC_"))
    }
    #expect(names == expected, "\(variables.keys.sorted())")
    let cwd = try device.sh("com.example.notes", "pwd -P")
    #expect(cwd.out == inside + "\n")
  }

  @Test func exitStatusPassesThroughIncludingSignals() throws {
    let (device, notes, _) = try twoApps()
    #expect(try device.sh("com.example.notes", "exit 3").status == 3)
    #expect(try device.sh("com.example.notes", "kill -TERM $$").status == 128 + SIGTERM)
    #expect(try device.sh("com.example.notes", "kill -KILL $$").status == 128 + SIGKILL)
    let missing = try device.run("run", "com.example.notes", "--", "no-such-command-anywhere")
    #expect(missing.status == 127)
    #expect(
      missing.err == "appbox-sandbox: cannot run 'no-such-command-anywhere': no such file or directory\n")
    // What the app writes, it may read but never execute.
    try Data("#!/bin/sh\necho ran\n".utf8).write(to: URL(fileURLWithPath: notes + "/Documents/tool.sh"))
    #expect(chmod(notes + "/Documents/tool.sh", 0o755) == 0)
    let exec = try device.run("run", "com.example.notes", "--", "Documents/tool.sh")
    #expect(exec.status == 126)
    #expect(exec.err.contains("permission denied"))
    #expect(try device.run("run", "com.example.notes", "--", "/bin/sh", "Documents/tool.sh").out == "ran\n")
  }

  @Test func theAppRunsWithoutCapabilitiesOrDeviceNodes() throws {
    let (device, notes, _) = try twoApps()
    let status = try device.sh(
      "com.example.notes",
      "while read k v; do case $k in CapEff:|CapBnd:|NoNewPrivs:) echo $k $v;; esac; done < /proc/$$/status")
    #expect(
      status.out == "CapEff: 0000000000000000\nCapBnd: 0000000000000000\nNoNewPrivs: 1\n", "\(status.err)")
    let node = try device.sh("com.example.notes", "mknod Documents/disk b 8 0")
    #expect(node.status != 0)
    #expect(!exists(notes + "/Documents/disk"))
  }

  @Test func aKernelWithoutLandlockIsRefusedUnlessAllowedButNeverLeavesTheJail() throws {
    let (device, notes, _) = try twoApps()
    let noLandlock = ["APPBOX_ASSUME_NO_LANDLOCK": "1"]
    let refused = try device.run(
      "run", "com.example.notes", "--", "/bin/sh", "-c", "echo ran > Documents/ran", environment: noLandlock)
    #expect(refused.status == 69)
    #expect(refused.err.hasPrefix("Error: Cannot confine com.example.notes: this kernel has no Landlock"))
    #expect(refused.err.split(separator: "\n").count == 1)
    #expect(!exists(notes + "/Documents/ran"))
    let allowed = try device.run(
      "run", "com.example.notes", "--allow-unconfined", "--", "/bin/sh", "-c", "echo ran > Documents/ran",
      environment: noLandlock)
    #expect(allowed.status == 0, "\(allowed.err)")
    #expect(allowed.err.contains("warning") && allowed.err.contains("WITHOUT LANDLOCK"))
    #expect(contents(notes + "/Documents/ran") == Array("ran\n".utf8))
    // Still in the jail: the device does not exist there, the bundle stays read-only.
    let jailed = try device.run(
      "run", "com.example.notes", "--allow-unconfined", "--", "/bin/sh", "-c",
      "cat '\(device.root)/registry.db' || echo x > Notes.app/Notes || echo refused", environment: noLandlock)
    #expect(jailed.out == "refused\n", "\(jailed.err)")
    #expect(try device.run("launch", "com.example.notes", environment: noLandlock).status == 69)
  }

  /// No bubblewrap, or no user namespaces: exit 69, one line naming the missing piece, and
  /// the command never runs (there is no weaker sandbox to fall back to).
  @Test func aMissingBubblewrapOrUserNamespacesIsUnavailable() throws {
    let (device, notes, _) = try twoApps()
    let noBwrap = try device.run(
      "run", "com.example.notes", "--", "/bin/sh", "-c", "echo ran > Documents/ran",
      environment: ["PATH": "/nonexistent"])
    #expect(noBwrap.status == 69)
    #expect(
      noBwrap.err
        == "Error: Cannot confine com.example.notes: bubblewrap ('bwrap') is not installed (not found in "
        + "PATH=/nonexistent); install the 'bubblewrap' package\n")
    #expect(try device.run("launch", "com.example.notes", environment: ["PATH": "/nonexistent"]).status == 69)
    #expect(!exists(notes + "/Documents/ran"))

    // A user namespace whose user.max_user_namespaces is 0: none can be made inside it.
    let script = "echo 0 > /proc/sys/user/max_user_namespaces && exec \"$@\""
    let disabled = try runProcess(
      "/usr/bin/unshare",
      [
        "--user", "--map-root-user", "/bin/sh", "-c", script, "sh", productsDirectory + "/appbox", "--root",
        device.root,
        "run", "com.example.notes", "--", "/bin/sh", "-c", "echo ran > Documents/ran",
      ])
    #expect(disabled.status == 69, "\(disabled.err)")
    #expect(
      disabled.err
        == "Error: Cannot confine com.example.notes: user namespaces are disabled (user.max_user_namespaces = 0); "
        + "bubblewrap needs them\n")
    #expect(!exists(notes + "/Documents/ran"))
  }

  @Test func usageAndUnknownApps() throws {
    let (device, _, _) = try twoApps()
    #expect(try device.run("run", "com.example.notes").status == 64)
    #expect(try device.run("run", "com.example.notes", "/bin/true").status == 64)
    let unknown = try device.run("run", "com.nope", "--", "/bin/true")
    #expect(unknown.status == 66)
    #expect(try device.run("launch", "com.nope").status == 66)
  }
}
