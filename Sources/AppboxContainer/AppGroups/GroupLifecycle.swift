// When app group containers come and go, crash-safe like homes (journal-free, by names).
//
// - Install (and update, revert: `replaceHome`) of an app listing groups: under the app's
//   lock, take each group's lock (in name order; app locks are always taken before group
//   locks), check the team rule, and build a container for each group the device lacks under
//   `Shared/AppGroup/.staging-<ID>`. The registry transaction that commits the app also
//   commits the new groups' rows and the memberships; then the stagings are renamed into
//   place (before the home's). A crash before the commit leaves stagings no row names
//   (removed); after it, stagings whose row exists (renamed into place).
// - An update keeps every container as it is (same id, same data). A group the new bundle
//   no longer lists keeps the app as a former member (the group stays, hidden from it).
// - Uninstall: under the app's lock and its groups' locks, the containers of groups whose
//   only membership is this app's are renamed to `.trash-<ID>` (after the home), the
//   transaction drops the app's row, its memberships and those groups' rows, then the trash
//   goes. A crash before the commit: the app's uninstall is finished by ContainerRecovery,
//   whose `Registry.remove` drops the groups' rows; trash no row names is removed. A trash
//   whose group still has members (another app joined meanwhile) is renamed back.
//
// GroupRecovery finishes all of this for everything (no other appbox active), for one group
// (its lock held), or for one app (its lock held: it takes the locks of the app's groups).
// Staging or trash no row names waits for the `.everything` scope, as in ContainerRecovery:
// a live appbox's work looks the same.

import AppboxCore
import Foundation
import Glibc

/// One app's change of memberships, prepared (groups locked, new containers staged) before
/// the registry transaction that commits it.
public struct GroupMembershipChange: Sendable {
  public let bundleIdentifier: String
  /// Groups the device lacked: their records and staging names.
  public fileprivate(set) var created: [(record: GroupRecord, stagingName: String)] = []
  /// Groups the app is a member of afterwards (created ones included).
  public fileprivate(set) var joined: [String] = []
  /// Groups it leaves as a former member (an update dropped them).
  public fileprivate(set) var left: [String] = []

  init(bundleIdentifier: String) { self.bundleIdentifier = bundleIdentifier }

  /// The identifiers of the groups this change creates.
  public var createdGroups: [String] { created.map(\.record.identifier) }

  /// Records the change (inside the caller's registry transaction).
  func commit(to registry: Registry) throws {
    for (record, _) in created { try registry.insert(group: record) }
    for group in joined { try registry.setMembership(of: bundleIdentifier, in: group, active: true) }
    for group in left { try registry.setMembership(of: bundleIdentifier, in: group, active: false) }
  }

  /// After the commit: renames the new containers into place. Idempotent.
  func finish(root: DeviceRoot) throws {
    guard !created.isEmpty else { return }
    let parent = try OwnedFileDescriptor.open(root.appGroupRoot, O_RDONLY | O_DIRECTORY)
    for (record, staging) in created where try parent.borrowed.statusIfPresent(of: staging) != nil {
      try parent.borrowed.rename(staging, to: record.containerID, flags: .noReplace)
    }
    try parent.borrowed.sync()
  }

  /// The change will not be committed: removes the new containers.
  func discard(root: DeviceRoot) {
    for (_, staging) in created { try? FileTree.remove(atPath: root.appGroupRoot + "/" + staging) }
  }
}

extension DeviceSession {
  /// Takes app group `identifier`'s lock for the rest of the session (or until `unlockGroup`)
  /// and finishes what a killed appbox left on it; returns its record if the group exists.
  /// Take it after the locks of the apps the command changes.
  @discardableResult
  public func lockGroup(_ identifier: String) throws -> GroupRecord? {
    guard AppGroupIdentifier.isValid(identifier) else {
      throw ContainerError(.appNotFound, "No app group '\(identifier)' (a group identifier is group.<name>)")
    }
    try lockApp(bundleIdentifier: identifier)
    return try registry.groupIfPresent(identifier)
  }

  /// Releases group `identifier`'s lock before the session ends (`backup --all`).
  public func unlockGroup(_ identifier: String) { unlock(identifier) }

