// What a confined app sees, and the command line that builds it.
//
// Every app runs as: appbox -> `appbox-sandbox enter` -> bwrap -> `appbox-sandbox confine`
// -> the app (see Sources/appbox-sandbox/main.c). This file describes the jail as data
// (`Jail`) and turns it into the three argument lists. Nothing here touches the system
// except reading what /bin, /lib... are on this host.
//
// The jail shows only:
//   /usr (read-only) and /bin, /sbin, /lib* as the host has them (symlinks or read-only)
//   /etc: a passwd and group naming only the app's user, and the few host files
//         programs need (ld.so cache, alternatives, time zone, resolver, certificates)
//   /proc (of its own pid namespace), a minimal /dev (null, zero, full, random, urandom,
//         tty, a private devpts), everything else read-only
//   /var/mobile/Applications/<CONTAINER-ID>/   the home, read-only, holding:
//       <Name>.app   the bundle, read-only (may execute)
//       Documents, Library, tmp   read-write, nosuid, nodev, noexec
//   /tmp           the home's tmp again
//   /var/mobile/Containers/Shared/AppGroup/<CONTAINER-ID>/   each of its app groups'
//                  containers, read-write, nosuid, nodev, noexec (see AppGroups/)
//   /run/appbox/   the helper; /run/appbox/bin/ the jail's tools, first on PATH
// Nothing of the device root (other homes, registry, keychain, backups, state) and
// nothing of the user's files exists in that view. Its network is a namespace of its own
// with pasta's outbound relay (JailNetwork.own), an empty one, or the host's.
//
// Extension points: `passedDescriptors` in SandboxOptions (descriptors the app inherits
// at fixed numbers), `addDataDirectory` (more read-write data, such as an app group's
// container), `supplementaryGroups` (the gid owning such a shared container, as root) and
// `addTool` (read-only executables on the jail's PATH).

import AppboxCore
import Foundation
import Glibc

/// The app's network.
public enum JailNetwork: String, Sendable, CaseIterable {
  /// A network namespace of its own (the default) whose outbound traffic pasta relays
  /// through the host's sockets (UserModeNetwork.swift): the outside, but not the host's
  /// loopback services, its abstract or pathname sockets, or any port forwarded inward.
  case own
  /// An empty network namespace: only a loopback of its own.
  case none
  /// The host's network namespace, by explicit choice: the internet, and the host's
  /// loopback services and abstract sockets too.
  case host
}

/// Per-app resource limits.
public struct JailLimits: Sendable, Equatable {
  /// Processes (and threads) one run of the app may have at once: RLIMIT_NPROC, which the
  /// kernel counts per user namespace (each run has its own, so every run gets this many),
  /// and pids.max of the run's cgroup when a delegated cgroup exists.
  public var processes: Int
  /// memory.max, applied only when a delegated cgroup exists.
  public var memoryBytes: Int64

  public init(processes: Int = 256, memoryBytes: Int64 = 4 << 30) {
    self.processes = processes
    self.memoryBytes = memoryBytes
  }
}

/// A host directory (or file) shown in the jail.
public struct JailMount: Sendable, Equatable {
  public enum Access: String, Sendable {
    /// Read, write, create, remove; what is written never executes (noexec, no Landlock
    /// execute right).
    case readWrite = "rw"
    /// Read only, no execution.
    case readOnly = "ro"
    /// Read and execute, never write.
    case readExecute = "rx"
  }

  /// The host path (staged by `enter`, so it may lie below directories the app's uid
  /// cannot traverse).
  public var source: String
  /// Where the jail shows it.
  public var destination: String
  public var access: Access
  /// For data several apps share (read-write only): the uid (and gid) owning it on disk,
  /// shown to the app as its own through an idmapped mount when appbox runs as root.
  public var owner: UInt32?

  public init(source: String, destination: String, access: Access, owner: UInt32? = nil) {
    self.source = source
    self.destination = destination
    self.access = access
    self.owner = owner
  }

  /// How `enter` stages it: `rw`, `ro`, `rx`, or `shared=OWNER` (as root, for shared data).
  func stagingKind(privileged: Bool) -> String {
    if privileged, access == .readWrite, let owner { return "shared=\(owner)" }
    return access.rawValue
  }
}

/// One app's jail.
public struct Jail: Sendable {
  /// Where homes appear in the jail: `/var/mobile/Applications/<CONTAINER-ID>`, the
  /// layout iOS used while bundles lived inside the home, as they do here.
  public static let homesDirectory = "/var/mobile/Applications"
  /// appbox's own files in the jail: the helper, and the tools directory.
  public static let runtimeDirectory = "/run/appbox"
  /// Read-only executables the jail provides, first on the app's PATH.
  public static let toolsDirectory = runtimeDirectory + "/bin"
  static let helperDestination = runtimeDirectory + "/appbox-sandbox"
  /// The app's user name in the jail's /etc/passwd (each app has its own uid).
  public static let userName = "mobile"

