// Full restore of an app from a snapshot.
//
// Algorithm:
// 1. Find the app (it may not be installed) and the snapshot; hold the repository lock
//    shared, so no `forget` deletes an archive meanwhile.
// 2. Build the snapshot's data in a staging directory beside the homes, verifying every
//    archive and every file's SHA-256 (Repository.materialize); add the standard
//    directories, so Library/Caches and tmp exist and are empty. Nothing has touched the
//    home yet: any failure discards the staging directory.
// 3. If the app is not installed, extract the snapshot's bundle into a temp directory and
//    install it like any bundle (validated and sealed: the backup is untrusted input).
// 4. Count what the home holds that no snapshot brings back (files marked exclude-from-backup,
//    Library/Caches, tmp: RestorePreview), then swap the staged data with the home, carrying
//    the live bundle over (HomeSwap, journaled).
// 5. Import the snapshot's keychain items, when it has some and a keychain is given.
// 6. If step 3 installed the app and so created app groups the device lacked, restore each
//    such group's latest snapshot (GroupRestore.swift).

import AppboxArchive
import AppboxContainer
import AppboxCore
import AppboxRepository
import Foundation
import Glibc

/// What a restore did.
public struct RestoreResult: Sendable {
  public var snapshot: Snapshot
  /// The app as installed after the restore.
  public var app: AppRecord
  /// Whether the bundle was installed from the backup (the app was missing).
  public var installedBundle: Bool
  public var files: Int
  public var bytes: Int64
  /// nil when the snapshot holds no keychain items or no keychain was given.
  public var keychain: KeychainRestoreOutcome?
  public var warnings: [String]
  /// The app groups restored with the app (its install created their containers).
  public var groups: [GroupRestoreResult] = []
  /// What the home held that the restore removed and no snapshot keeps.
  public var dropped = DroppedData()
}

/// Holds the app's running lock exclusively (a running app is refused, exit 75) until the
/// returned lock is released: nothing may start the app while its home is swapped.
func holdNotRunning(_ app: AppRecord, session: DeviceSession) throws -> AnyObject? {
  try session.ensureNotRunning(app)
}

extension Repository {
  /// Restores `name` (a bundle identifier or container id) from snapshot `id` (or "latest").
  public func restore(
    _ name: String, snapshot id: String = "latest", in session: DeviceSession,
    keychain: (any KeychainSnapshotting)? = nil, observer: EngineObserver = SilentObserver()
  ) throws -> RestoreResult {
    let lock = try lockRepository(exclusive: false)
    defer { withExtendedLifetime(lock) {} }
    var app = try session.registry.appIfPresent(name)
    let bundleIdentifier = app?.bundleIdentifier ?? name
    let snapshot = try self.snapshot(id, app: bundleIdentifier)
    if let why = damage.affected[snapshot.id] {
      throw BackupError(.corruptArchive, "Snapshot \(snapshot.id) cannot be restored: \(why)")
    }
    if app == nil { try requireBundle(toInstallFrom: snapshot) }
    let running = try app.map { try holdNotRunning($0, session: session) }
    defer { withExtendedLifetime(running) {} }
    observer.engine(.started(operation: "restore", app: bundleIdentifier))

    let staging = try HomeStagingArea.create(in: session)
    let report: MaterializeReport
    var installed = false
    var createdGroups: [String] = []
    // As root, restored data goes to the app's uid as it is created (no second walk).
    let owner = app.flatMap { AppUser.dataOwner(of: $0) }
    do {
      report = try materialize(
        snapshot, part: .data, into: staging.descriptor, standardDirectories: true, protectingOn: session,
        owner: owner, observer: observer)
      if app == nil {
        observer.engine(.phase(.installing))
        let install = try installBundle(of: snapshot, in: session)
        app = install.app
        createdGroups = install.createdGroups
        installed = true
      }
    } catch {
      staging.discard()
      throw error
    }
    guard let app else { preconditionFailure("the app is installed by now") }
    var dropped = DroppedData()
    if !installed {
      do {
        dropped = try previewRestore(
          of: snapshot, into: session.home(of: app).path, bundleDirectoryName: app.bundleDirectoryName
        ).dropped
      } catch {
        staging.discard()
        throw error
      }
    }
    CrashPoint.hit("restore.staged")
    observer.engine(.phase(.swapping))
    observer.engine(.stage("swap"))
    // From here on the home holds the snapshot: what fails after the swap is a warning.
    let swapWarnings = try HomeSwap.swap(
      staging, into: app, carrying: .bundle, session: session, dataOwned: owner != nil)
    CrashPoint.hit("restore.swapped")

    var outcome: KeychainRestoreOutcome?
    if let keychain, let offset = snapshot.keychainOffset {
      outcome = try keychain.importItems(
        try keychainItems(of: snapshot, at: offset), for: app, portableKey: key?.keychainKey)
    }
    let groups = try restoreGroupsCreated(createdGroups, in: session, observer: observer)
    observer.engine(.finished(operation: "restore", app: bundleIdentifier))
    return RestoreResult(
      snapshot: snapshot, app: app, installedBundle: installed, files: report.files, bytes: report.bytes,
      keychain: outcome, warnings: report.warnings + swapWarnings, groups: groups, dropped: dropped)
  }

