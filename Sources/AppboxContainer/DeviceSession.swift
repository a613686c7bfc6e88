import AppboxCore
import Foundation

/// Which work a recovery step may finish or roll back.
public enum RecoveryScope: Sendable, Equatable {
  /// Everything killed appbox processes left: only while no other appbox is active (the
  /// caller holds the root lock exclusively), since work in progress looks the same.
  case everything
  /// Only what concerns this app: the caller holds the app's lock, so no live appbox is
  /// working on it and whatever concerns it was left by a killed one. App groups share the
  /// namespace (`group.…`, which no bundle identifier starts with) and their locks: for a
  /// group's identifier, only what concerns that group (steps that know no such app do
  /// nothing).
  case app(bundleIdentifier: String)
}

/// Work that finishes or rolls back what a killed appbox left half-done. Each module
/// that journals multi-step operations provides one.
public protocol RecoveryStep: Sendable {
  /// Finishes or rolls back everything (scope `.everything`).
  func recover(_ session: DeviceSession) throws
  /// Finishes or rolls back what `scope` covers. The default handles `.everything` only.
  func recover(_ session: DeviceSession, scope: RecoveryScope) throws
  /// Whether work for app `bundleIdentifier` is waiting. The default says no.
  func hasPendingWork(_ session: DeviceSession, bundleIdentifier: String) throws -> Bool
}

extension RecoveryStep {
  public func recover(_ session: DeviceSession, scope: RecoveryScope) throws {
    if scope == .everything { try recover(session) }
  }
  public func hasPendingWork(_ session: DeviceSession, bundleIdentifier: String) throws -> Bool { false }
}

/// An open device: its root, identity and registry, and for mutating commands the root
/// lock (shared) and the locks of the apps they change, held until the session is released.
///
/// Concurrency: commands on different apps run in parallel; each change to an app happens
/// under that app's lock (`lockApp`), so two commands on one app take turns (or the second
/// exits 75, unless its `lockWait` (`--wait`) lets it wait). Work a killed appbox left
/// is finished by the next session that can do it safely: all of it when no other appbox is
/// active, else an app's part of it by whoever takes that app's lock.
public final class DeviceSession {
  public let root: DeviceRoot
  public let identity: DeviceIdentity
  public let registry: Registry
  public let environment: [String: String]
  /// How long this session's locks wait for another appbox (the command line's `--wait`).
  public let lockWait: LockWait
  private let recovery: [any RecoveryStep]
  private var lock: FileLock?
  private var appLocks: [String: FileLock] = [:]
  /// Old homes (`.trash-<ID>` in ApplicationRoot) an update or revert left for after its report.
  private var trashToRemove: [String] = []
  /// Other directories (absolute paths: an erase's discard) left for after the report.
  private var pathsToRemove: [String] = []
  /// What the session did with appbox's headroom as it opened (released: the file system
  /// was full, see SpaceReserve).
  public private(set) var reserve: SpaceReserve.Outcome = .unchanged

  private init(
    root: DeviceRoot, identity: DeviceIdentity, registry: Registry, lock: FileLock?,
    recovery: [any RecoveryStep], environment: [String: String], lockWait: LockWait
  ) {
    self.lockWait = lockWait
    self.root = root
    self.identity = identity
    self.registry = registry
    self.lock = lock
    self.recovery = recovery
    self.environment = environment
  }

  /// Opens the device at `root`; with `creating`, makes it when the root has none (otherwise
  /// that is `.noDevice`, exit 66, and nothing is written). A mutating session holds the
  /// root lock shared until it is released. When a killed appbox left work behind and no
  /// other appbox is active, it is all finished first (under the root lock, exclusive for
  /// that moment), so nothing ever reads a half-done state; when others are active, each
  /// app's part is finished by whoever takes that app's lock, or reads it (`app(_:)`).
  public static func open(
    root: DeviceRoot, mutating: Bool, creating: Bool = false,
    recovery: [any RecoveryStep] = [ContainerRecovery()],
    environment: [String: String] = ProcessInfo.processInfo.environment, lockWait: LockWait = .none
  ) throws -> DeviceSession {
    let identity = try root.prepare(creating: creating, lockWait: lockWait)
    // Before anything here needs a new file (SQLite's -wal and -shm come first).
    let reserve = SpaceReserve(root: root).balance(refill: mutating)
    // A session that changes nothing reads the registry read only (so it reads on a full
    // disk), unless recovery or the adoption of app groups has work to do.
    var registry = try Registry(root: root, readOnly: !mutating && !root.hasPendingRecovery())
    if registry.isReadOnly, try !registry.appsAwaitingGroups().isEmpty { registry = try Registry(root: root) }
    let session = DeviceSession(
      root: root, identity: identity, registry: registry, lock: nil, recovery: recovery,
      environment: environment, lockWait: lockWait)
    session.reserve = reserve
    if root.hasPendingRecovery(), let exclusive = try root.attemptExclusiveLock() {
      session.lock = exclusive
      for step in recovery { try step.recover(session, scope: .everything) }
      if mutating {
        try exclusive.convert(exclusive: false)
      } else {
        session.lock = nil
      }
    }
    if mutating && session.lock == nil {
      session.lock = try root.lock(exclusive: false, lockWait: lockWait)
    }
    try session.adoptGroupsOfEarlierInstalls()
    return session
  }