  public let app: AppRecord
  /// The home as the jail shows it.
  public let home: String
  /// The uid (and gid) the app runs as.
  public var uid: UInt32
  /// The bundle, the data directories and /tmp, then anything added.
  public private(set) var mounts: [JailMount]
  /// Executables in `toolsDirectory`.
  public private(set) var tools: [JailMount] = []
  /// Groups the app's processes belong to besides their own, as root (say the group that
  /// owns a container several apps share). Unprivileged, the caller's own groups apply.
  public var supplementaryGroups: [UInt32] = []
  /// Variables set for the app on top of the standard ones (whether protected data is
  /// available, a prewarm).
  public var environment: [String: String] = [:]

  /// The platform's jail for `home`'s app: its bundle read-and-execute, its Documents,
  /// Library and tmp read-write, tmp also at /tmp.
  public init(home: Home) {
    app = home.app
    uid = home.app.uid
    let inside = Jail.homesDirectory + "/" + home.app.containerID
    self.home = inside
    mounts = [
      JailMount(
        source: home.bundlePath, destination: inside + "/" + home.app.bundleDirectoryName,
        access: .readExecute)
    ]
    for location in [HomeLocation.documents, .library, .tmp] {
      let relative = location.relativePath(bundleDirectoryName: home.app.bundleDirectoryName)
      mounts.append(
        JailMount(source: home.path(of: location), destination: inside + "/" + relative, access: .readWrite))
    }
    mounts.append(JailMount(source: home.path(of: .tmp), destination: "/tmp", access: .readWrite))
  }

  /// The path of a standard location as the jail shows it.
  public func path(of location: HomeLocation) -> String {
    let relative = location.relativePath(bundleDirectoryName: app.bundleDirectoryName)
    return relative.isEmpty ? home : home + "/" + relative
  }

  /// Shows the host directory `source` read-write at `destination` (an absolute path
  /// outside the home's own locations), say an app group's shared container. With `owner`
  /// (data other apps share, belonging on disk to that uid and gid), the app sees what
  /// belongs to `owner` as its own and creates files as `owner` (an idmapped mount, as root;
  /// unprivileged, every app's files already belong to the caller).
  public mutating func addDataDirectory(_ source: String, at destination: String, owner: UInt32? = nil) {
    mounts.append(JailMount(source: source, destination: destination, access: .readWrite, owner: owner))
  }

  /// Puts the executable at `source` on the app's PATH as `toolsDirectory/name`.
  public mutating func addTool(_ source: String, named name: String) {
    tools.append(
      JailMount(source: source, destination: Jail.toolsDirectory + "/" + name, access: .readExecute))
  }

  // MARK: - The host's system view

  /// Top-level directories every program may need besides /usr: symlinks into /usr on a
  /// merged-/usr system (recreated as symlinks), real directories elsewhere (bound read-only).
  static let systemTops = ["/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"]

  /// The /etc files programs read at run time (names in /etc), bound read-only when the host
  /// has them (the loader's cache, Debian's alternatives, the time zone, the resolver and name
  /// service, TLS certificates); never /etc whole (no shadow, no sudoers, no host accounts).
  /// `enter` stages them with the jail's own passwd and group as one tree, which bubblewrap
  /// shows as /etc with one bind (see enter.c).
  static let etcFiles = [
    "ld.so.cache", "alternatives", "localtime", "timezone", "resolv.conf", "hosts", "nsswitch.conf",
    "services",
    "protocols", "ssl",
  ]

  /// Device files the app may read, write and use ioctls on (its terminal comes as
  /// descriptors 0-2, never by name: the app has no controlling terminal).
  static let devices = [
    "/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx", "/dev/pts",
  ]

  /// `/etc/passwd` as the jail shows it: the app's own user, and nobody (whom every file
  /// of the host the namespace does not map appears to belong to).
  public var passwd: String {
    "\(Jail.userName):x:\(uid):\(uid):\(app.bundleIdentifier):\(home):/bin/sh\n"
      + "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
  }

  /// `/etc/group`: the app's own group and nogroup.
  public var group: String { "\(Jail.userName):x:\(uid):\nnogroup:x:65534:\n" }

  // MARK: - Command lines

  /// Descriptors the jail's start reads (already at these numbers in the child): bubblewrap's
  /// status, and what `enter` writes as the jail's /etc/passwd and /etc/group.
  struct Descriptors {
    var status: Int32
    var passwd: Int32
    var group: Int32
    /// Where `confine` says it is about to exec the app (JailProcess.swift), with the network
    /// gate's listener when the app has a network of its own (NetworkGate.swift).
    var start: Int32? = nil
    /// With a network of its own: where `enter` reports the new network namespace.
    var networkNamespaceReady: Int32? = nil
  }

  /// Everything bubblewrap binds from what `enter` staged, in order: the helper, the
  /// mounts, the tools.
  func staged(helper: String) -> [JailMount] {
    [JailMount(source: helper, destination: Jail.helperDestination, access: .readExecute)] + mounts + tools
  }

