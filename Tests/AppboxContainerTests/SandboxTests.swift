import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

@testable import AppboxContainer

/// A device root in a temp directory with Notes installed, driven in-process.
final class TestDevice: @unchecked Sendable {
  let dir = TemporaryDirectory("container")
  let root: DeviceRoot
  let app: AppRecord

  init(_ fixture: String = "Notes-1.0/Notes.app") throws {
    root = DeviceRoot(path: dir.url("root"))
    let session = try DeviceSession.open(root: root, mutating: true, creating: true)
    app = try session.install(bundleAt: fixturePath("bundles/" + fixture)).app
  }

  var home: Home { Home(root: root, app: app) }

  func session(
    mutating: Bool = false, environment: [String: String] = [:], lockWait: LockWait = .none
  ) throws -> DeviceSession {
    try DeviceSession.open(root: root, mutating: mutating, environment: environment, lockWait: lockWait)
  }
}

struct SandboxTests {
  @Test func theJailShowsTheHomesOwnDirectoriesAndNothingElseOfTheDevice() throws {
    let device = try TestDevice()
    let home = device.home
    let jail = Jail(home: home)
    let inside = "/var/mobile/Applications/" + device.app.containerID
    #expect(jail.home == inside)
    #expect(jail.uid == device.app.uid && AppUser.range.contains(jail.uid))
    #expect(
      jail.mounts == [
        JailMount(source: home.bundlePath, destination: inside + "/Notes.app", access: .readExecute),
        JailMount(source: home.path + "/Documents", destination: inside + "/Documents", access: .readWrite),
        JailMount(source: home.path + "/Library", destination: inside + "/Library", access: .readWrite),
        JailMount(source: home.path + "/tmp", destination: inside + "/tmp", access: .readWrite),
        JailMount(source: home.path + "/tmp", destination: "/tmp", access: .readWrite),
      ])
    let command = jail.commandLine(
      helper: "/opt/x/appbox-sandbox", bubblewrap: "/usr/bin/bwrap", command: ["/bin/true"],
      options: SandboxOptions(network: .none), keptDescriptors: [9],
      descriptors: .init(status: 10, passwd: 11, group: 12), cgroup: nil, landlock: true, privileged: true)
    // Host paths appear only as staged sources of `enter`, each one of this home's.
    let split = try #require(command.firstIndex(of: "--"))
    let enter = Array(command[..<split])
    let staged = stride(from: 0, to: enter.count, by: 1).filter { enter[$0] == "--stage" }.map {
      enter[$0 + 1]
    }
    #expect(
      staged == [
        "rx:/opt/x/appbox-sandbox", "rx:" + home.bundlePath, "rw:" + home.path + "/Documents",
        "rw:" + home.path + "/Library", "rw:" + home.path + "/tmp",
      ])  // tmp, shown twice (also as /tmp), is staged once
    #expect(Array(enter.prefix(4)) == ["appbox-sandbox", "enter", "--user", "\(jail.uid):\(jail.uid)"])
    let rest = Array(command[(split + 1)...])
    #expect(rest.first == "/usr/bin/bwrap")
    for argument in rest {
      #expect(!argument.hasPrefix(device.root.path), "\(argument) names the device root")
    }
    for flag in ["--unshare-all", "--unshare-user", "--new-session", "--die-with-parent", "--remount-ro"] {
      #expect(rest.contains(flag), "\(flag)")
    }
    #expect(!rest.contains("--share-net"))  // --network none
    let pairs = Set(zip(rest, rest.dropFirst()).map { $0.0 + " " + $0.1 })
    #expect(!rest.contains("/etc/shadow") && !pairs.contains("--ro-bind /etc") && !pairs.contains("--bind /"))
    // /etc is the tree `enter` stages: the listed host files (never /etc whole, no shadow) and
    // the jail's own passwd and group, from descriptors 11 and 12; bubblewrap binds it once.
    let etc = stride(from: 0, to: enter.count, by: 1).filter { enter[$0] == "--etc" }.map { enter[$0 + 1] }
    #expect(etc == Jail.etcFiles && !etc.contains("shadow") && !etc.contains("sudoers"))
    #expect(etc.allSatisfy { !$0.contains("/") && !$0.hasPrefix(".") })
    let etcData = stride(from: 0, to: enter.count, by: 1).filter { enter[$0] == "--etc-data" }.map {
      enter[$0 + 1]
    }
    #expect(etcData == ["passwd:11", "group:12"])
    #expect(
      pairs.contains("/mnt/etc /etc") && !rest.contains("--ro-bind-try") && !rest.contains("--ro-bind-data"))
    // Landlock inside repeats the mounts: data read-write, bundle read-and-execute, home read-only.
    let confine = Array(rest[try #require(rest.firstIndex(of: "confine"))...])
    let rules = Set(zip(confine, confine.dropFirst()).map { $0.0 + " " + $0.1 })
    for (flag, path) in [
      ("--rw", inside + "/Documents"), ("--rw", inside + "/tmp"), ("--rx", inside + "/Notes.app"),
      ("--ro", inside),
      ("--keep-fd", "9"), ("--chdir", inside), ("--max-processes", "256"), ("--ro", "/etc"),
    ] {
      #expect(rules.contains(flag + " " + path), "\(flag) \(path)")
    }
    #expect(Array(confine.suffix(2)) == ["--", "/bin/true"])
    let shared = jail.bubblewrapArguments(
      staged: jail.staged(helper: "/h"), network: .host, descriptors: .init(status: 3, passwd: 4, group: 5))
    #expect(shared.contains("--share-net"))
    // Its own network: `enter` makes the namespace and says so on 13, bubblewrap keeps it, and
    // `confine` installs the network gate and sends its listener on 14 (where it says that the
    // command starts) before it execs the command.
    let own = jail.commandLine(
      helper: "/opt/x/appbox-sandbox", bubblewrap: "/usr/bin/bwrap", command: ["/bin/true"],
      options: SandboxOptions(), keptDescriptors: [],
      descriptors: .init(status: 10, passwd: 11, group: 12, start: 14, networkNamespaceReady: 13),
      cgroup: nil,
      landlock: true, privileged: true)
    let ownSplit = try #require(own.firstIndex(of: "--"))
    let ownEnter = Array(own[..<ownSplit])
    let ownRest = Array(own[(ownSplit + 1)...])
    #expect(
      Set(zip(ownEnter, ownEnter.dropFirst()).map { $0.0 + " " + $0.1 }).contains("--network-namespace 13"))
    #expect(ownRest.contains("--share-net"))
    let ownConfine = Array(ownRest[try #require(ownRest.firstIndex(of: "confine"))...])
    #expect(Set(zip(ownConfine, ownConfine.dropFirst()).map { $0.0 + " " + $0.1 }).contains("--start-fd 14"))
    #expect(ownConfine.contains("--network-gate") && !confine.contains("--network-gate"))
  }

  @Test func extraDataDirectoriesAndToolsAreMountedAndOnThePath() throws {
    let device = try TestDevice()
    var jail = Jail(home: device.home)
    jail.addDataDirectory("/srv/group", at: "/var/mobile/Containers/Shared/AppGroup/G")
    jail.addTool("/usr/local/libexec/appbox-secitem", named: "appbox-secitem")
    jail.supplementaryGroups = [1_900_000_001]
    let command = jail.commandLine(
      helper: "/h", bubblewrap: "/usr/bin/bwrap", command: ["x"], options: SandboxOptions(),
      keptDescriptors: [],
      descriptors: .init(status: 3, passwd: 4, group: 5), cgroup: "/sys/fs/cgroup/delegated/run",
      landlock: false,
      privileged: false)
    #expect(command.contains("rw:/srv/group") && command.contains("rx:/usr/local/libexec/appbox-secitem"))
    #expect(command.contains("/run/appbox/bin/appbox-secitem"))
    #expect(command.contains("--cgroup") && command.contains("--allow-no-landlock"))
    // Unprivileged, bubblewrap maps the app's uid to the caller: no --user, no --groups.
    #expect(!command.contains("--user") && !command.contains("--groups"))
    let asRoot = jail.commandLine(
      helper: "/h", bubblewrap: "/usr/bin/bwrap", command: ["x"], options: SandboxOptions(),
      keptDescriptors: [],
      descriptors: .init(status: 3, passwd: 4, group: 5), cgroup: nil, landlock: true, privileged: true)
    #expect(Array(asRoot[2..<6]) == ["--user", "\(jail.uid):\(jail.uid)", "--groups", "1900000001"])
    let environment = Sandbox.environment(for: jail, inheriting: ["PATH": "/usr/bin"])
    #expect(environment["PATH"] == "/run/appbox/bin:/usr/bin")
  }

  @Test func theEnvironmentKeepsOnlyTheListedVariables() throws {
    let device = try TestDevice()
    let jail = Jail(home: device.home)
    let environment = Sandbox.environment(
      for: jail,
      inheriting: [
        "PATH": "/bin", "LANG": "C", "LC_ALL": "C", "HOME": "/root", "APPBOX_ROOT": "/x",
        "SSH_AUTH_SOCK": "/s", "TERM": "dumb",
      ])
    #expect(
      environment == [
        "PATH": "/bin", "LANG": "C", "LC_ALL": "C", "TERM": "dumb", "HOME": jail.home,
        "CFFIXED_USER_HOME": jail.home, "TMPDIR": jail.home + "/tmp",
      ])
    #expect(Sandbox.environment(for: jail, inheriting: [:])["PATH"] == "/usr/local/bin:/usr/bin:/bin")
  }

  @Test func theJailsPasswdNamesOnlyTheAppsUser() throws {
    let device = try TestDevice()
    let jail = Jail(home: device.home)
    let lines = jail.passwd.split(separator: "\n")
    #expect(lines.count == 2)
    #expect(lines[0] == "mobile:x:\(jail.uid):\(jail.uid):com.example.notes:\(jail.home):/bin/sh")
    #expect(jail.group.hasPrefix("mobile:x:\(jail.uid):\n"))
  }

  @Test func theHelperIsFoundBesideTheExecutableOrWhereTheEnvironmentSays() throws {
    let beside = try Sandbox.helperPath(environment: [:])
    #expect(beside.hasSuffix("/appbox-sandbox") && access(beside, X_OK) == 0)
    #expect(try Sandbox.helperPath(environment: ["APPBOX_SANDBOX_HELPER": "/bin/true"]) == "/bin/true")
    do {
      _ = try Sandbox.helperPath(environment: ["APPBOX_SANDBOX_HELPER": "/nonexistent/helper"])
      Issue.record("a missing helper was accepted")
    } catch let error as ContainerError {
      #expect(error.code == .unavailable && error.kind == .unavailable)
      #expect(error.message.contains("'/nonexistent/helper'"))
    }
    #expect(Sandbox.isLandlockAvailable(environment: [:]) == (Landlock.abiVersion > 0))
    #expect(!Sandbox.isLandlockAvailable(environment: ["APPBOX_ASSUME_NO_LANDLOCK": "1"]))
  }

  @Test func bubblewrapIsLookedUpInPathAndItsAbsenceIsUnavailable() throws {
    let device = try TestDevice()
    let found = try Sandbox.bubblewrapPath(environment: ["PATH": "/nonexistent:/usr/bin"], for: device.app)
    #expect(found == "/usr/bin/bwrap")
    do {
      _ = try Sandbox.bubblewrapPath(environment: ["PATH": "/nonexistent"], for: device.app)
      Issue.record("a missing bwrap was accepted")
    } catch let error as ContainerError {
      #expect(error.kind == .unavailable)
      #expect(error.message.contains("bubblewrap ('bwrap') is not installed"))
    }
    #expect(Sandbox.userNamespacesUnavailable() == nil)  // this machine kind has them
  }

  @Test func childProcessesReportExitAndSignalStatuses() throws {
    func status(_ script: String) throws -> Int32 {
      let pid = try ChildProcess.spawn(
        "/bin/sh", arguments: ["sh", "-c", script], environment: [:], inherited: [])
      return try ChildProcess.wait(for: pid)
    }
    #expect(try status("exit 0") == 0)
    #expect(try status("exit 7") == 7)
    #expect(try status("kill -KILL $$") == 128 + SIGKILL)
    #expect(try status("kill -SEGV $$") == 128 + SIGSEGV)
    // Signals are at their defaults in the child, whatever this process does with SIGPIPE.
    #expect(try status("kill -PIPE $$") == 128 + SIGPIPE)
    #expect(throws: SystemError.self) {
      _ = try ChildProcess.spawn("/nonexistent", arguments: ["x"], environment: [:], inherited: [])
    }
  }

  @Test func descriptorsLandAtTheirNumbersEvenWhenSourcesAndTargetsCross() throws {
    // Two pipes whose write ends go to each other's numbers: a naive dup2 order would
    // overwrite one source before copying it.
    let first = try FileDescriptor.pipe()
    let second = try FileDescriptor.pipe()
    defer { [first.read, second.read].forEach { $0.close() } }
    let pid = try ChildProcess.spawn(
      "/bin/sh",
      arguments: [
        "sh", "-c",
        "echo one > /proc/self/fd/\(second.write.rawValue); echo two > /proc/self/fd/\(first.write.rawValue)",
      ],
      environment: [:],
      inherited: [
        .init(source: first.write, target: second.write.rawValue),
        .init(source: second.write, target: first.write.rawValue),
      ])
    first.write.close()
    second.write.close()
    #expect(try ChildProcess.wait(for: pid) == 0)
    #expect(String(decoding: try first.read.readAll(), as: UTF8.self) == "one\n")
    #expect(String(decoding: try second.read.readAll(), as: UTF8.self) == "two\n")
  }

  @Test func bubblewrapsStatusIsParsed() {
    var report = StatusReport()
    let pipe = try! FileDescriptor.pipe()
    try! pipe.write.writeAll(
      Array("{ \"child-pid\": 4242, \"cgroup-namespace\": 1 }\n{ \"exit-code\": 7 }\n".utf8))
    pipe.write.close()
    report.read(from: pipe.read, until: { _ in false })
    pipe.read.close()
    #expect(report.childPID == 4242 && report.exitCode == 7)
    #expect(StatusReport().childPID == nil)
  }
}

