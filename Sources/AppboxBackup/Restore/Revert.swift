// Revert: back to the version and data from before the last update.
//
// Algorithm:
// 1. The app's history names its last update and the snapshot taken just before it; a
//    revert since then (or no update at all) means there is nothing to revert.
// 2. Snapshot the current data first (tag "pre-revert"), so nothing is lost.
// 3. Extract the old bundle from the pre-update snapshot and stage a NEW home with it
//    (validated and sealed like any install: the backup is untrusted input).
// 4. Build the pre-update Documents and Library inside that staging home, verifying every
//    byte, then switch homes exactly as an update does (journaled: before the registry
//    commit a crash rolls back, after it recovery rolls forward). Keychain items are not
//    touched, as by an update, nor are app group containers: the app's memberships follow
//    the old bundle, the groups' data stays as it is.
// 5. With `withGroups`: each group the update snapshotted (its pre-update group snapshots,
//    recorded in the app's history) is snapshotted again (tag "pre-revert") before step 3,
//    and restored from its pre-update snapshot after step 4 (GroupRestore.swift). Members
//    of those groups must not be running (checked before anything changes: exit 75).

import AppboxContainer
import AppboxCore
import AppboxRepository
import Foundation
import Glibc

/// What a revert did.
public struct RevertReport: Sendable {
  public var bundleIdentifier: String
  public var oldContainerID: String
  public var newContainerID: String
  public var fromVersion: String
  public var toVersion: String
  public var home: String
  /// The snapshot taken before the update, now restored.
  public var restoredSnapshot: String
  /// The snapshot of the data the revert replaced.
  public var preRevertSnapshot: String
  public var files: Int
  public var bytes: Int64
  /// The snapshots the update took of the app's groups, by group identifier.
  public var preUpdateGroupSnapshots: [String: String] = [:]
  /// With `withGroups`: the groups restored (to those snapshots), and the snapshots taken of
  /// their data first.
  public var restoredGroups: [String: String] = [:]
  public var preRevertGroupSnapshots: [String: String] = [:]
  /// The revert happened, but something after its commit failed (the next command finishes it).
  public var warnings: [String] = []
}

extension Repository {
  /// Reverts `app` to the version and data from before its last update.
  /// With `withGroups`, also restores the app's groups to the snapshots the update took.
  public func revert(
    _ app: AppRecord, in session: DeviceSession, keychain: (any KeychainSnapshotting)? = nil,
    withGroups: Bool = false, observer: EngineObserver = SilentObserver()
  ) throws -> RevertReport {
    let (snapshot, update) = try preUpdateSnapshot(of: app, in: session)
    let running = try session.ensureNotRunning(app)
    defer { withExtendedLifetime(running) {} }
    var groupSnapshots: [(group: String, snapshot: Snapshot)] = []
    if withGroups {
      for (group, id) in update.groupSnapshots.sorted(by: { $0.key < $1.key }) {
        groupSnapshots.append((group, try self.snapshot(id, app: group)))
        guard let record = try session.lockGroup(group) else { continue }
        for member in record.members where member != app.bundleIdentifier {
          if let other = try session.registry.appIfPresent(member), try session.isRunning(other) {
            throw ContainerError(
              .appRunning,
              "Cannot roll back the app group \(group): its member \(member) is running; quit it and try again"
            )
          }
        }
      }
    }
    let current = try backup(
      app, in: session, options: BackupOptions(tag: "pre-revert", keychain: keychain),
      observer: observer)
    var preRevertGroups: [String: String] = [:]
    for (group, _) in groupSnapshots {
      guard let record = try session.registry.groupIfPresent(group) else { continue }
      preRevertGroups[group] =
        try backup(.group(record, in: session), in: session, options: BackupOptions(tag: "pre-revert"))
        .snapshot.id
    }

    let staged = try withExtractedBundle(of: snapshot, in: session) { try session.stageHome(bundleAt: $0) }
    let dataName = ".revert-data"
    let report: MaterializeReport
    do {
      guard staged.info.identifier == app.bundleIdentifier else {
        throw BackupError(
          .corruptArchive,
          "Snapshot \(snapshot.id) holds a bundle of '\(staged.info.identifier)', not of '\(app.bundleIdentifier)'"
        )
      }
      let staging = try FileDescriptor.open(
        session.root.applicationRoot + "/" + staged.stagingName, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
      defer { staging.close() }
      try staging.makeDirectory(dataName, mode: 0o700)
      let data = try staging.open(dataName, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
      defer { data.close() }
      // The standard directories too (Library/Caches), before directory times are set:
      // created later, they would give Library the time of the revert.
      report = try materialize(
        snapshot, part: .data, into: data, standardDirectories: true, protectingOn: session,
        owner: AppUser.dataOwner(of: app), observer: observer)
      try data.syncFileSystem()
    } catch {
      session.discard(staged)
      throw error
    }
    CrashPoint.hit("revert.staged")
    var warnings: [String] = []
    let record = try session.replaceHome(
      of: app, with: staged, event: "revert", snapshot: current.snapshot.id,
      warnings: { warnings.append($0) },
      migrate: { staging, _ in
        let data = try staging.open(dataName, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
        defer { data.close() }
        try HomeStaging.moveData(from: data, into: staging)
        try FileTree.remove(dataName, in: staging)
      })
    var restoredGroups: [String: String] = [:]
    for (group, groupSnapshot) in groupSnapshots {
      // The old bundle lists the group again (its container was kept, or made anew).
      guard let record = try session.lockGroup(group) else { continue }
      _ = try restore(group: record, snapshot: groupSnapshot.id, in: session, observer: observer)
      restoredGroups[group] = groupSnapshot.id
    }
    return RevertReport(
      bundleIdentifier: app.bundleIdentifier, oldContainerID: app.containerID,
      newContainerID: record.containerID,
      fromVersion: app.version, toVersion: record.version, home: session.root.home(record.containerID),
      restoredSnapshot: snapshot.id, preRevertSnapshot: current.snapshot.id, files: report.files,
      bytes: report.bytes, preUpdateGroupSnapshots: update.groupSnapshots, restoredGroups: restoredGroups,
      preRevertGroupSnapshots: preRevertGroups, warnings: warnings)
  }

  /// The snapshot the app's last update took, if that update has not been reverted, and the
  /// update's history event.
  private func preUpdateSnapshot(of app: AppRecord, in session: DeviceSession) throws
    -> (Snapshot, Registry.Event)
  {
    let history = try session.registry.history(of: app.bundleIdentifier)
    guard let last = history.first(where: { $0.event == "update" || $0.event == "revert" }) else {
      throw BackupError(
        .notFound, "Nothing to revert: '\(app.bundleIdentifier)' has not been updated")
    }
    guard last.event == "update" else {
      throw BackupError(
        .notFound,
        "Nothing to revert: '\(app.bundleIdentifier)' was already reverted to \(last.version ?? "?") and has not "
          + "been updated since")
    }
    guard let id = last.snapshot else {
      throw BackupError(
        .notFound,
        "Cannot revert '\(app.bundleIdentifier)': its last update took no pre-update snapshot")
    }
    return (try snapshot(id, app: app.bundleIdentifier), last)
  }
}