  /// The app group named by identifier or container id (exit 66 if none). When a killed
  /// appbox left work on it, that is finished first (under its lock).
  public func group(_ name: String) throws -> GroupRecord {
    func missing() -> ContainerError {
      ContainerError(
        .appNotFound, "No app group '\(name)' on this device (give a group identifier or container id)")
    }
    guard let record = try registry.groupIfPresent(name) else { throw missing() }
    if !isLocked(record.identifier), root.hasPendingRecovery(),
      try GroupRecovery().hasPendingWork(self, bundleIdentifier: record.identifier)
    {
      let shared = isLocked ? nil : try root.lock(exclusive: false, lockWait: lockWait)
      let lock = try root.lockApp(record.identifier, lockWait: lockWait)
      defer { withExtendedLifetime((shared, lock)) {} }
      try GroupRecovery().recover(self, scope: .app(bundleIdentifier: record.identifier))
      guard let again = try registry.groupIfPresent(name) else { throw missing() }
      return again
    }
    return record
  }

  /// The groups `app` is a member of, by identifier.
  public func groups(of app: AppRecord) throws -> [GroupRecord] {
    try registry.groups(of: app.bundleIdentifier)
  }

  /// Group `identifier` as `app` may use it: refused (exit 77) unless the app is a member.
  public func group(_ identifier: String, usedBy app: AppRecord) throws -> GroupRecord {
    guard let group = try groups(of: app).first(where: { $0.identifier == identifier }) else {
      throw ContainerError(
        .denied,
        "\(app.bundleIdentifier) is not a member of the app group '\(identifier)' (its entitlements do not "
          + "list it in \(AppGroupIdentifier.entitlement))")
    }
    return group
  }

  /// Locks the groups app `bundleIdentifier` (of team `team`) will list, `groups`, and those
  /// it is in now; checks that each existing one belongs to its team (another team's: exit
  /// 77); stages a container for each one the device lacks. The app's lock is held.
  public func prepareMembershipChange(bundleIdentifier: String, team: String?, groups: [String]) throws
    -> GroupMembershipChange
  {
    precondition(isLocked(bundleIdentifier), "changing memberships needs the app's lock")
    let current = try registry.groups(of: bundleIdentifier, includingFormer: true)
    let active = Set(current.filter { $0.members.contains(bundleIdentifier) }.map(\.identifier))
    var change = GroupMembershipChange(bundleIdentifier: bundleIdentifier)
    do {
      for identifier in Set(groups).union(current.map(\.identifier)).sorted() {
        let existing = try lockGroup(identifier)
        guard groups.contains(identifier) else {
          if active.contains(identifier) { change.left.append(identifier) }
          continue
        }
        guard let team else {
          throw ContainerError(
            .invalidBundle, "\(bundleIdentifier) lists app groups but has no team identifier")
        }
        if let existing {
          guard existing.teamIdentifier == team else {
            throw ContainerError(
              .denied,
              "Cannot give \(bundleIdentifier) the app group '\(identifier)': on this device it belongs to team "
                + "\(existing.teamIdentifier), and \(bundleIdentifier) is of team \(team)")
          }
        } else {
          let record = GroupRecord(
            identifier: identifier, containerID: UUID().uuidString, teamIdentifier: team,
            uid: try registry.groupUID(for: identifier))
          change.created.append((record, try GroupContainer.stage(record, root: root)))
        }
        change.joined.append(identifier)
      }
      if !change.created.isEmpty { CrashPoint.hit("groups.staged") }
    } catch {
      change.discard(root: root)
      throw error
    }
    return change
  }

  /// Takes the locks of every group `app` is in (as a member or a former one).
  func lockGroups(of app: AppRecord) throws {
    for group in try registry.groups(of: app.bundleIdentifier, includingFormer: true) {
      try lockGroup(group.identifier)
    }
  }

  /// Before an uninstall's commit (the app's lock and its groups' held, `lockGroups`): moves
  /// the containers of the groups only this app keeps to trash. Returns their trash names, to
  /// remove after the commit (`removeGroupTrash`).
  func trashGroupsLeftBehind(by app: AppRecord) throws -> [String] {
    var trash: [String] = []
    let parent = try OwnedFileDescriptor.open(root.appGroupRoot, O_RDONLY | O_DIRECTORY)
    for group in try registry.groups(of: app.bundleIdentifier, includingFormer: true) {
      guard let locked = try lockGroup(group.identifier),
        locked.members + locked.formerMembers == [app.bundleIdentifier]
      else { continue }
      let name = GroupContainer.trashPrefix + locked.containerID
      if try parent.borrowed.statusIfPresent(of: locked.containerID) != nil {
        try parent.borrowed.rename(locked.containerID, to: name, flags: .noReplace)
      }
      trash.append(name)
    }
    if !trash.isEmpty { try parent.borrowed.sync() }
    return trash
  }

