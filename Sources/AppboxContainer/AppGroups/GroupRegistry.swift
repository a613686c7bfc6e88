// App groups in the registry.
//
// Tables (Registry.migrations, version 3):
//   app_groups(group_id, container_id, team_id, uid, created_at)   one row per live container
//   group_members(group_id, bundle_id, active)                     who may use it
//   group_users(group_id, uid)                                     each group's uid, kept after
//                                                                  the group goes (as app_users)
// Invariants: a group row exists exactly while some installed app has a membership row for it
// (`Registry.remove(bundleIdentifier:)` drops the app's rows and every group left without
// one, in the caller's transaction); its container `Shared/AppGroup/<container_id>` exists
// under that name whenever the row is committed and no install, uninstall or restore of it
// is in flight (GroupLifecycle.swift, GroupRecovery). `active` is 0 for a former member: an
// app whose update dropped the group. It keeps the group (and its data) alive until it is
// uninstalled, but is no member: its jail does not show the group, and `path`, `defaults
// --suite` refuse it (77). An update that lists the group again makes it a member again.

import AppboxCore
import AppboxStore
import Foundation

/// App group identifiers: `group.` followed by a reverse-DNS name (the platform's rule on
/// iOS, where the identifier is registered to one team; macOS's team-prefixed identifiers
/// are not app groups here).
public enum AppGroupIdentifier {
  /// The entitlement listing an app's groups.
  public static let entitlement = "com.apple.security.application-groups"
  public static let prefix = "group."
  /// How many groups one app may list (each one is a mount in its jail).
  public static let maximumPerApp = 16

  /// Whether `name` starts with `group.`: names an app group, never an app.
  public static func hasGroupPrefix(_ name: String) -> Bool { name.hasPrefix(prefix) }

  /// Whether `identifier` is `group.` followed by at least two labels of letters, digits and
  /// '-' (255 bytes at most in all).
  public static func isValid(_ identifier: String) -> Bool {
    guard hasGroupPrefix(identifier), BundleInfo.isValidIdentifier(identifier) else { return false }
    return identifier.dropFirst(prefix.count).split(separator: ".").count >= 2
  }
}

/// An app group's container as the registry records it.
public struct GroupRecord: Sendable, Equatable {
  public var identifier: String
  /// The container's opaque id: `Shared/AppGroup/<CONTAINER-ID>`, kept across member updates.
  public var containerID: String
  /// The team the group belongs to: that of the app that brought it to the device.
  public var teamIdentifier: String
  /// The uid (and gid) that owns the container's files on disk when appbox runs as root.
  public var uid: UInt32
  public var createdAt: Date
  /// Installed apps whose entitlements list the group, by bundle identifier.
  public var members: [String] = []
  /// Apps whose update dropped the group: they keep it until they are uninstalled.
  public var formerMembers: [String] = []

  public init(
    identifier: String, containerID: String, teamIdentifier: String, uid: UInt32, createdAt: Date = Date(),
    members: [String] = [], formerMembers: [String] = []
  ) {
    self.identifier = identifier
    self.containerID = containerID
    self.teamIdentifier = teamIdentifier
    self.uid = uid
    self.createdAt = createdAt
    self.members = members
    self.formerMembers = formerMembers
  }
}

extension Registry {
  private static let groupColumns = "group_id, container_id, team_id, uid, created_at"

  private func groupRecords(_ statement: Statement) throws -> [GroupRecord] {
    var records = try statement.rows { row in
      GroupRecord(
        identifier: row.text(0) ?? "", containerID: row.text(1) ?? "", teamIdentifier: row.text(2) ?? "",
        uid: UInt32(truncatingIfNeeded: row.int64(3)), createdAt: Date(timeIntervalSince1970: row.double(4)))
    }
    let members = try database.prepare(
      "SELECT bundle_id, active FROM group_members WHERE group_id = ?1 ORDER BY bundle_id")
    for index in records.indices {
      try members.bind([.text(records[index].identifier)])
      for (bundle, active) in try members.rows({ ($0.text(0) ?? "", $0.int64(1) != 0) }) {
        if active {
          records[index].members.append(bundle)
        } else {
          records[index].formerMembers.append(bundle)
        }
      }
    }
    return records
  }

  /// Every app group on the device, by identifier.
  public func groups() throws -> [GroupRecord] {
    try groupRecords(database.prepare("SELECT \(Self.groupColumns) FROM app_groups ORDER BY group_id"))
  }

  /// The group whose identifier or container id is `name`, or nil.
  public func groupIfPresent(_ name: String) throws -> GroupRecord? {
    let statement = try database.prepare(
      "SELECT \(Self.groupColumns) FROM app_groups WHERE group_id = ?1 OR container_id = ?1 COLLATE NOCASE")
    try statement.bind([.text(name)])
    return try groupRecords(statement).first
  }

  /// The groups app `bundleIdentifier` is a member of (with `includingFormer`, also those it
  /// keeps as a former member), by identifier.
  public func groups(of bundleIdentifier: String, includingFormer: Bool = false) throws -> [GroupRecord] {
    let statement = try database.prepare(
      """
      SELECT \(Self.groupColumns) FROM app_groups WHERE group_id IN
        (SELECT group_id FROM group_members WHERE bundle_id = ?1 AND (active = 1 OR ?2 = 1))
      ORDER BY group_id
      """)
    try statement.bind([.text(bundleIdentifier), .integer(includingFormer ? 1 : 0)])
    return try groupRecords(statement)
  }

  /// The uid group `identifier` had or has on this device, or a new one no app or group here
  /// ever had (recorded by `insert(group:)`).
  func groupUID(for identifier: String) throws -> UInt32 {
    let statement = try database.prepare("SELECT uid FROM group_users WHERE group_id = ?1")
    try statement.bind([.text(identifier)])
    if let known = try statement.rows({ $0.int64(0) }).first { return UInt32(truncatingIfNeeded: known) }
    return try unusedUID()
  }

  /// Adds a group's row (inside the caller's transaction), without members.
  func insert(group: GroupRecord) throws {
    try database.execute(
      "INSERT OR IGNORE INTO group_users(group_id, uid) VALUES (?1, ?2)", .text(group.identifier),
      .integer(Int64(group.uid)))
    try database.execute(
      "INSERT INTO app_groups(\(Self.groupColumns)) VALUES (?1, ?2, ?3, ?4, ?5)", .text(group.identifier),
      .text(group.containerID), .text(group.teamIdentifier), .integer(Int64(group.uid)),
      .real(group.createdAt.timeIntervalSince1970))
  }

  /// Makes app `bundleIdentifier` a member (or, not `active`, a former member) of `group`.
  func setMembership(of bundleIdentifier: String, in group: String, active: Bool) throws {
    try database.execute(
      """
      INSERT INTO group_members(group_id, bundle_id, active) VALUES (?1, ?2, ?3)
      ON CONFLICT(group_id, bundle_id) DO UPDATE SET active = excluded.active
      """, .text(group), .text(bundleIdentifier), .integer(active ? 1 : 0))
  }

  /// Drops app `bundleIdentifier`'s memberships, and the rows of groups left with none.
  func removeMemberships(of bundleIdentifier: String) throws {
    try database.execute("DELETE FROM group_members WHERE bundle_id = ?1", .text(bundleIdentifier))
    try database.execute(
      "DELETE FROM app_groups WHERE group_id NOT IN (SELECT group_id FROM group_members)")
  }
}
