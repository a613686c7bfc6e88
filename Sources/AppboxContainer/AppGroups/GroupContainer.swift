// An app group's container on disk, and in its members' jails.
//
// Layout (as the simulator keeps them):
//   <root>/Shared/AppGroup/<CONTAINER-ID>/            0700, the group's data
//       .com.apple.mobile_container_manager.metadata.plist   MCMMetadataIdentifier = the group id,
//                                                     MCMMetadataUUID, MCMMetadataContentClass 7,
//                                                     AppboxTeamIdentifier = the owning team
//       Library/  Library/Preferences/  Library/Caches/
// Everything in it is the members' data: apps may write anywhere inside (as on the platform,
// where the container's top is theirs too), so appbox never trusts what it finds there; the
// registry, not the metadata plist, says whose it is.
//
// Ownership. Each group has a uid (and gid) of its own, from the apps' range. As root, every
// file of the container belongs to it, and each member's jail shows the container through an
// idmapped mount that maps that uid to the member's own (`Jail.addDataDirectory(_:at:owner:)`,
// `enter --stage shared=UID:PATH`): every member sees the group's files as its own and creates
// files that belong to the group on disk, whatever modes it asks for. On the platform all apps
// run as one user (`mobile`), so this is the same sharing. (A setgid directory with a default
// ACL would not be: the ACL mask follows the mode a program asks for, so a database one member
// creates 0644, as SQLite does, would be read-only for the others, and no member could chmod
// another's files.) Unprivileged, every app's files already belong to the caller, which each
// jail maps to the app's uid: nothing to map.
//
// In the jail a group's container is `/var/mobile/Containers/Shared/AppGroup/<CONTAINER-ID>`
// (the platform's path), read-write, nosuid, nodev, noexec, with a Landlock read-write rule;
// `APPBOX_APP_GROUP_CONTAINERS` lists them as `group.id=/path` entries separated by ':'.

import AppboxCore
import AppboxPlist
import Foundation
import Glibc

extension DeviceRoot {
  /// The container of app group container `containerID`.
  public func groupContainer(_ containerID: String) -> String { appGroupRoot + "/" + containerID }
}

/// The layout of app group containers.
public enum GroupContainer {
  /// The directories every group container has (created with it, recreated by a restore).
  public static let standardDirectories = ["Library", "Library/Preferences", "Library/Caches"]
  /// MCMMetadataContentClass of a group container (an app's data container is 2).
  static let metadataContentClass: Int64 = 7
  /// Where the jail shows its app's group containers.
  public static let jailDirectory = "/var/mobile/Containers/Shared/AppGroup"
  /// The variable naming them in the app's environment.
  public static let environmentVariable = "APPBOX_APP_GROUP_CONTAINERS"
  static let stagingPrefix = HomeStaging.prefix
  static let trashPrefix = HomeStaging.trashPrefix

  /// The metadata plist's contents for `group`.
  static func metadata(of group: GroupRecord) -> Data {
    PropertyList.dictionary([
      "MCMMetadataIdentifier": .string(group.identifier),
      "MCMMetadataUUID": .string(group.containerID),
      "MCMMetadataContentClass": .integer(metadataContentClass),
      "AppboxTeamIdentifier": .string(group.teamIdentifier),
    ]).binaryData()
  }

  /// Writes the metadata plist naming `group` in the container open at `container`.
  public static func writeMetadata(of group: GroupRecord, in container: FileDescriptor) throws {
    try AtomicFile.write(metadata(of: group), to: Home.metadataFile, in: container, durable: false)
  }

  /// Creates the standard directories the container open at `container` lacks (a symlink or
  /// a file in their place is left alone: the data recorded it so).
  public static func addStandardDirectories(in container: FileDescriptor) throws {
    for path in standardDirectories {
      let parent = splitPath(path).directory
      let parentType = path.contains("/") ? try container.statusIfPresent(of: parent)?.type : .directory
      guard parentType == .directory, try container.statusIfPresent(of: path) == nil else { continue }
      try container.makeDirectory(path, mode: 0o755)
    }
  }

  /// Builds an empty container for `group` under a staging name in Shared/AppGroup
  /// (`.staging-<CONTAINER-ID>`), durable, belonging to the group's uid as root. Returns the
  /// staging name; the caller renames it into place once the registry names the group.
  static func stage(_ group: GroupRecord, root: DeviceRoot) throws -> String {
    let parent = try OwnedFileDescriptor.open(root.appGroupRoot, O_RDONLY | O_DIRECTORY)
    let name = stagingPrefix + group.containerID
    try parent.borrowed.makeDirectory(name, mode: 0o700)
    do {
      let staging = try parent.borrowed.openOwned(name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
      try addStandardDirectories(in: staging.borrowed)
      try writeMetadata(of: group, in: staging.borrowed)
      try staging.borrowed.setPermissions(0o700)
      if let owner = GroupOwnership.dataOwner(of: group) {
        try DataOwnership.handOverTree(of: staging.borrowed, to: owner)
      }
      try staging.borrowed.syncFileSystem()
      return name
    } catch {
      try? FileTree.remove(name, in: parent.borrowed)
      throw error
    }
  }
}

/// Who owns a group's files on disk.
public enum GroupOwnership {
  /// The group's uid when appbox runs as root; nil unprivileged (the caller owns everything).
  public static func dataOwner(of group: GroupRecord) -> UInt32? { AppUser.isPrivileged ? group.uid : nil }
}

extension DeviceSession {
  /// Makes sure the containers of `app`'s groups belong to the uid they are shown as: as
  /// root, hands a container over when its top belongs to someone else (it was used by an
  /// unprivileged appbox); unprivileged, refuses (exit 77) one a root appbox gave away.
  func prepareGroupDataOwnership(of app: AppRecord) throws {
    for group in try registry.groups(of: app.bundleIdentifier) {
      let container = try OwnedFileDescriptor.open(
        root.groupContainer(group.containerID), O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
      let owner = try container.borrowed.status().uid
      if let wanted = GroupOwnership.dataOwner(of: group) {
        if owner != wanted { try DataOwnership.handOverTree(of: container.borrowed, to: wanted) }
      } else if owner != geteuid() {
        throw ContainerError(
          .denied,
          "Cannot run \(app.bundleIdentifier) as uid \(geteuid()): the container of its app group "
            + "\(group.identifier) belongs to another user (a root appbox gave it to the group's uid "
            + "\(group.uid)); run appbox as root for this device")
      }
    }
  }

  /// Shows `app`'s groups' containers in `jail`, and names them in its environment.
  func addGroupContainers(of app: AppRecord, to jail: inout Jail) throws {
    var entries: [String] = []
    for group in try registry.groups(of: app.bundleIdentifier) {
      let inside = GroupContainer.jailDirectory + "/" + group.containerID
      jail.addDataDirectory(root.groupContainer(group.containerID), at: inside, owner: group.uid)
      entries.append(group.identifier + "=" + inside)
    }
    if !entries.isEmpty {
      jail.environment[GroupContainer.environmentVariable] = entries.joined(separator: ":")
    }
  }
}
