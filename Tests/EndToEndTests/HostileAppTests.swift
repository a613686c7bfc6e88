import AppboxCore
import AppboxPlist
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// The sandbox against a hostile app (Tests/HostileApp), the way an attacker would run it:
/// as root and as an unprivileged user. Every attempt must be refused, and the host must
/// show afterwards that nothing changed.
struct HostileAppTests {
  /// The app runs as its own uid; as root, its data is that uid's and everything else root's.
  @Test(arguments: Privilege.testable)
  func theAppRunsAsItsOwnUser(_ privilege: Privilege) throws {
    let device = try HostileDevice(privilege)
    let id = try device.installHostile()
    let report = try device.attack(["id"])
    let uid = try #require(report["uid"].flatMap(UInt32.init))
    #expect((0x7000_0000...0x70FF_FFFF).contains(uid))
    #expect(report["gid"] == String(uid) && report["euid"] == String(uid))
    var st = stat()
    let home = device.home(id)
    #expect(stat(home + "/Documents", &st) == 0)
    #expect(st.st_uid == (privilege == .root ? uid : (device.asNobody ? HostileDevice.nobody : geteuid())))
    if privilege == .root {
      for path in [home, home + "/Hostile.app", home + "/Hostile.app/hostile", device.root + "/registry.db"] {
        #expect(stat(path, &st) == 0 && st.st_uid == 0, "\(path) is not root's")
      }
      #expect(stat(home, &st) == 0 && st.st_mode & 0o777 == 0o700)
    }
    // The uid comes back with a reinstall.
    #expect(try device.appbox(["uninstall", "com.example.hostile"]).status == 0)
    try device.installHostile()
    #expect(try device.attack(["id"])["uid"] == String(uid))
  }

