// Running apps confined, and knowing which apps run.
//
// Every confined process starts through the `appbox-sandbox` helper (see Sandbox.swift)
// and holds a shared `flock(2)` on `<root>/.appbox/running/<CONTAINER-ID>.lock`: appbox
// takes it, passes the descriptor to the helper, and the helper keeps it open across
// exec, so the app itself (and any child it forks) holds the lock for as long as it
// lives, and the kernel drops it however the app ends. Hence:
// - "is the app running?" is "can an exclusive lock be taken right now?";
// - uninstall (and update, restore) take that exclusive lock and keep it while they
//   change the home, so no launch can start meanwhile (exit 75 when the app runs);
// - `launch` first tries the exclusive lock: if it gets it, no process of the app runs,
//   so it empties `tmp/` (the platform purges tmp when the app is not running), then
//   turns the lock into a shared one. `run` is a developer's tool for looking inside
//   the sandbox and never purges tmp.
// The root's lock is not held while an app runs: run and launch open the device
// without it, and recheck the registry once they hold the running lock.

import AppboxCore
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
    let confined = try ConfinedCommand(
      home: home(of: app), command: command, options: options, environment: environment)
    let lock = try holdRunningLock(of: app, purgingTemporaryFiles: false)
    return try withExtendedLifetime(lock) { try confined.run(holding: lock) }
  }

  /// Verifies the bundle's seal (broken: exit 65, naming the changed path), empties tmp
  /// when no process of the app runs, then runs the bundle's executable with `arguments`
  /// confined, as `run` does.
  public func launch(_ app: AppRecord, arguments: [String] = [], options: SandboxOptions = SandboxOptions())
    throws -> Int32
  {
    let home = self.home(of: app)
    let seal = try Seal.verify(bundleAt: home.bundlePath, expectedDigest: app.seal)
    if case .broken(let path, let reason) = seal {
      throw ContainerError(
        .sealBroken,
        "Refusing to launch \(app.bundleIdentifier): its bundle's seal is broken ('\(path)' \(reason))")
    }
    let executable = try executablePath(in: home)
    let confined = try ConfinedCommand(
      home: home, command: [executable] + arguments, options: options, environment: environment)
    let lock = try holdRunningLock(of: app, purgingTemporaryFiles: true)
    return try withExtendedLifetime(lock) { try confined.run(holding: lock) }
  }

  /// The bundle executable's absolute path, once it is known to be an executable file.
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
    return home.bundlePath + "/" + name
  }

  /// Takes `app`'s running lock, shared, emptying tmp first when `purgingTemporaryFiles`
  /// and no process of the app runs. Waits (up to $APPBOX_LOCK_TIMEOUT seconds, default
  /// 5) while an uninstall or update holds it exclusively, then checks that the app is
  /// still installed in the same container.
  private func holdRunningLock(of app: AppRecord, purgingTemporaryFiles: Bool) throws -> FileLock {
    let path = runningLockPath(app)
    let lock: FileLock
    if purgingTemporaryFiles, let exclusive = try FileLock.attempt(path, exclusive: true) {
      try emptyTemporaryDirectory(of: home(of: app))
      try exclusive.convert(exclusive: false)
      lock = exclusive
    } else {
      let seconds = environment["APPBOX_LOCK_TIMEOUT"].flatMap(Double.init) ?? 5
      lock = try FileLock.acquire(
        path, exclusive: false, timeout: .milliseconds(Int(seconds * 1000)),
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
      return
    }
    try tmp.closeAfter { try FileTree.removeContents(of: $0) }
  }
}

/// One confined process to start: the helper, its arguments and the app's environment,
/// checked before anything is locked or purged.
private struct ConfinedCommand {
  let helper: String
  let arguments: [String]
  let environment: [String: String]
  let options: SandboxOptions

  init(home: Home, command: [String], options: SandboxOptions, environment: [String: String]) throws {
    helper = try Sandbox.helperPath(environment: environment)
    var flags: [String] = []
    if !Sandbox.isLandlockAvailable(environment: environment) {
      guard options.allowUnconfined else {
        throw ContainerError(
          .unavailable,
          "Cannot confine \(home.app.bundleIdentifier): this kernel has no Landlock (needs Linux 5.13 or later "
            + "with Landlock enabled); pass --allow-unconfined to run it without the sandbox")
      }
      flags.append("--allow-unconfined")
      if environment["APPBOX_ASSUME_NO_LANDLOCK"] == "1" { flags.append("--assume-no-landlock") }
    }
    arguments =
      SandboxProfile(home: home).helperArguments + ["--chdir", home.path] + flags + ["--"] + command
    var appEnvironment = Sandbox.environment(for: home, inheriting: environment)
    if options.prewarm { appEnvironment[Sandbox.prewarmVariable] = "1" }
    self.environment = appEnvironment
    self.options = options
  }

  /// Starts the helper with the lock's descriptor and waits for the command to end.
  func run(holding lock: FileLock) throws -> Int32 {
    var inherited: [ChildProcess.Inherited] = []
    for (descriptor, target) in [
      (options.standardInput, 0), (options.standardOutput, 1), (options.standardError, 2),
    ] {
      if let descriptor { inherited.append(.init(source: descriptor, target: Int32(target))) }
    }
    let lockTarget = ChildProcess.freeTarget(
      avoiding: inherited.map(\.source.rawValue) + [lock.descriptor.rawValue])
    inherited.insert(.init(source: lock.descriptor, target: lockTarget), at: 0)
    let pid = try ChildProcess.spawn(
      helper, arguments: [Sandbox.helperName, "--lock-fd", String(lockTarget)] + arguments,
      environment: environment, inherited: inherited)
    return try ChildProcess.wait(for: pid)
  }
}
