// Running apps confined, and knowing which apps run.
//
// Every confined process starts in its jail (Jail.swift, JailProcess.swift), and appbox
// itself holds a shared `flock(2)` on `<root>/.appbox/running/<CONTAINER-ID>.lock` from
// before the jail starts until the jail's pid namespace is gone, so until no process of
// the app is alive (a daemonised child included: the namespace dies with the app's first
// process). The descriptor never reaches the jail. Hence:
// - "is the app running?" is "can an exclusive lock be taken right now?";
// - uninstall (and update, restore, import) take that exclusive lock and keep it while
//   they change the home, so no launch can start meanwhile (exit 75 when the app runs);
// - `launch` first tries the exclusive lock: if it gets it, no process of the app runs,
//   so it empties `tmp/` (the platform purges tmp when the app is not running), then
//   turns the lock into a shared one. `run` is a developer's tool for looking inside
//   the sandbox and never purges tmp.
// If appbox itself is killed, bubblewrap (--die-with-parent) and with it the whole jail
// are killed too. The root's lock is not held while an app runs: run and launch open the
// device without it, and recheck the registry once they hold the running lock.

import AppboxCore
import AppboxSecItem
import AppboxSecItemBroker
import Foundation
import Glibc

extension DeviceSession {
  /// The lock file that says whether `app` runs.
  func runningLockPath(_ app: AppRecord) -> String { root.runningDirectory + "/" + app.containerID + ".lock" }

  /// Whether a process started by `run` or `launch` for `app` is alive.
  public func isRunning(_ app: AppRecord) throws -> Bool {
    guard let lock = try FileLock.attempt(runningLockPath(app), exclusive: true) else { return true }
    withExtendedLifetime(lock) {}
    return false
  }

  /// Fails with exit 75 when `app` runs. Otherwise returns the app's exclusive running
  /// lock: keep it while changing the app's home, so that no launch starts meanwhile.
  @discardableResult
  public func ensureNotRunning(_ app: AppRecord) throws -> FileLock {
    guard let lock = try FileLock.attempt(runningLockPath(app), exclusive: true) else {
      throw ContainerError(
        .appRunning,
        "\(app.bundleIdentifier) is running (a process started by 'appbox run' or 'appbox launch' is alive); "
          + "quit it and try again")
    }
    return lock
  }

  /// Deletes the running-lock file of an app that is gone; call it holding the lock.
  func removeRunningLock(of app: AppRecord) {
    _ = unlink(runningLockPath(app))
  }

  /// Runs `command` (a program and its arguments; the program is searched in PATH)
  /// confined to `app`'s sandbox, in its home, and waits for it. Returns its exit
  /// status, or 128 + N when signal N ended it. tmp is left as it is.
  public func run(_ app: AppRecord, command: [String], options: SandboxOptions = SandboxOptions()) throws
    -> Int32
  {
    guard !command.isEmpty else { throw ContainerError(.invalidRequest, "No command given to run") }
    try refuseOffloaded(app, doing: "run a command in its sandbox")
    var confined = try ConfinedCommand(
      home: home(of: app), command: command, options: options, environment: environment, device: root)
    try addGroupContainers(of: app, to: &confined.jail)
    let lock = try holdRunningLock(of: app, purgingTemporaryFiles: false)
    try prepareDataOwnership(of: app)
    return try withExtendedLifetime(lock) { try runTracked(app, confined, command: command, monitor: nil) }
  }

  /// Verifies the bundle's seal (broken: exit 65, naming the changed path), empties tmp
  /// when no process of the app runs, then runs the bundle's executable with `arguments`
  /// confined, as `run` does. `monitor` names the launch, its mode and log, and hears that it
  /// started; a launch that dies by a signal leaves a crash record (Lifecycle/LaunchRecords.swift).
  public func launch(
    _ app: AppRecord, arguments: [String] = [], options: SandboxOptions = SandboxOptions(),
    monitor: LaunchMonitor = LaunchMonitor()
  ) throws -> Int32 {
    try refuseOffloaded(app, doing: "launch it")
    let home = self.home(of: app)
    let (seal, modes) = try Seal.check(
      bundleAt: home.bundlePath, expectedDigest: app.seal, expectedModes: app.bundleModes)
    if case .broken(let path, let reason) = seal {
      throw ContainerError(
        .sealBroken,
        "Refusing to launch \(app.bundleIdentifier): its bundle's seal is broken ('\(path)' \(reason))")
    }
    if app.bundleModes == nil {  // a seal from before modes were sealed: seal them now
      try registry.recordBundleModes(modes.text, containerID: app.containerID)
    }
    let executable = try executablePath(in: home)
    var confined = try ConfinedCommand(
      home: home, command: [Jail(home: home).path(of: .bundle) + "/" + executable] + arguments,
      options: options, environment: environment, device: root)
    try addGroupContainers(of: app, to: &confined.jail)
    let lock = try holdRunningLock(of: app, purgingTemporaryFiles: true)
    try prepareDataOwnership(of: app)
    return try withExtendedLifetime(lock) {
      try runTracked(app, confined, command: confined.command, monitor: monitor)
    }
  }

