// App group containers on the command line: `list --groups`, `path APP group.<id>`,
// `defaults … --suite group.<id>`, and group names where commands take an app (`backup`,
// `restore`, `snapshots`, `forget`). A name starting with `group.` always names a group
// (no bundle identifier may start so).

import AppboxBackup
import AppboxContainer
import AppboxCore
import AppboxRepository
import Foundation

/// Whether a command-line name (an APP argument) names an app group.
func namesGroup(_ name: String) -> Bool { AppGroupIdentifier.hasGroupPrefix(name) }

/// The group `identifier`, its lock taken (exit 66 when the device has no such group).
func lockedGroup(_ identifier: String, in session: DeviceSession) throws -> GroupRecord {
  guard let group = try session.lockGroup(identifier) else {
    throw ContainerError(
      .appNotFound,
      "No app group '\(identifier)' on this device: its container comes with the first of its apps to be "
        + "installed")
  }
  return group
}

/// `list --groups`: every group container with its team and members.
func groupList(_ groups: [GroupRecord], root: DeviceRoot) -> CommandOutput {
  let text =
    groups.isEmpty
    ? "No app groups."
    : table(
      ["GROUP ID", "CONTAINER ID", "TEAM", "MEMBERS"],
      groups.map { group in
        let former = group.formerMembers.map { $0 + " (former)" }
        return [
          group.identifier, group.containerID, group.teamIdentifier,
          (group.members + former).joined(separator: ", "),
        ]
      })
  return CommandOutput(
    text: text,
    json: .array(
      groups.map { group in
        .object([
          ("group", .string(group.identifier)), ("containerID", .string(group.containerID)),
          ("path", .string(root.groupContainer(group.containerID))),
          ("teamIdentifier", .string(group.teamIdentifier)),
          ("members", .array(group.members.map(JSONValue.string))),
          ("formerMembers", .array(group.formerMembers.map(JSONValue.string))),
        ])
      }))
}

/// The `--suite` option of `defaults` subcommands.
let suiteOption = CommandDescription.Option(
  "suite", value: "group.<id>",
  help: "An app group's shared defaults (Library/Preferences/<group-id>.plist in its container) instead "
    + "of the app's own; the app must be a member (else exit 77).")

extension DeviceSession {
  /// The preferences `defaults` works on: `app`'s own, or with `suite`, its group's shared
  /// defaults (taking the group's lock when `locking`).
  func defaultsPreferences(of app: AppRecord, suite: String?, locking: Bool) throws -> Preferences {
    guard let suite else { return preferences(of: app) }
    guard namesGroup(suite) else {
      throw UsageError("--suite takes an app group identifier (group.<name>), not '\(suite)'")
    }
    if locking { try lockGroup(suite) }
    return preferences(ofGroup: try group(suite, usedBy: app))
  }
}

extension CommandContext {
  /// Snapshots of `app`'s groups taken before its update (tag "pre-update"), by identifier.
  func preUpdateGroupSnapshots(of app: AppRecord, in session: DeviceSession, repository: Repository) throws
    -> [String: String]
  {
    var snapshots: [String: String] = [:]
    for group in try session.groups(of: app) {
      let result = try repository.backup(
        .group(group, in: session), in: session, options: BackupOptions(tag: "pre-update"))
      snapshots[group.identifier] = result.snapshot.id
      if result.snapshot.isIncomplete {
        warn(
          "the pre-update snapshot \(result.snapshot.id) of \(group.identifier) is incomplete: "
            + incompleteSummary(result.snapshot))
      }
    }
    return snapshots
  }
}

/// "group.a (snapshot 1a2b3c4d), group.b (…)" for reports.
func groupSnapshotList(_ snapshots: [String: String]) -> String {
  snapshots.sorted { $0.key < $1.key }.map { "\($0.key) (snapshot \($0.value))" }.joined(separator: ", ")
}

/// `[{"group": "group.a", "snapshot": "1a2b3c4d"}, …]` in name order (group results are
/// arrays of objects naming their group, in every command).
func groupSnapshotJSON(_ snapshots: [String: String]) -> JSONValue {
  .array(
    snapshots.sorted { $0.key < $1.key }.map {
      .object([("group", .string($0.key)), ("snapshot", .string($0.value))])
    })
}
