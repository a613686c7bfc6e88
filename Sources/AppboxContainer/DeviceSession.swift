import AppboxCore
import Foundation

/// Work that finishes or rolls back what a killed appbox left half-done. Each module
/// that journals multi-step operations provides one; all run under the root's lock
/// before a mutating command starts.
public protocol RecoveryStep: Sendable {
  func recover(_ session: DeviceSession) throws
}

/// An open device: its root, identity and registry, and (for mutating commands) the
/// root's exclusive lock, held until the session is released.
public final class DeviceSession {
  public let root: DeviceRoot
  public let identity: DeviceIdentity
  public let registry: Registry
  public let environment: [String: String]
  private var lock: FileLock?

  private init(
    root: DeviceRoot, identity: DeviceIdentity, registry: Registry, lock: FileLock?,
    environment: [String: String]
  ) {
    self.root = root
    self.identity = identity
    self.registry = registry
    self.lock = lock
    self.environment = environment
  }

  /// Opens the device at `root`, creating it on first use. A mutating session takes the
  /// exclusive lock (busy after a few seconds: exit 75) and runs `recovery` first. A
  /// read-only session takes the lock only briefly, when a killed appbox left work to
  /// finish, so that nothing ever reads a half-done state.
  public static func open(
    root: DeviceRoot, mutating: Bool, recovery: [any RecoveryStep] = [ContainerRecovery()],
    environment: [String: String] = ProcessInfo.processInfo.environment
  ) throws -> DeviceSession {
    let identity = try root.prepare()
    let recover = mutating || root.hasPendingRecovery()
    let lock = recover ? try root.lock(environment: environment) : nil
    let registry = try Registry(root: root)
    let session = DeviceSession(
      root: root, identity: identity, registry: registry, lock: lock,
      environment: environment)
    if recover {
      for step in recovery { try step.recover(session) }
    }
    if !mutating { session.lock = nil }
    return session
  }

  /// Whether this session holds the root's lock.
  public var isLocked: Bool { lock != nil }

  /// The installed app named by bundle identifier or container id (exit 66 if none).
  public func app(_ name: String) throws -> AppRecord { try registry.app(name) }

  public func home(of app: AppRecord) -> Home { Home(root: root, app: app) }
}

/// Finishes interrupted installs and uninstalls, journal-free:
/// - an install commits the registry row, then renames `.staging-<ID>` to `<ID>`;
///   so a row whose home is missing but whose staging directory exists is finished,
///   and a staging directory no row names is removed;
/// - an uninstall renames `<ID>` to `.trash-<ID>`, then deletes the app's keychain items
///   and its row; so trash whose row still exists is an uninstall to finish (keychain
///   items included), and any other trash is removed.
public struct ContainerRecovery: RecoveryStep {
  public init() {}

  public func recover(_ session: DeviceSession) throws {
    let fileManager = FileManager.default
    let names = (try? fileManager.contentsOfDirectory(atPath: session.root.applicationRoot)) ?? []
    let debris = names.filter { $0.hasPrefix(HomeStaging.prefix) || $0.hasPrefix(HomeStaging.trashPrefix) }
    if debris.isEmpty { return }
    let apps = try session.registry.apps()
    let applicationRoot = try FileDescriptor.open(session.root.applicationRoot, O_RDONLY | O_DIRECTORY)
    defer { applicationRoot.close() }
    for name in debris.sorted() {
      if name.hasPrefix(HomeStaging.prefix) {
        let id = String(name.dropFirst(HomeStaging.prefix.count))
        if apps.contains(where: { $0.containerID == id }), try applicationRoot.statusIfPresent(of: id) == nil
        {
          try applicationRoot.rename(name, to: id, flags: .noReplace)
          try applicationRoot.sync()
        } else {
          try FileTree.remove(name, in: applicationRoot)
        }
      } else {
        let id = String(name.dropFirst(HomeStaging.trashPrefix.count))
        if let app = apps.first(where: { $0.containerID == id }) {
          try session.registry.database.inTransaction {
            try session.deleteKeychainItems(of: app)
            try session.registry.remove(bundleIdentifier: app.bundleIdentifier)
            try session.registry.record(
              .init(
                bundleIdentifier: app.bundleIdentifier, event: "uninstall",
                previousContainerID: id, previousVersion: app.version))
          }
        }
        try FileTree.remove(name, in: applicationRoot)
      }
    }
  }
}
