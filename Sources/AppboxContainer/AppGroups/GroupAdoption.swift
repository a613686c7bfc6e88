// Apps installed before app groups existed (registry version 2) join the groups their
// bundles list, once, on the first command after the upgrade.
//
// Migration 3 lists every installed app in `group_adoption`. Opening the device (any
// command) then reads each listed app's sealed bundle (Info.plist and entitlements, as
// install would, never following a symlink), gives it its groups the way install does (the
// app's lock, the groups' locks, containers staged and renamed into place after the commit,
// crash-safe alike) and drops its row in the same transaction. An app whose lock another
// appbox holds waits for the next command; a bundle that cannot be read, or lists a group
// of another team, is adopted without groups (its next update decides again). Once the
// table is empty, this costs one query per command.

import AppboxCore
import Foundation
import Glibc

extension Registry {
  /// Apps installed before app groups whose groups are yet to be given.
  func appsAwaitingGroups() throws -> [String] {
    try database.prepare("SELECT bundle_id FROM group_adoption ORDER BY bundle_id").rows { $0.text(0) ?? "" }
  }

  func markGroupsAdopted(_ bundleIdentifier: String) throws {
    try database.execute("DELETE FROM group_adoption WHERE bundle_id = ?1", .text(bundleIdentifier))
  }
}

extension DeviceSession {
  /// Gives apps installed before app groups the groups their bundles list (see above).
  func adoptGroupsOfEarlierInstalls() throws {
    let pending = try registry.appsAwaitingGroups()
    guard !pending.isEmpty else { return }
    do {
      try asMutatingSession {
        for bundleIdentifier in pending { try adoptGroups(of: bundleIdentifier) }
      }
    } catch is LockBusyError {
      // Another appbox holds the device's lock (or an app's, or a group's): a later command
      // adopts what is left.
    }
  }

  private func adoptGroups(of bundleIdentifier: String) throws {
    try lockApp(bundleIdentifier: bundleIdentifier)
    guard let app = try registry.appIfPresent(bundleIdentifier), let info = try? installedBundleInfo(of: app),
      let groups = info.entitlements?.applicationGroups, !groups.isEmpty
    else { return try registry.markGroupsAdopted(bundleIdentifier) }
    let change: GroupMembershipChange
    do {
      change = try prepareMembershipChange(
        bundleIdentifier: bundleIdentifier, team: info.entitlements?.teamIdentifier, groups: groups)
    } catch let error as ContainerError where error.code == .denied || error.code == .invalidBundle {
      return try registry.markGroupsAdopted(bundleIdentifier)  // another team's group: none
    }
    do {
      try registry.database.inTransaction {
        try change.commit(to: registry)
        try registry.markGroupsAdopted(bundleIdentifier)
      }
    } catch {
      change.discard(root: root)
      throw error
    }
    try change.finish(root: root)
  }

  /// The installed bundle's Info.plist and entitlements, validated as install does.
  func installedBundleInfo(of app: AppRecord) throws -> BundleInfo {
    let bundle = try OwnedFileDescriptor.open(
      home(of: app).bundlePath, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    let directory = bundle.borrowed
    func read(_ name: String) throws -> Data? {
      guard try directory.statusIfPresent(of: name)?.type == .regular else { return nil }
      let file = try directory.openOwned(name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK)
      return Data(try file.borrowed.readAll(limit: 4 << 20))
    }
    guard let info = try read("Info.plist") else {
      throw ContainerError(.invalidBundle, "\(app.bundleIdentifier)'s bundle has no Info.plist")
    }
    return try BundleInfo(
      infoPlist: info, entitlements: try read("archived-expanded-entitlements.xcent"),
      bundleName: app.bundleName, bundle: app.bundleDirectoryName)
  }
}