  /// Whether this session holds the root lock (it is a mutating session).
  public var isLocked: Bool { lock != nil }

  /// Takes the root lock exclusively for the rest of the session (it holds it shared as a
  /// mutating session), waiting as the root lock waits; busy (75) while another appbox is at
  /// work on the device. Then finishes whatever a killed appbox left (device erase and clone).
  public func lockDeviceExclusively() throws {
    precondition(isLocked, "an exclusive lock is taken by a mutating session")
    lock = nil
    lock = try root.lock(exclusive: true, lockWait: lockWait)
    for step in recovery { try step.recover(self, scope: .everything) }
  }

  /// Runs `body` as a mutating session would: holding the root lock shared (taken for the
  /// moment in a read-only session), and releasing every app lock `body` takes.
  func asMutatingSession<R>(_ body: () throws -> R) throws -> R {
    let held = Set(appLocks.keys)
    let wasLocked = isLocked
    if !wasLocked { lock = try root.lock(exclusive: false, lockWait: lockWait) }
    defer {
      for identifier in appLocks.keys where !held.contains(identifier) { appLocks[identifier] = nil }
      if !wasLocked { lock = nil }
    }
    return try body()
  }

  /// Whether this session holds app `bundleIdentifier`'s lock.
  public func isLocked(_ bundleIdentifier: String) -> Bool { appLocks[bundleIdentifier] != nil }

  /// The installed app named by bundle identifier or container id (exit 66 if none). When
  /// a killed appbox left work on it, that is finished first (under the app's lock).
  public func app(_ name: String) throws -> AppRecord {
    let record = try registry.app(name)
    if !isLocked(record.bundleIdentifier), root.hasPendingRecovery(),
      try recovery.contains(where: {
        try $0.hasPendingWork(self, bundleIdentifier: record.bundleIdentifier)
      })
    {
      // The root lock shared (no recovery of everything may run meanwhile), then the app's.
      let shared = isLocked ? nil : try root.lock(exclusive: false, lockWait: lockWait)
      let lock = try root.lockApp(record.bundleIdentifier, lockWait: lockWait)
      defer { withExtendedLifetime((shared, lock)) {} }
      try recover(record.bundleIdentifier)
      return try registry.app(name)
    }
    return record
  }

  /// Takes the lock of the installed app named by bundle identifier or container id, for
  /// the rest of the session (or until `unlockApp`), finishes whatever a killed appbox left
  /// on it, and returns its record as it is now (exit 66 if none; 75 if another appbox
  /// holds the lock). A mutating session only.
  public func lockApp(_ name: String) throws -> AppRecord {
    let identifier = try registry.appIfPresent(name)?.bundleIdentifier ?? name
    guard let record = try lockApp(bundleIdentifier: identifier) else {
      throw ContainerError(
        .appNotFound, "No installed app '\(name)' (give a bundle identifier or container id)")
    }
    return record
  }

  /// Takes app `identifier`'s lock whether or not it is installed (an install, or a restore
  /// that installs it), finishes what a killed appbox left on it, and returns its record if
  /// it is installed. Taking a lock the session already holds does nothing.
  @discardableResult
  public func lockApp(bundleIdentifier identifier: String) throws -> AppRecord? {
    precondition(isLocked, "app locks are taken in a mutating session")
    if appLocks[identifier] == nil {
      appLocks[identifier] = try root.lockApp(identifier, lockWait: lockWait)
      try recover(identifier)
    }
    return try registry.appIfPresent(identifier)
  }

  /// Releases app `app`'s lock before the session ends (`backup --all`, app after app).
  public func unlockApp(_ app: AppRecord) { unlock(app.bundleIdentifier) }

  /// Releases the lock of app or app group `identifier` before the session ends.
  func unlock(_ identifier: String) { appLocks[identifier] = nil }

  /// Runs every recovery step for app `identifier` (its lock is held).
  private func recover(_ identifier: String) throws {
    for step in recovery { try step.recover(self, scope: .app(bundleIdentifier: identifier)) }
  }

  public func home(of app: AppRecord) -> Home { Home(root: root, app: app) }

  /// Leaves trash `name` (in ApplicationRoot) for `finishDeferredWork`.
  func deferRemoval(ofTrash name: String) { trashToRemove.append(name) }

  /// Leaves the directory at `path` (an erase's discard, in `.appbox`; a swapped-out home's
  /// old contents) for `finishDeferredWork`.
  package func deferRemoval(atPath path: String) { pathsToRemove.append(path) }