struct AppUserTests {
  @Test func onlyARootThatMapsTheAppRangeRunsAppsAsTheirOwnUids() {
    #expect(AppUser.mapsAppRange("         0          0 4294967295\n"))
    #expect(!AppUser.mapsAppRange("         0       1000          1\n"))  // root in a rootless container
    #expect(!AppUser.mapsAppRange("         0     100000      65536\n"))
    #expect(AppUser.mapsAppRange("0 100000 65536\n1879048192 200000 16777216\n"))
  }

  @Test func newUidsAvoidTheUsedOnesAndStayInTheRange() {
    let used = Set(AppUser.range.lowerBound...(AppUser.range.lowerBound + 1000))
    for _ in 0..<100 {
      let uid = AppUser.randomUID(avoiding: used)
      #expect(AppUser.range.contains(uid) && !used.contains(uid))
    }
  }
}

struct DeviceRootTests {
  @Test func theRootIsCanonicalHoweverItIsSpelled() throws {
    let dir = TemporaryDirectory("canonical")
    try dir.makeDirectory("real/device")
    try dir.symlink("link", to: dir.url("real"))
    let canonical = dir.url("real/device")
    for spelling in [
      dir.path + "//real/device", dir.path + "/real/./device", dir.path + "/real/device/.",
      dir.path + "/real/device/",
      dir.path + "/link/device", dir.path + "/real/x/../device",
    ] {
      #expect(DeviceRoot(path: spelling).path == canonical, "\(spelling)")
    }
    // A root that does not exist yet: the existing part resolved, the rest cleaned.
    #expect(DeviceRoot(path: dir.path + "/link/new//./root").path == dir.url("real/new/root"))
  }
}

