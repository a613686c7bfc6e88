// What a snapshot is of: the boundary between the backup engine and what it backs up.
//
// The engine (scan, change detection, archive, trees, catalog; materializing on restore)
// sees a directory, a name and a few rules; it never asks whether that is an app's home or
// an app group's shared container. Snapshots record the subject's name in their `app` field
// (a bundle identifier, or a group identifier: `group.…`, which no bundle identifier starts
// with), its container id, and for an app its version, bundle directory and seal; a group
// has no bundle, version or seal (recorded empty).
//
//   subject   directory                          left out                       extras
//   app       ApplicationRoot/<ID>               <Name>.app (stored on the     keychain items
//                                                first snapshot and when its
//                                                seal changes), Library/Caches,
//                                                tmp
//   group     Shared/AppGroup/<ID>               Library/Caches                 none

import AppboxContainer
import AppboxCore
import AppboxRepository

/// An app's home or an app group's container, as the backup engine sees it.
public struct BackupSubject: Sendable {
  public enum Kind: Sendable {
    case app(AppRecord)
    case group(GroupRecord)
  }

  public let kind: Kind
  /// The name snapshots record (`app`), and the repository's writer lock is named after.
  public let name: String
  public let containerID: String
  /// The directory backed up.
  public let path: String
  /// For an app: its version, bundle directory ("Notes.app") and seal; empty for a group.
  public let version: String
  public let bundleDirectoryName: String
  public let seal: String
  /// For a group: the team that owns it on this device, recorded with its snapshots so that a
  /// restore puts them back only into that team's group (GroupRestore.swift). nil for an app.
  public var team: String? = nil

  /// `app`'s home on the device of `session`.
  public static func app(_ app: AppRecord, in session: DeviceSession) -> BackupSubject {
    BackupSubject(
      kind: .app(app), name: app.bundleIdentifier, containerID: app.containerID,
      path: session.home(of: app).path, version: app.version, bundleDirectoryName: app.bundleDirectoryName,
      seal: app.seal)
  }

  /// App group `group`'s container on the device of `session`.
  public static func group(_ group: GroupRecord, in session: DeviceSession) -> BackupSubject {
    BackupSubject(
      kind: .group(group), name: group.identifier, containerID: group.containerID,
      path: session.root.groupContainer(group.containerID), version: "", bundleDirectoryName: "", seal: "",
      team: group.teamIdentifier)
  }

  /// Whether the subject has a bundle (stored by its own rule).
  var hasBundle: Bool { !bundleDirectoryName.isEmpty }

  /// The app, when the subject is one.
  var app: AppRecord? {
    if case .app(let app) = kind { return app }
    return nil
  }

  /// What the scan leaves out; `includeBundle`: the bundle changed since it was last stored.
  func scanRules(includeBundle: Bool) -> ScanRules {
    var rules = ScanRules(
      bundleDirectoryName: bundleDirectoryName, includeBundle: includeBundle || !hasBundle)
    if case .group = kind { rules.skipsTemporaryDirectory = false }
    return rules
  }
}