  /// After an uninstall's commit: deletes the containers of the groups that went with it.
  /// Returns warnings for what could not be deleted yet (recovery does it later).
  func removeGroupTrash(_ names: [String]) -> [String] {
    names.compactMap { name in
      do {
        try FileTree.remove(atPath: root.appGroupRoot + "/" + name)
        return nil
      } catch {
        return
          "an app group's old container could not be deleted yet (\(error)); the next appbox command finishes it"
      }
    }
  }
}

/// Finishes what killed appbox processes left in Shared/AppGroup (see the file's header).
public struct GroupRecovery: RecoveryStep {
  public init() {}

  public func recover(_ session: DeviceSession) throws { try recover(session, scope: .everything) }

  private func entries(_ session: DeviceSession) -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: session.root.appGroupRoot)) ?? []).sorted()
  }

  private func debris(of group: GroupRecord, in names: [String]) -> Bool {
    names.contains(GroupContainer.stagingPrefix + group.containerID)
      || names.contains(GroupContainer.trashPrefix + group.containerID)
  }

  /// The groups a scope names: a group, or an app's groups (former ones included).
  private func groups(_ session: DeviceSession, named identifier: String) throws -> [GroupRecord] {
    if AppGroupIdentifier.hasGroupPrefix(identifier) {
      return try session.registry.groupIfPresent(identifier).map { [$0] } ?? []
    }
    return try session.registry.groups(of: identifier, includingFormer: true)
  }

  public func hasPendingWork(_ session: DeviceSession, bundleIdentifier: String) throws -> Bool {
    let names = entries(session)
    guard names.contains(where: { $0.hasPrefix(".") }) else { return false }
    return try groups(session, named: bundleIdentifier).contains { debris(of: $0, in: names) }
  }

  public func recover(_ session: DeviceSession, scope: RecoveryScope) throws {
    let names = entries(session)
    guard names.contains(where: { $0.hasPrefix(".") }) || scope == .everything else { return }
    let parent = try OwnedFileDescriptor.open(session.root.appGroupRoot, O_RDONLY | O_DIRECTORY)
    switch scope {
    case .everything:
      let groups = try session.registry.groups()
      for group in groups { try finish(group, in: parent.borrowed) }
      // What no row names: stagings never committed, trash of groups that went, and (after
      // two crashes) a container whose group went while its trash had been put back.
      // (`.incoming-` directories are restores', for HomeSwapRecovery.)
      let known = Set(groups.map(\.containerID))
      for name in entries(session) {
        var id = name
        for prefix in [GroupContainer.stagingPrefix, GroupContainer.trashPrefix] where name.hasPrefix(prefix)
        {
          id = String(name.dropFirst(prefix.count))
        }
        if !known.contains(id) && UUID(uuidString: id) != nil {
          try FileTree.remove(name, in: parent.borrowed)
        }
      }
    case .app(let identifier):
      for group in try groups(session, named: identifier) where debris(of: group, in: names) {
        // The group's lock, unless the session holds it (a group scope runs under it).
        let lock =
          session.isLocked(group.identifier)
          ? nil : try session.root.lockApp(group.identifier, lockWait: session.lockWait)
        try withExtendedLifetime(lock) {
          if let current = try session.registry.groupIfPresent(group.identifier) {
            try finish(current, in: parent.borrowed)
          }
        }
      }
    }
  }

  /// Renames a committed group's staging into place, and its trash back when it still has
  /// members (its last member's uninstall did not commit, and someone needs it).
  private func finish(_ group: GroupRecord, in parent: FileDescriptor) throws {
    let id = group.containerID
    for name in [GroupContainer.stagingPrefix + id, GroupContainer.trashPrefix + id]
    where try parent.statusIfPresent(of: name) != nil {
      if try parent.statusIfPresent(of: id) == nil {
        try parent.rename(name, to: id, flags: .noReplace)
      } else {
        try FileTree.remove(name, in: parent)
      }
      try parent.sync()
    }
  }
}