struct DelegatedCgroupTests {
  @Test func theOwnCgroupIsFoundBelowTheCgroup2Mount() {
    let mounts = """
      30 25 0:26 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory
      35 25 0:31 / /sys/fs/cgroup/unified rw,relatime shared:14 - cgroup2 cgroup2 rw
      """
    #expect(
      DelegatedCgroup.ownCgroup(cgroupFile: "4:memory:/x\n0::/user.slice/app\n", mountInfo: mounts)
        == "/sys/fs/cgroup/unified/user.slice/app")
    #expect(DelegatedCgroup.ownCgroup(cgroupFile: "0::/\n", mountInfo: mounts) == "/sys/fs/cgroup/unified")
    #expect(DelegatedCgroup.ownCgroup(cgroupFile: "4:memory:/x\n", mountInfo: mounts) == nil)
  }

  @Test func withoutADelegatedCgroupNoneIsUsed() throws {
    let dir = TemporaryDirectory("cgroup")
    // A plain directory is no cgroup: it has no cgroup.subtree_control naming pids and memory.
    #expect(DelegatedCgroup.locate(environment: ["APPBOX_CGROUP": dir.path]) == nil)
    // This machine kind's own cgroup v2 has neither controller: appbox runs without cgroup limits.
    if let own = DelegatedCgroup.ownCgroup(),
      let control = try? String(contentsOfFile: own + "/cgroup.subtree_control", encoding: .utf8),
      !control.contains("pids")
    {
      #expect(DelegatedCgroup.locate(environment: [:]) == nil)
    }
  }
}
