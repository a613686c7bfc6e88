// Full restore of an app group's container from a snapshot.
//
// Algorithm (as for a home, RestoreEngine.swift; the caller holds the group's lock):
// 1. Find the snapshot (it must be of this group); hold the repository lock shared, and the
//    running locks of the group's members exclusively: a running member's jail shows the
//    container, which is about to be replaced (a running member: exit 75).
// 2. Build the snapshot's data in `Shared/AppGroup/.incoming-<random>`, verifying every byte;
//    add the standard directories (Library/Caches ends up empty) and a metadata plist naming
//    the group and its current container id (a snapshot may come from another device, where
//    the container had another id).
// 3. Swap it with the container (HomeSwap, journaled), as root giving everything to the
//    group's uid first. The container keeps its id.
// The group must exist on the device: it comes with its first member's install.
//
// A group belongs to a team (its registry row, kept since its first member's install, and its
// snapshots, which record it): a snapshot restores only into a group of the team it was taken
// of, or else 77 naming both teams. A snapshot from before teams were recorded restores only
// into the container it was taken of (same container id: the same group, so the same team);
// after a restore installed an app, such a snapshot is left out with a warning.

import AppboxContainer
import AppboxCore
import AppboxRepository
import Foundation

/// What a restore of an app group's container did.
public struct GroupRestoreResult: Sendable {
  public var snapshot: Snapshot
  public var group: GroupRecord
  public var files: Int
  public var bytes: Int64
  public var warnings: [String]
}

extension Repository {
  /// Restores app group `group` (its lock held) from snapshot `id` (or "latest").
  public func restore(
    group: GroupRecord, snapshot id: String = "latest", in session: DeviceSession,
    observer: EngineObserver = SilentObserver()
  ) throws -> GroupRestoreResult {
    precondition(session.isLocked(group.identifier), "restoring a group needs its lock")
    let lock = try lockRepository(exclusive: false)
    defer { withExtendedLifetime(lock) {} }
    let snapshot = try self.snapshot(id, app: group.identifier)
    try Self.checkTeam(of: snapshot, for: group)
    var running: [AnyObject] = []
    for member in group.members {
      if let app = try session.registry.appIfPresent(member) {
        running.append(try session.ensureNotRunning(app))
      }
    }
    defer { withExtendedLifetime(running) {} }
    observer.engine(.started(operation: "restore", app: group.identifier))
    let staging = try HomeStagingArea.create(in: session, forGroups: true)
    let report: MaterializeReport
    do {
      report = try materialize(
        snapshot, part: .data, into: staging.descriptor, protectingOn: session, observer: observer)
      try GroupContainer.addStandardDirectories(in: staging.descriptor)
      try GroupContainer.writeMetadata(of: group, in: staging.descriptor)
    } catch {
      staging.discard()
      throw error
    }
    observer.engine(.phase(.swapping))
    observer.engine(.stage("swap"))
    let swapWarnings = try HomeSwap.swap(staging, intoGroup: group, session: session)
    observer.engine(.finished(operation: "restore", app: group.identifier))
    return GroupRestoreResult(
      snapshot: snapshot, group: group, files: report.files, bytes: report.bytes,
      warnings: report.warnings + swapWarnings)
  }

  /// After a restore installed an app: restores the latest snapshot of each group that
  /// install created (the device had no container for it, so the group's data comes back
  /// with its app). Groups without snapshots stay empty.
  func restoreGroupsCreated(_ identifiers: [String], in session: DeviceSession, observer: EngineObserver)
    throws -> [GroupRestoreResult]
  {
    try identifiers.compactMap { identifier in
      guard let latest = try latestSnapshot(app: identifier),
        let group = try session.registry.groupIfPresent(identifier)
      else { return nil }
      guard latest.team != nil else {
        observer.engine(
          .warning(
            path: nil,
            message:
              "app group \(identifier) was not restored: its latest snapshot \(latest.id) records no team (it was "
              + "taken before appbox recorded them), so it may be another team's; it stays empty"))
        return nil
      }
      return try restore(group: group, snapshot: latest.id, in: session, observer: observer)
    }
  }

  /// Refuses (77) to put `snapshot` into `group`: when it was taken of another team's group,
  /// or records no team and was taken of another container. `installing`: the app whose
  /// install is creating the group (named in the message).
  static func checkTeam(of snapshot: Snapshot, for group: GroupRecord, installing app: AppRecord? = nil)
    throws
  {
    let what =
      app.map { "Cannot restore \($0.bundleIdentifier) with its app group \(group.identifier)" }
      ?? "Cannot restore \(group.identifier) from snapshot \(snapshot.id)"
    guard let team = snapshot.team else {
      guard snapshot.containerID == group.containerID else {
        throw BackupError(
          .denied,
          "\(what): the snapshot records no team (it was taken before appbox recorded them) and is of another "
            + "container, so it may be another team's; on this device the group belongs to team "
            + "\(group.teamIdentifier)")
      }
      return
    }
    guard team == group.teamIdentifier else {
      throw BackupError(
        .denied,
        "\(what): snapshot \(snapshot.id) is of team \(team)'s group, and on this device the group belongs to team "
          + "\(group.teamIdentifier)")
    }
  }
}