  /// The distinct sources among `binds` (tmp is shown twice but staged once), in order;
  /// the N-th is mounted at `STAGING_DIRECTORY/N` (see enter.c).
  static func stagedSources(_ binds: [JailMount]) -> [JailMount] {
    var sources: [JailMount] = []
    for bind in binds where !sources.contains(where: { $0.source == bind.source && $0.access == bind.access })
    {
      sources.append(bind)
    }
    return sources
  }

  static let stagingDirectory = "/mnt"

  /// `appbox-sandbox enter ... -- bwrap ... -- appbox-sandbox confine ... -- command`.
  /// `privileged`: appbox is root, and `enter` becomes the app's uid before bubblewrap.
  func commandLine(
    helper: String, bubblewrap: String, command: [String], options: SandboxOptions, keptDescriptors: [Int32],
    descriptors: Descriptors, cgroup: String?, landlock: Bool, privileged: Bool
  ) -> [String] {
    let staged = staged(helper: helper)
    var enter = [Sandbox.helperName, "enter"]
    if privileged {
      enter += ["--user", "\(uid):\(uid)"]
      if !supplementaryGroups.isEmpty {
        enter += ["--groups", supplementaryGroups.map(String.init).joined(separator: ",")]
      }
    }
    if let cgroup { enter += ["--cgroup", cgroup] }
    if let ready = descriptors.networkNamespaceReady { enter += ["--network-namespace", String(ready)] }
    for item in Jail.stagedSources(staged) {
      enter += ["--stage", item.stagingKind(privileged: privileged) + ":" + item.source]
    }
    for name in Jail.etcFiles { enter += ["--etc", name] }
    enter += ["--etc-data", "passwd:\(descriptors.passwd)", "--etc-data", "group:\(descriptors.group)"]
    return enter + ["--", bubblewrap]
      + bubblewrapArguments(staged: staged, network: options.network, descriptors: descriptors)
      + confineArguments(
        command: command, options: options, keptDescriptors: keptDescriptors, landlock: landlock,
        startDescriptor: descriptors.start)
  }

  /// bubblewrap's options: the namespaces, the system view, the staged mounts.
  func bubblewrapArguments(staged: [JailMount], network: JailNetwork, descriptors: Descriptors) -> [String] {
    var arguments = [
      "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
      "--uid", String(uid), "--gid", String(uid), "--json-status-fd", String(descriptors.status),
    ]
    // Its own network namespace is `enter`'s, which pasta joins: bubblewrap keeps it.
    if network != .none { arguments.append("--share-net") }
    arguments += ["--ro-bind", "/usr", "/usr"]
    for top in Jail.systemTops {
      var st = stat()
      guard lstat(top, &st) == 0 else { continue }
      switch FileStatus(st).type {
      case .symlink:
        if let target = readLinkTarget(top) {
          arguments += ["--symlink", target, top]
        }
      case .directory: arguments += ["--ro-bind", top, top]
      default: continue
      }
    }
    // The /etc `enter` staged (etcFiles, passwd and group), in one bind.
    arguments += ["--ro-bind", Jail.stagingDirectory + "/etc", "/etc", "--proc", "/proc", "--dev", "/dev"]
    let sources = Jail.stagedSources(staged)
    for item in staged {
      let index = sources.firstIndex { $0.source == item.source && $0.access == item.access } ?? 0
      let source = Jail.stagingDirectory + "/" + String(index)
      arguments += [item.access == .readWrite ? "--bind" : "--ro-bind", source, item.destination]
    }
    // The skeleton bubblewrap made (the root, the home above its directories, /run, /dev's
    // own tmpfs) becomes read-only: the app can write only its data.
    arguments += ["--remount-ro", "/", "--remount-ro", "/dev"]
    return arguments
  }

  /// The `confine` step and the command: Landlock rules matching the mounts.
  func confineArguments(
    command: [String], options: SandboxOptions, keptDescriptors: [Int32], landlock: Bool,
    startDescriptor: Int32? = nil
  ) -> [String] {
    var arguments = [Jail.helperDestination, "confine"]
    for item in mounts {
      switch item.access {
      case .readWrite: arguments += ["--rw", item.destination]
      case .readOnly: arguments += ["--ro", item.destination]
      case .readExecute: arguments += ["--rx", item.destination]
      }
    }
    arguments += ["--ro", home, "--rx", "/usr", "--rx", Jail.runtimeDirectory]
    for top in Jail.systemTops {
      var st = stat()
      if lstat(top, &st) == 0, FileStatus(st).type == .directory { arguments += ["--rx", top] }
    }
    arguments += ["--ro", "/etc", "--ro", "/proc"]
    for device in Jail.devices { arguments += ["--dev", device] }
    for descriptor in keptDescriptors { arguments += ["--keep-fd", String(descriptor)] }
    arguments += ["--max-processes", String(options.limits.processes), "--chdir", home]
    if let startDescriptor {
      arguments += ["--start-fd", String(startDescriptor)]
      if options.network == .own { arguments.append("--network-gate") }
    }
    if !landlock {
      arguments.append("--allow-no-landlock")
      arguments.append("--assume-no-landlock")
    }
    return arguments + ["--"] + command
  }
}