  /// Restore (reinstalling), import, update and revert hand the data to the app's uid, which
  /// they keep; the app can go on writing its data. Unprivileged, the data stays the caller's.
  @Test(arguments: Privilege.testable)
  func dataFollowsTheAppsUserThroughRestoreImportUpdateAndRevert(_ privilege: Privilege) throws {
    let device = try HostileDevice(privilege)
    var id = try device.installHostile()
    let uid = try #require(try device.attack(["id"])["uid"].flatMap(UInt32.init))
    let owner = privilege == .root ? uid : (device.asNobody ? HostileDevice.nobody : geteuid())
    func expectOwned(_ step: String) throws {
      let home = device.home(id)
      for path in [
        "Documents", "Documents/a", "Library", "Library/Preferences",
        "Library/Preferences/com.example.hostile.plist", "tmp",
      ] {
        var st = stat()
        #expect(
          lstat(home + "/" + path, &st) == 0 && st.st_uid == owner && st.st_gid == owner, "\(step): \(path)")
      }
      #expect(try device.attack(["id"])["uid"] == String(uid), "\(step)")
      let write = try device.attack(["write", device.jailHome(id) + "/Documents/a"])
      #expect(write["write:" + device.jailHome(id) + "/Documents/a"] == "ok", "\(step)")
    }
    #expect(
      try device.attack(["write", device.jailHome(id) + "/Documents/a"]).values.allSatisfy { $0 == "ok" })
    #expect(try device.appbox(["defaults", "com.example.hostile", "write", "k", "v"]).status == 0)
    try expectOwned("install")

    #expect(try device.appbox(["backup", "com.example.hostile"]).status == 0)
    #expect(try device.appbox(["uninstall", "com.example.hostile"]).status == 0)
    #expect(try device.appbox(["restore", "com.example.hostile", "--snapshot", "latest"]).status == 0)
    id = try #require(
      try device.appbox(["path", "com.example.hostile"]).out.split(separator: "/").last.map {
        String($0.dropLast())
      })
    try expectOwned("restore")

    let archive = device.dir.url("outside/data.tar")
    if device.asNobody { chown(device.dir.url("outside"), HostileDevice.nobody, HostileDevice.nobody) }
    #expect(try device.appbox(["export", "com.example.hostile", archive]).status == 0)
    let imported = try device.appbox(["import", "com.example.hostile", archive])
    #expect(imported.status == 0, "\(imported.err)")
    try expectOwned("import")

    let update = try device.appbox([
      "--json", "update", "com.example.hostile", device.dir.url("bundles/com.example.hostile/Hostile.app"),
      "--allow-downgrade",
    ])
    #expect(update.status == 0, "\(update.err)")
    id =
      try #require(try JSONSerialization.jsonObject(with: Data(update.stdout)) as? [String: Any])[
        "newContainerID"]
      as? String ?? ""
    try expectOwned("update")

    let revert = try device.appbox(["--json", "revert", "com.example.hostile"])
    #expect(revert.status == 0, "\(revert.err)")
    id =
      try #require(try JSONSerialization.jsonObject(with: Data(revert.stdout)) as? [String: Any])[
        "newContainerID"]
      as? String ?? ""
    try expectOwned("revert")
  }

  /// TIOCSTI cannot type into the user's terminal: not through /dev/tty (no controlling
  /// terminal), not through descriptors 0-2 (seccomp), not with high bits set, not even on a
  /// pty the app makes its own. The control shows the same attack succeeds unconfined.
  @Test(arguments: Privilege.testable)
  func terminalInjectionIsRefused(_ privilege: Privilege) throws {
    let device = try HostileDevice(privilege)
    let id = try device.installHostile()
    let (executable, arguments) = device.command(
      [
        device.appboxPath, "--root", device.root, "launch", "com.example.hostile", "--",
        "terminal",
      ])
    let run = try runOnTerminal([executable] + arguments, raw: true, environment: device.environment)
    #expect(run.status == 0, "\(run.output)")
    let report = parseReport(run.output)
    for fd in 0...2 {
      #expect(report["tiocsti-fd\(fd)"] == "EPERM", "\(run.output)")
      #expect(report["tiocsti-highbits-fd\(fd)"] == "EPERM")
      #expect(report["tioclinux-fd\(fd)"] == "EPERM")
    }
    #expect(report["open-dev-tty"] == "ENXIO")
    #expect(report["has-controlling-terminal"] == "no")
    #expect(run.pending == 0, "the app typed into the terminal")
    #expect(try device.attack(["own-pty"])["tiocsti-own-pty"] == "EPERM")

    // The control: the same program unconfined, on the same kind of terminal, does inject
    // (where the kernel still allows TIOCSTI at all).
    let legacy = try? String(contentsOfFile: "/proc/sys/dev/tty/legacy_tiocsti", encoding: .utf8)
    if legacy?.hasPrefix("1") == true {
      let unconfined = try runOnTerminal(
        [device.home(id) + "/Hostile.app/hostile", "terminal"], raw: true, environment: [:])
      #expect(parseReport(unconfined.output)["tiocsti-fd0"] == "ok")
      #expect((unconfined.pending ?? 0) > 0)
    }
  }

  /// Interactive use still works: a shell in the jail reads commands from the terminal.
  @Test(arguments: Privilege.testable)
  func aShellInTheJailReadsFromTheTerminal(_ privilege: Privilege) throws {
    let device = try HostileDevice(privilege)
    try device.installHostile()
    let (executable, arguments) = device.command(
      [device.appboxPath, "--root", device.root, "run", "com.example.hostile", "--", "/bin/sh"])
    let run = try runOnTerminal(
      [executable] + arguments, input: "echo interactive-$((40+2)) $(id -u)\nexit 7\n", raw: false,
      environment: device.environment)
    #expect(run.status == 7, "\(run.output)")
    #expect(run.output.contains("interactive-42 "), "\(run.output)")
  }

  /// chmod, chown, utime and setxattr: on system files, the bundle, the device key, the
  /// registry, another app's data and a file outside every home. All refused, and the host
  /// shows nothing changed (the bundle's seal still holds).
  @Test(arguments: Privilege.testable)
  func metadataChangesOutsideTheAppsDataAreRefused(_ privilege: Privilege) throws {
    let device = try HostileDevice(privilege)
    let id = try device.installHostile()
    let notes = try device.install(fixturePath("bundles/Notes-1.0/Notes.app"))
    #expect(
      try device.appbox([
        "keychain", "com.example.hostile", "add", "--service", "s", "--account", "a", "--data", "x",
      ])
      .status == 0)
    let outside = try device.dir.write("outside/file.txt", "outside", mode: 0o644)
    let key = device.root + "/Keychains/device.key"
    let registry = device.root + "/registry.db"
    let otherDocuments = device.home(notes) + "/Documents"
    let bundleExecutable = device.home(id) + "/Hostile.app/hostile"
    let watched = [
      key, registry, otherDocuments, outside, bundleExecutable, device.home(id) + "/Hostile.app",
    ]
    let before = watched.map(metadata)
    let targets = [
      "/etc/passwd", "/usr/bin/true", device.jailHome(id) + "/Hostile.app/hostile",
      device.jailHome(id) + "/Hostile.app",
      device.jailHome(id), key, registry, otherDocuments, outside, device.jailHome(notes) + "/Documents",
    ]
    let report = try device.attack(["metadata"] + targets)
    for target in targets {
      for operation in ["chmod", "chown", "utime", "setxattr"] {
        let result = report[operation + ":" + target]
        #expect(result != nil && result != "ok", "\(operation) \(target): \(result ?? "no report")")
      }
    }
    #expect(watched.map(metadata) == before)
    #expect(metadata(key).hasPrefix("100600"))
    #expect(!isExcluded(otherDocuments))
    #expect(try device.appbox(["launch", "com.example.hostile", "--", "id"]).status == 0)  // the seal holds
  }

  /// Pathname sockets of the host and of another app cannot be reached; abstract sockets
  /// outside the app's Landlock domain neither. The controls connect.
  @Test(arguments: Privilege.testable)
  func socketsOutsideTheJailCannotBeReached(_ privilege: Privilege) throws {
    let device = try HostileDevice(privilege)
    try device.installHostile()
    let other = try device.installHostile("com.example.hostile2")
    let hostPath = device.dir.url("outside/host.sock")
    let host = try HostSocket(path: hostPath)
    let abstractName = "appbox-test-\(UUID().uuidString)"
    let abstract = try HostSocket(abstract: abstractName)
    defer { withExtendedLifetime((host, abstract)) {} }
    #expect(hostCanConnect(path: hostPath) && hostCanConnect(abstract: abstractName))

    // Another app listens on a socket in its tmp.
    let listen = device.command([
      device.appboxPath, "--root", device.root, "launch", "com.example.hostile2", "--",
      "listen",
      device.jailHome(other) + "/tmp/app.sock", "20",
    ])
    let listener = try startProcess(listen.executable, listen.arguments)
    defer {
      kill(listener.processIdentifier, SIGTERM)
      listener.waitUntilExit()
    }
    #expect(eventually { exists(device.home(other) + "/tmp/app.sock") })
    #expect(
      try device.attack(["connect", device.jailHome(other) + "/tmp/app.sock"], app: "com.example.hostile2")[
        "connect:" + device.jailHome(other) + "/tmp/app.sock"] == "ok")  // the control

    let targets = [hostPath, device.home(other) + "/tmp/app.sock", device.jailHome(other) + "/tmp/app.sock"]
    let report = try device.attack(["connect"] + targets)
    for target in targets { #expect(report["connect:" + target] == "ENOENT", "\(target): \(report)") }
    // Abstract sockets belong to a network namespace: the app's own has none of the host's.
    // Sharing the host's, Landlock still scopes them (ABI 6).
    if Landlock.abiVersion >= 6 {
      let shared = try device.attack(["connect-abstract", abstractName], options: ["--network", "host"])
      #expect(shared["connect-abstract"] == "EPERM")
    }
    for options in [[], ["--network", "none"]] {
      let isolated = try device.attack(["connect-abstract", abstractName], options: options)
      #expect(isolated["connect-abstract"] == "ECONNREFUSED", "\(options)")
    }
  }

  /// Root-only files: the jail has no /etc/shadow, no /root, no host accounts.
  @Test(arguments: Privilege.testable)
  func hostSecretsAreNotInTheJail(_ privilege: Privilege) throws {
    let device = try HostileDevice(privilege)
    let id = try device.installHostile()
    let report = try device.attack([
      "read", "/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/root/.bash_history", "/proc/1/environ",
      device.root + "/Keychains/device.key", device.home(id) + "/Documents",
    ])
    for (label, result) in report where label.hasPrefix("read:") { #expect(result != "ok", "\(label)") }
    #expect(report["read:/etc/shadow"] == "ENOENT")
    let passwd = try device.attack(["read", "/etc/passwd"])
    #expect(passwd["read:/etc/passwd"] == "ok")
  }

  /// A daemonised child dies with the app: after `launch` returns nothing of the app runs,
  /// so uninstall goes through at once and the daemon's heartbeat has stopped.
  @Test(arguments: Privilege.testable)
  func aDaemonDoesNotOutliveTheApp(_ privilege: Privilege) throws {
    let device = try HostileDevice(privilege)
    let id = try device.installHostile()
    let beat = device.home(id) + "/Documents/beat"
    #expect(try device.attack(["daemon", device.jailHome(id) + "/Documents/beat"])["daemonised"] == "ok")
    let first = contents(beat)
    usleep(300_000)
    #expect(contents(beat) == first, "the daemon still runs")
    let uninstall = try device.appbox(["uninstall", "com.example.hostile"])
    #expect(uninstall.status == 0, "\(uninstall.err)")
  }

  /// Descriptors appbox's caller leaks (and appbox's own, like the running lock) never
  /// reach the app: it has 0, 1, 2 and the keychain broker's door (3) only.
  @Test(arguments: Privilege.testable)
  func noDescriptorIsInherited(_ privilege: Privilege) throws {
    let device = try HostileDevice(privilege)
    try device.installHostile()
    let leak = try device.dir.write("outside/leak", "", mode: 0o666)
    let (executable, arguments) = device.command([
      device.appboxPath, "--root", device.root, "launch", "com.example.hostile", "--", "fds",
    ])
    let result = try runProcess(
      "/bin/sh", ["-c", "exec 7>>\"$0\"; exec \"$@\"", leak, executable] + arguments,
      environment: device.environment)
    #expect(result.status == 0, "\(result.err)")
    // Writing a byte to the door sends a message without a descriptor, which the broker ignores.
    #expect(result.out == "write-fd3 ok\nfds-listed ok\n", "\(result.out)")
    #expect(contents(leak) == [])
  }

  /// A fork bomb stops at the app's process limit.
  @Test(arguments: Privilege.testable)
  func aForkBombIsBounded(_ privilege: Privilege) throws {
    let device = try HostileDevice(privilege)
    try device.installHostile()
    let report = try device.attack(["forkbomb"])
    let parts = try #require(report["forks"]).split(separator: " ")
    #expect(parts.count == 2 && parts[1] == "EAGAIN", "\(report)")
    #expect((Int(parts[0]) ?? .max) <= 256)
  }

  /// Code the app writes does not run: not executed directly, not through ld.so (the data
  /// is mounted noexec), from Documents or from /tmp.
  @Test(arguments: Privilege.testable)
  func writtenCodeDoesNotRun(_ privilege: Privilege) throws {
    let device = try HostileDevice(privilege)
    let id = try device.installHostile()
    for directory in [device.jailHome(id) + "/Documents", "/tmp", device.jailHome(id) + "/Library"] {
      let report = try device.attack(["exec-written", directory])
      #expect(report["chmod-written"] == "ok", "\(directory)")
      #expect(report["exec-written"] == "EACCES", "\(directory): \(report)")
      #expect(report["ldso-written"] == "refused", "\(directory): \(report)")
    }
  }

  /// ptrace, signals outside the app, and the kernel interfaces seccomp denies.
  @Test(arguments: Privilege.testable)
  func processAndKernelAttacksAreRefused(_ privilege: Privilege) throws {
    let device = try HostileDevice(privilege)
    try device.installHostile()
    let processes = try device.attack(["processes"])
    for label in ["ptrace-attach-child", "ptrace-seize-child", "ptrace-attach-init", "kill-init"] {
      #expect(processes[label] == "EPERM", "\(label): \(processes)")
    }
    let calls = try device.attack(["syscalls"])
    for label in [
      "unshare-user", "unshare-mount", "clone-newuser", "mount", "keyctl", "add_key", "bpf", "userfaultfd",
      "perf_event_open", "init_module", "io_uring_setup", "chroot",
    ] {
      #expect(calls[label] == "EPERM", "\(label): \(calls)")
    }
    #expect(calls["clone3"] == "ENOSYS")
  }

  /// The device root however it is spelled (doubled slashes, ".", a symlink): the jail
  /// shows none of it, and appbox reports it canonical.
  @Test(arguments: Privilege.testable)
  func aNonCanonicalDeviceRootExposesNothing(_ privilege: Privilege) throws {
    let device = try HostileDevice(privilege)
    try device.installHostile()
    #expect(
      try device.appbox([
        "keychain", "com.example.hostile", "add", "--service", "s", "--account", "a", "--data", "x",
      ])
      .status == 0)
    try device.dir.symlink("device/link", to: device.dir.url("device/root"))
    let canonical = device.root
    for spelling in [
      device.dir.path + "//device/root", device.dir.path + "/device/./root",
      device.dir.path + "/device/root/.",
      device.dir.path + "/device/link",
    ] {
      let (executable, arguments) = device.command([
        device.appboxPath, "--root", spelling, "launch", "com.example.hostile", "--", "read",
        spelling + "/Keychains/device.key", canonical + "/Keychains/device.key", spelling + "/registry.db",
      ])
      let result = try runProcess(executable, arguments, environment: device.environment)
      #expect(result.status == 0, "\(spelling): \(result.err)")
      for (label, value) in parseReport(result.out) {
        #expect(value == "ENOENT", "\(spelling): \(label) \(value)")
      }
      let (showExecutable, showArguments) = device.command([
        device.appboxPath, "--root", spelling, "--json", "device", "show",
      ])
      let show = try runProcess(showExecutable, showArguments, environment: device.environment)
      let object = try JSONSerialization.jsonObject(with: Data(show.stdout)) as? [String: Any]
      #expect(object?["root"] as? String == canonical, "\(spelling)")
    }
  }

  /// The same under /opt, in a private mount namespace (as root): a device root inside a
  /// system directory, which the old Landlock-only sandbox exposed.
  @Test(.enabled(if: geteuid() == 0))
  func aDeviceRootUnderOptExposesNothing() throws {
    let device = try HostileDevice(.root)
    let bundle = device.dir.url("bundles/hostile")
    try device.dir.write(
      "bundles/hostile/Hostile.app/Info.plist",
      PropertyList.dictionary([
        "CFBundleIdentifier": .string("com.example.hostile"), "CFBundleExecutable": .string("hostile"),
        "CFBundleVersion": .string("1.0"),
      ]).xmlString)
    try device.dir.write(
      "bundles/hostile/Hostile.app/hostile",
      bytes: Array(try Data(contentsOf: URL(fileURLWithPath: productsDirectory + "/appbox-hostile"))),
      mode: 0o755)
    // /opt is replaced by a tmpfs in the private namespace (the toolchain moved back in place).
    let script = """
      set -e
      mkdir "$T/swift"; mount --bind /opt/swift "$T/swift"
      mount -t tmpfs tmpfs /opt
      mkdir /opt/swift; mount --move "$T/swift" /opt/swift
      mkdir -p /opt/x/r; ln -s /opt/x /opt/link
      "$A" --root /opt//x/r install "$B/Hostile.app" >/dev/null
      "$A" --root /opt/x/./r keychain com.example.hostile add --service s --account a --data x >/dev/null
      for root in /opt//x/r /opt/x/./r /opt/x/r/. /opt/link/r; do
        "$A" --root "$root" launch com.example.hostile -- read /opt/x/r/Keychains/device.key \
          /opt//x/r/Keychains/device.key /opt/link/r/registry.db /opt/x/r/ApplicationRoot /opt/swift
      done
      """
    let result = try runProcess(
      "/usr/bin/unshare", ["--mount", "--propagation", "private", "/bin/sh", "-c", script],
      environment: device.environment.merging([
        "T": device.dir.path, "A": productsDirectory + "/appbox", "B": bundle,
      ]) {
        $1
      })
    #expect(result.status == 0, "\(result.err)")
    let lines = result.out.split(separator: "\n")
    #expect(lines.count == 20, "\(result.out)")
    for line in lines { #expect(line.hasSuffix(" ENOENT"), "\(line)") }
  }

  /// The seal covers modes: a setuid bit or a mode change on the host breaks it.
  @Test func aModeChangeBreaksTheSeal() throws {
    let device = try HostileDevice(Privilege.testable[0])
    let id = try device.installHostile()
    let executable = device.home(id) + "/Hostile.app/hostile"
    #expect(chmod(executable, 0o4755) == 0)
    let setuid = try device.appbox(["launch", "com.example.hostile", "--", "id"])
    #expect(setuid.status == 65)
    #expect(setuid.err.contains("'hostile' changed mode (sealed 755, now 4755)"), "\(setuid.err)")
    #expect(chmod(executable, 0o755) == 0)
    #expect(try device.appbox(["launch", "com.example.hostile", "--", "id"]).status == 0)
    #expect(chmod(device.home(id) + "/Hostile.app/Info.plist", 0o666) == 0)
    let writable = try device.appbox(["launch", "com.example.hostile", "--", "id"])
    #expect(writable.status == 65 && writable.err.contains("'Info.plist' changed mode"), "\(writable.err)")
  }
}

/// Mode, owner, modification time and extended attributes of `path` (not followed), to
/// compare before and after (no time for registry.db, which SQLite checkpoints).
private func metadata(_ path: String) -> String {
  var st = stat()
  guard lstat(path, &st) == 0 else { return "missing" }
  let fd = try? FileDescriptor.open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK)
  let names = (try? fd?.extendedAttributeNames()) ?? []
  fd?.close()
  let time = path.hasSuffix("registry.db") ? "" : "\(st.st_mtim.tv_sec).\(st.st_mtim.tv_nsec)"
  return String(st.st_mode, radix: 8) + " \(st.st_uid):\(st.st_gid) \(time) "
    + names.sorted().joined(separator: ",")
}