  /// Whether a command of this session left work for after its report.
  public var hasDeferredWork: Bool { !trashToRemove.isEmpty || !pathsToRemove.isEmpty }

  /// Does what this session's commands left for after their report: deletes the old homes an
  /// update or revert renamed to trash. Call it once the result is out (the CLI does, after
  /// printing), so deleting what tmp, Caches and an old bundle held never delays the report.
  /// The app locks are released first (the command is over; nothing of an app is touched
  /// here); the root lock stays held, so no recovery of everything runs meanwhile. A trash
  /// that cannot be deleted now is left for the next recovery (`ContainerRecovery`), which
  /// also deletes trash left by a process killed before it got here. Returns warnings.
  @discardableResult
  public func finishDeferredWork() -> [String] {
    guard hasDeferredWork else { return [] }
    appLocks.removeAll()
    var warnings: [String] = []
    for path in pathsToRemove {
      do {
        try FileTree.remove(atPath: path)
      } catch {
        warnings.append("'\(path)' could not be deleted yet (\(error)); the next appbox command finishes it")
      }
    }
    pathsToRemove.removeAll()
    guard !trashToRemove.isEmpty else { return warnings }
    let names = trashToRemove
    trashToRemove.removeAll()
    CrashPoint.hit("session.deferred-removal")
    do {
      let applicationRoot = try OwnedFileDescriptor.open(root.applicationRoot, O_RDONLY | O_DIRECTORY)
      for name in names {
        do {
          try FileTree.remove(name, in: applicationRoot.borrowed)
        } catch {
          warnings.append(
            "the old home could not be deleted yet (\(error)); the next appbox command finishes it")
        }
      }
    } catch {
      warnings.append("the old home could not be deleted yet (\(error)); the next appbox command finishes it")
    }
    return warnings
  }
}

/// Finishes interrupted installs and uninstalls, journal-free:
/// - an install commits the registry row, then renames `.staging-<ID>` to `<ID>`;
///   so a row whose home is missing but whose staging directory exists is finished,
///   and a staging directory no row names is removed;
/// - an uninstall renames `<ID>` to `.trash-<ID>`, then deletes the app's keychain items
///   and its row; so trash whose row still exists is an uninstall to finish (keychain
///   items included), and any other trash is removed.
/// For one app (`.app` scope), only the directories of the container its row names are
/// looked at; debris no row names belongs to no app and waits for the `.everything` scope.
public struct ContainerRecovery: RecoveryStep {
  public init() {}

  public func recover(_ session: DeviceSession) throws { try recover(session, scope: .everything) }

  /// The staging and trash directories in ApplicationRoot.
  private func debris(_ session: DeviceSession) -> [String] {
    let names = (try? FileManager.default.contentsOfDirectory(atPath: session.root.applicationRoot)) ?? []
    return names.filter { $0.hasPrefix(HomeStaging.prefix) || $0.hasPrefix(HomeStaging.trashPrefix) }.sorted()
  }

  private func containerID(of name: String) -> String {
    String(
      name.dropFirst(
        name.hasPrefix(HomeStaging.prefix) ? HomeStaging.prefix.count : HomeStaging.trashPrefix.count))
  }

  public func hasPendingWork(_ session: DeviceSession, bundleIdentifier: String) throws -> Bool {
    guard let app = try session.registry.appIfPresent(bundleIdentifier) else { return false }
    return debris(session).contains { containerID(of: $0) == app.containerID }
  }

  public func recover(_ session: DeviceSession, scope: RecoveryScope) throws {
    let debris = debris(session)
    if debris.isEmpty { return }
    let apps = try session.registry.apps()
    let applicationRoot = try OwnedFileDescriptor.open(session.root.applicationRoot, O_RDONLY | O_DIRECTORY)
    for name in debris {
      let id = containerID(of: name)
      let owner = apps.first { $0.containerID == id }
      switch scope {
      case .everything: break
      case .app(let bundleIdentifier): guard owner?.bundleIdentifier == bundleIdentifier else { continue }
      }
      if name.hasPrefix(HomeStaging.prefix) {
        if owner != nil, try applicationRoot.borrowed.statusIfPresent(of: id) == nil {
          try applicationRoot.borrowed.rename(name, to: id, flags: .noReplace)
          try applicationRoot.borrowed.sync()
        } else {
          try FileTree.remove(name, in: applicationRoot.borrowed)
        }
      } else {
        if let app = owner {
          try session.registry.database.inTransaction {
            try session.deleteKeychainItems(of: app)
            try session.registry.remove(bundleIdentifier: app.bundleIdentifier)
            try session.registry.record(
              .init(
                bundleIdentifier: app.bundleIdentifier, event: "uninstall",
                previousContainerID: id, previousVersion: app.version))
          }
        }
        try FileTree.remove(name, in: applicationRoot.borrowed)
      }
    }
  }
}