  /// The bundle executable's name, once it is known to be an executable file.
  private func executablePath(in home: Home) throws -> String {
    let name = home.app.executable
    let bundle = try FileDescriptor.open(home.bundlePath, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    let status = try bundle.closeAfter { try $0.statusIfPresent(of: name) }
    guard let status, status.type == .regular, status.permissions & 0o111 != 0 else {
      let problem = status == nil ? "is missing" : "is not an executable file"
      throw ContainerError(
        .invalidBundle,
        "Cannot launch \(home.app.bundleIdentifier): its executable '\(home.app.bundleDirectoryName)/\(name)' "
          + problem)
    }
    return name
  }

  /// Takes `app`'s running lock, shared, emptying tmp first when `purgingTemporaryFiles`
  /// and no process of the app runs. Waits (as long as the session's lock wait, else 5
  /// seconds) while an uninstall or update holds it exclusively, then checks that the app is
  /// still installed in the same container.
  private func holdRunningLock(of app: AppRecord, purgingTemporaryFiles: Bool) throws -> FileLock {
    let path = runningLockPath(app)
    let lock: FileLock
    if purgingTemporaryFiles, let exclusive = try FileLock.attempt(path, exclusive: true) {
      try emptyTemporaryDirectory(of: home(of: app))
      try exclusive.convert(exclusive: false)
      lock = exclusive
    } else {
      lock = try FileLock.acquire(
        path, exclusive: false, timeout: lockWait.or(.seconds(5)),
        what: "App \(app.bundleIdentifier)")
    }
    guard try registry.appIfPresent(app.containerID)?.containerID == app.containerID else {
      throw ContainerError(
        .appNotFound,
        "\(app.bundleIdentifier) was uninstalled or updated while it was being started; try again")
    }
    return lock
  }

  /// Empties the home's tmp (recreating it if it is missing), never following a symlink.
  private func emptyTemporaryDirectory(of home: Home) throws {
    let directory = try FileDescriptor.open(home.path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    defer { directory.close() }
    let tmp: FileDescriptor
    do {
      tmp = try directory.open("tmp", O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    } catch let error as SystemError where error.errno == .noEntry {
      try directory.makeDirectory("tmp", mode: 0o755)
      if let owner = AppUser.dataOwner(of: home.app) {
        try DataOwnership.handOver("tmp", in: directory, to: owner)
      }
      return
    }
    try tmp.closeAfter { try FileTree.removeContents(of: $0) }
  }
}

/// One confined process to start: its jail, the helper and bubblewrap, checked before
/// anything is locked or purged. Anything missing is exit 69: there is no weaker sandbox
/// to fall back to.
struct ConfinedCommand {
  var jail: Jail
  let command: [String]
  let helper: String
  let bubblewrap: String
  /// pasta, for a network of its own.
  let pasta: String?
  let landlock: Bool
  let cgroup: DelegatedCgroup?
  let environment: [String: String]
  let options: SandboxOptions
  /// The device, whose keychain the broker serves.
  let device: DeviceRoot

  init(
    home: Home, command: [String], options: SandboxOptions, environment: [String: String],
    device: DeviceRoot
  ) throws {
    helper = try Sandbox.helperPath(environment: environment)
    let secItemTool = try Sandbox.secItemToolPath(environment: environment)
    self.device = device
    bubblewrap = try Sandbox.bubblewrapPath(environment: environment, for: home.app)
    pasta =
      options.network == .own ? try UserModeNetwork.pastaPath(environment: environment, for: home.app) : nil
    if let missing = Sandbox.userNamespacesUnavailable() {
      throw ContainerError(
        .unavailable, "Cannot confine \(home.app.bundleIdentifier): \(missing); bubblewrap needs them")
    }
    landlock = Sandbox.isLandlockAvailable(environment: environment)
    if !landlock && !options.allowUnconfined {
      throw ContainerError(
        .unavailable,
        "Cannot confine \(home.app.bundleIdentifier): this kernel has no Landlock (needs Linux 5.13 or later "
          + "with Landlock enabled); pass --allow-unconfined to run it in its jail without Landlock")
    }
    var jail = Jail(home: home)
    // The caller's variables first: appbox's own (protection, prewarm, the broker) win.
    let reserved: Set<String> = ["HOME", "CFFIXED_USER_HOME", "TMPDIR", "PATH"]
    jail.environment = options.environment.filter { !reserved.contains($0.key) }
      .merging(Sandbox.protectionEnvironment(for: home)) { _, own in own }
    if options.prewarm { jail.environment[Sandbox.prewarmVariable] = "1" }
    jail.addTool(secItemTool, named: Sandbox.secItemToolName)
    jail.environment[SecItemWire.descriptorVariable] = String(SecItemWire.descriptorNumber)
    self.jail = jail
    cgroup = DelegatedCgroup.locate(environment: environment)
    self.command = command
    self.environment = environment
    self.options = options
  }

  /// Starts the jail with the app's keychain broker and waits until no process of the app
  /// is left; then the broker stops. `started` hears the jail's pid 1 (JailProcess.run).
  func run(started: ((pid_t) -> Void)? = nil) throws -> Int32 {
    var options = self.options
    if options.passedDescriptors.contains(where: { $0.number == SecItemWire.descriptorNumber }) {
      throw ContainerError(
        .invalidRequest,
        "Descriptor number \(SecItemWire.descriptorNumber) is the app's keychain broker; pass others above it"
      )
    }
    let device = self.device
    let broker = try SecItemBroker(client: jail.app.keychainClient) { try device.openKeychain() }
    defer { broker.stop() }
    if let door = broker.appDescriptor {
      options.passedDescriptors.append((door, SecItemWire.descriptorNumber))
    }
    return try JailProcess.run(
      jail, command: command, options: options, helper: helper, bubblewrap: bubblewrap,
      environment: environment, cgroup: cgroup, landlock: landlock, pasta: pasta, started: started)
  }
}
