import AppboxCore
import Foundation
import Glibc

/// The result of an install.
public struct InstallResult: Sendable {
  public var app: AppRecord
  public var home: String
  /// The app groups this install created (the device had none of their containers).
  public var createdGroups: [String] = []
  /// The app was offloaded and its bundle went back into the same home (Lifecycle/Offload.swift).
  public var reinstalled = false
  /// The app was offloaded at another version: the install was that update's.
  public var update: UpdateReport? = nil
}

extension DeviceSession {
  /// Installs the bundle at `bundlePath` into a new home: validates and seals a staged
  /// copy, commits the registry row, then renames the home into place. All or nothing:
  /// a refused bundle leaves nothing under ApplicationRoot.
  /// `checkingGroups`, when given, sees the app (its team) and the groups the install would
  /// create before anything is committed, and may refuse by throwing (a restore checks that
  /// the snapshots it would put into them are the team's).
  /// An offloaded app of the same identifier (Lifecycle/Offload.swift) gets the bundle back
  /// into its home when it is the same build, else `updatingOffloaded` updates it (an older
  /// version is refused, 65); without it, an offloaded app is installed already (73).
  public func install(
    bundleAt bundlePath: String, checkingGroups: ((AppRecord, [GroupRecord]) throws -> Void)? = nil,
    updatingOffloaded: ((AppRecord) throws -> UpdateReport)? = nil
  ) throws -> InstallResult {
    precondition(isLocked, "install needs a mutating session")
    let staged = try HomeStaging.stage(bundleAt: bundlePath, root: root, device: identity)
    let applicationRoot = try FileDescriptor.open(root.applicationRoot, O_RDONLY | O_DIRECTORY)
    defer { applicationRoot.close() }
    var groups: GroupMembershipChange?
    do {
      // The identifier is known once the bundle is staged: from here on the app is ours.
      if let existing = try lockApp(bundleIdentifier: staged.info.identifier) {
        if existing.isOffloaded,
          let result = try installOffloaded(
            existing, staged: staged, updating: updatingOffloaded, in: applicationRoot)
        {
          return result
        }
        throw ContainerError(
          .alreadyInstalled,
          "'\(staged.info.identifier)' is already installed (version \(existing.version), container "
            + "\(existing.containerID)); use 'appbox update \(staged.info.identifier) BUNDLE.app' to replace it"
        )
      }
      let app = staged.record(uid: try registry.uid(for: staged.info.identifier))
      try refuseTeamLookalike(app)
      let change = try prepareMembershipChange(
        bundleIdentifier: app.bundleIdentifier, team: app.teamIdentifier,
        groups: staged.info.entitlements?.applicationGroups ?? [])
      groups = change
      try checkingGroups?(app, change.created.map(\.record))
      if let owner = AppUser.dataOwner(of: app) {
        let staging = try applicationRoot.open(staged.stagingName, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
        try staging.closeAfter { try DataOwnership.handOverStandardDirectories(in: $0, to: owner) }
      }
      try registry.database.inTransaction {
        try registry.insert(app)
        try registry.record(
          .init(
            bundleIdentifier: app.bundleIdentifier, event: "install",
            containerID: app.containerID, version: app.version))
        try change.commit(to: registry)
      }
      CrashPoint.hit("install.committed")
      try change.finish(root: root)
      try applicationRoot.rename(staged.stagingName, to: staged.containerID, flags: .noReplace)
      try applicationRoot.sync()
      return InstallResult(app: app, home: root.home(app.containerID), createdGroups: change.createdGroups)
    } catch {
      if (try? registry.appIfPresent(staged.info.identifier))??.containerID != staged.containerID {
        try? FileTree.remove(staged.stagingName, in: applicationRoot)
        groups?.discard(root: root)
      }
      throw error
    }
  }

  /// `install` of a bundle whose app is offloaded: back into the same home, or an update
  /// through `updating` (nil when there is none to do it).
  private func installOffloaded(
    _ app: AppRecord, staged: StagedHome, updating: ((AppRecord) throws -> UpdateReport)?,
    in applicationRoot: FileDescriptor
  ) throws -> InstallResult? {
    if canReinstall(app, with: staged) {
      var result = try reinstall(app, from: staged)
      result.reinstalled = true
      return result
    }
    guard let updating else { return nil }
    if let installed = BundleVersion(app.version), staged.info.version < installed {
      throw ContainerError(
        .invalidBundle,
        "\(app.bundleIdentifier) is offloaded at version \(installed); \(staged.info.version) is older: "
          + "use 'appbox update \(app.bundleIdentifier) BUNDLE.app --allow-downgrade' to go back")
    }
    try? FileTree.remove(staged.stagingName, in: applicationRoot)
    let report = try updating(app)
    return InstallResult(app: try registry.app(app.bundleIdentifier), home: report.newHome, update: report)
  }

  /// Refuses (65) a bundle identifier whose first label is the team identifier of another
  /// installed app's team: it would read as that team's application identifier (the shape of
  /// the platform's team identifiers is refused for every bundle, BundleInfo.swift).
  func refuseTeamLookalike(_ app: AppRecord) throws {
    let first = String(app.bundleIdentifier.prefix { $0 != "." })
    guard first.count < app.bundleIdentifier.count, first != app.teamIdentifier,
      let owner = try registry.apps().first(where: { $0.teamIdentifier == first })
    else { return }
    throw ContainerError(
      .invalidBundle,
      "Invalid bundle '\(app.bundleDirectoryName)': CFBundleIdentifier '\(app.bundleIdentifier.prefix(60))' starts "
        + "with '\(first).', the team identifier of \(owner.bundleIdentifier): it would pass for that team's "
        + "application identifier")
  }

  /// Validates, copies and seals the bundle at `bundlePath` into a new staging home (with
  /// a new container id and empty standard directories), for `replaceHome` to switch to.
  public func stageHome(bundleAt bundlePath: String) throws -> StagedHome {
    try HomeStaging.stage(bundleAt: bundlePath, root: root, device: identity)
  }

  /// Removes a staged home that will not be used.
  public func discard(_ staged: StagedHome) {
    try? FileTree.remove(atPath: root.applicationRoot + "/" + staged.stagingName)
  }

  /// Removes the app: its home (renamed to trash first, so a crash finishes the job on
  /// the next run), its registry row, the containers of app groups no other app keeps (see
  /// AppGroups/GroupLifecycle.swift), the keychain items no other installed app can reach,
  /// and whatever `alsoRemove` does, inside the registry transaction. The keychain is a
  /// separate database: if its deletion commits and the registry's does not, the trash and
  /// the row are still there and recovery finishes the uninstall (deletion is idempotent).
  /// A running app is refused (exit 75). Once the registry has committed, the uninstall
  /// has happened: a failure to delete the trash after that is returned as a warning (the
  /// next recovery deletes it), never thrown.
  @discardableResult
  public func uninstall(_ app: AppRecord, alsoRemove: (() throws -> Void)? = nil) throws -> [String] {
    precondition(isLocked(app.bundleIdentifier), "uninstall needs the app's lock")
    let running = try ensureNotRunning(app)
    defer { withExtendedLifetime(running) {} }
    // Opened first: a keychain that cannot open (say, its device key is gone) refuses the
    // uninstall before anything moves, rather than leaving trash every later command trips on.
    let keychain = try openKeychain()
    try lockGroups(of: app)
    let applicationRoot = try FileDescriptor.open(root.applicationRoot, O_RDONLY | O_DIRECTORY)
    defer { applicationRoot.close() }
    let trash = HomeStaging.trashPrefix + app.containerID
    if try applicationRoot.statusIfPresent(of: app.containerID) != nil {
      try applicationRoot.rename(app.containerID, to: trash, flags: .noReplace)
      try applicationRoot.sync()
    }
    let groupTrash = try trashGroupsLeftBehind(by: app)
    CrashPoint.hit("uninstall.trashed")
    try registry.database.inTransaction {
      try registry.remove(bundleIdentifier: app.bundleIdentifier)
      try registry.record(
        .init(
          bundleIdentifier: app.bundleIdentifier, event: "uninstall",
          previousContainerID: app.containerID, previousVersion: app.version))
      try deleteKeychainItems(of: app, in: keychain)
      try alsoRemove?()
    }
    CrashPoint.hit("uninstall.committed")
    removeRunningLock(of: app)
    removeLaunchRecords(of: app)
    let warnings = removeGroupTrash(groupTrash)
    do {
      try FileTree.remove(trash, in: applicationRoot)
      return warnings
    } catch {
      return ["the old home could not be deleted yet (\(error)); the next appbox command finishes it"]
        + warnings
    }
  }
}