  /// Writes the bundle of `snapshot` as `<directory>/<Name>.app` (the directory must exist;
  /// the bundle directory must not). Returns the bundle's path.
  @discardableResult
  public func extractBundle(of snapshot: Snapshot, into directory: String) throws -> String {
    let parent = try FileDescriptor.open(directory, O_RDONLY | O_DIRECTORY)
    defer { parent.close() }
    try parent.makeDirectory(snapshot.bundleDirectoryName, mode: 0o700)
    let bundle = try parent.open(snapshot.bundleDirectoryName, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    defer { bundle.close() }
    _ = try materialize(snapshot, part: .bundle, into: bundle)
    try bundle.setPermissions(0o755)
    return directory + "/" + snapshot.bundleDirectoryName
  }

  /// Installs the snapshot's bundle on the device of `session`.
  /// Installs the snapshot's bundle. The groups the install creates get their latest
  /// snapshots afterwards (`restoreGroupsCreated`): one taken of another team's group refuses
  /// the whole restore first (77), nothing installed.
  private func installBundle(of snapshot: Snapshot, in session: DeviceSession) throws -> InstallResult {
    try withExtractedBundle(of: snapshot, in: session) {
      try session.install(bundleAt: $0) { app, created in
        for group in created {
          guard let latest = try self.latestSnapshot(app: group.identifier), latest.team != nil else {
            continue
          }
          try Self.checkTeam(of: latest, for: group, installing: app)
        }
      }
    }
  }

  /// Extracts the snapshot's bundle into a temporary directory of the device's state
  /// (removed afterwards, or by recovery after a crash) and calls `body` with its path.
  func withExtractedBundle<T>(of snapshot: Snapshot, in session: DeviceSession, _ body: (String) throws -> T)
    throws -> T
  {
    let temporary = session.root.stateDirectory + "/" + BundleRecovery.prefix + UUID().uuidString
    guard mkdir(temporary, 0o700) == 0 else { throw SystemError("create directory", path: temporary) }
    defer { try? FileTree.remove(atPath: temporary) }
    return try body(try extractBundle(of: snapshot, into: temporary))
  }

  /// The `.appbox/keychain` member of the snapshot's archive.
  func keychainItems(of snapshot: Snapshot, at offset: Int64) throws -> [UInt8] {
    let path = archivePath(snapshot.archive)
    let reader = try openArchive(try archiveRecord(snapshot.archive)).reader(startingAt: offset)
    while let entry = try reader.nextEntry() {
      if reader.headerOffset == offset && entry.path == Manifest.keychainMemberPath && entry.size <= 64 << 20
      {
        return try reader.readAllData()
      }
      if let at = reader.headerOffset, at > offset { break }
    }
    throw BackupError(.corruptArchive, "Archive '\(path)' lacks the keychain items its catalog row promises")
  }
}
