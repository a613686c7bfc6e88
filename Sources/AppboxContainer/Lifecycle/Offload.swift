// `offload APP` (the platform's Offload App) and installing an offloaded app again.
//
// Offload (the app's lock and exclusive running lock held), rolled forward from its journal
// entry `offload-<CONTAINER-ID>` (LifecycleRecovery.swift):
// 1. journal; 2. rename the bundle into `ApplicationRoot/.discard-<UUID>` (one rename);
// 3. sync the home; 4. mark the registry row offloaded and record the event (one
// transaction, only while the row is not offloaded yet); 5. remove the entry; 6. after the
// report, delete the discard directory. A step that fails with an error (not a kill) puts
// the bundle back and removes the entry: the command fails and the app is as it was. The data, the container id, the app's groups and
// its keychain items stay; `launch` and `run` exit 69 until it is installed again.
//
// Installing the same bundle identifier again (`install`): a bundle of the same version,
// team, keychain groups and app groups goes back into the same home; anything else is an
// update (a new home, the data moved), the route a newer version takes too. The reinstall
// stages and seals the bundle as install does, then, journaled as `reinstall-<ID>`:
// 1. journal; 2. rename the staged bundle into the home; 3. sync; 4. the commit: one
// transaction makes the row installed again with the new bundle's seal and modes and
// records the event; 5. delete the rest of the staging home; 6. remove the entry.
// Recovery rolls forward after the commit (the row is installed with the entry's seal) and
// back before it (the bundle leaves the home again, the staging home goes).

import AppboxCore
import Foundation
import Glibc

/// What an offload did.
public struct OffloadReport: Sendable {
  public var app: AppRecord
  public var home: String
  /// The bundle's directory name, as it was.
  public var bundle: String
  /// What went wrong after the offload was done (it stands).
  public var warnings: [String] = []
}

extension DeviceSession {
  /// Offloads `app` (see the header). Refused with 75 while it runs; an offloaded app is
  /// `.alreadyExists` (73). Needs the app's lock.
  public func offload(_ app: AppRecord) throws -> OffloadReport {
    precondition(isLocked(app.bundleIdentifier), "offload needs the app's lock")
    guard !app.isOffloaded else {
      throw ContainerError(
        .alreadyExists, "\(app.bundleIdentifier) is offloaded already (install its bundle to bring it back)")
    }
    let running = try ensureNotRunning(app)
    defer { withExtendedLifetime(running) {} }
    let journal = Journal(root: root)
    let entry = Lifecycle.offloadPrefix + app.containerID
    let fields = [
      "bundleIdentifier": app.bundleIdentifier, "containerID": app.containerID,
      "discard": Lifecycle.newDiscardName(), "bundle": app.bundleDirectoryName,
      "started": String(Date().timeIntervalSince1970),
    ]
    try journal.write(entry, fields)
    CrashPoint.hit("offload.journaled")
    let ((), warnings) = try completeJournaled(
      "offload", entry: entry, in: journal, fields: fields, putting: [app.bundleDirectoryName],
      backInto: app.containerID, finishedPoint: "offload.finished"
    ) { try finishOffload(fields) }
    return OffloadReport(
      app: try registry.app(app.bundleIdentifier), home: root.home(app.containerID),
      bundle: app.bundleDirectoryName, warnings: warnings)
  }

  /// Steps 2-4 of an offload, for `offload` and for recovery. Idempotent.
  func finishOffload(_ fields: [String: String]) throws {
    guard let identifier = fields["bundleIdentifier"], let containerID = fields["containerID"],
      let discardName = fields["discard"], discardName.hasPrefix(Lifecycle.discardPrefix),
      let bundle = fields["bundle"], bundle.hasSuffix(".app"), !bundle.contains("/")
    else {
      throw ContainerError(.invalidDevice, "An offload's journal entry lacks its fields; inspect it by hand")
    }
    guard let app = try registry.appIfPresent(identifier), app.containerID == containerID else { return }
    let applicationRoot = try OwnedFileDescriptor.open(root.applicationRoot, O_RDONLY | O_DIRECTORY)
    try Lifecycle.makeDirectoryIfMissing(discardName, in: applicationRoot.borrowed)
    let discard = try applicationRoot.borrowed.openOwned(discardName, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    let home = try applicationRoot.borrowed.openOwned(containerID, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    try Lifecycle.setAside(bundle, from: home.borrowed, into: discard.borrowed)
    try discard.borrowed.sync()
    try home.borrowed.sync()
    CrashPoint.hit("offload.moved")
    try registry.database.inTransaction {
      try registry.database.execute(
        "UPDATE apps SET offloaded_at = ?1 WHERE bundle_id = ?2 AND offloaded_at IS NULL",
        .real(Date().timeIntervalSince1970), .text(identifier))
      if registry.database.changes > 0 {
        try registry.record(
          .init(
            bundleIdentifier: identifier, event: "offload", containerID: containerID, version: app.version))
      }
    }
  }

  /// Whether the staged bundle can go back into `app`'s home: the same version, team,
  /// keychain groups and app groups as the offloaded one (anything else is an update).
  func canReinstall(_ app: AppRecord, with staged: StagedHome) -> Bool {
    BundleVersion(app.version) == staged.info.version
      && app.teamIdentifier == staged.info.entitlements?.teamIdentifier
      && app.keychainAccessGroups == (staged.info.entitlements?.keychainAccessGroups ?? [])
      && ((try? registry.groups(of: app.bundleIdentifier).map(\.identifier)) ?? [])
        == (staged.info.entitlements?.applicationGroups ?? [])
  }

  /// Puts the staged bundle back into offloaded `app`'s home (see the header) and removes
  /// the staging home. Needs the app's lock.
  func reinstall(_ app: AppRecord, from staged: StagedHome) throws -> InstallResult {
    precondition(isLocked(app.bundleIdentifier), "reinstall needs the app's lock")
    let running = try ensureNotRunning(app)
    defer { withExtendedLifetime(running) {} }
    let journal = Journal(root: root)
    let entry = Lifecycle.reinstallPrefix + app.containerID
    let fields = [
      "bundleIdentifier": app.bundleIdentifier, "containerID": app.containerID, "staging": staged.stagingName,
      "bundle": staged.bundleDirectoryName, "seal": staged.seal,
    ]
    try journal.write(entry, fields)
    CrashPoint.hit("reinstall.journaled")
    do {
      let applicationRoot = try OwnedFileDescriptor.open(root.applicationRoot, O_RDONLY | O_DIRECTORY)
      let staging = try applicationRoot.borrowed.openOwned(
        staged.stagingName, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
      let home = try applicationRoot.borrowed.openOwned(app.containerID, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
      if try home.borrowed.statusIfPresent(of: staged.bundleDirectoryName) == nil {
        try staging.borrowed.rename(
          staged.bundleDirectoryName, to: staged.bundleDirectoryName, in: home.borrowed, flags: .noReplace)
      }
      try home.borrowed.sync()
      CrashPoint.hit("reinstall.moved")
      var record = staged.record(installedAt: app.installedAt, uid: app.uid)
      record.containerID = app.containerID
      record.updatedAt = app.updatedAt
      try registry.database.inTransaction {
        try registry.replace(record)
        try registry.record(
          .init(
            bundleIdentifier: app.bundleIdentifier, event: "reinstall", containerID: app.containerID,
            version: record.version))
      }
      CrashPoint.hit("reinstall.committed")
    } catch {
      try? finishReinstall(fields)  // rolls back: the bundle leaves the home, staging goes
      try? journal.remove(entry)
      throw error
    }
    try finishReinstall(fields)
    try journal.remove(entry)
    CrashPoint.hit("reinstall.finished")
    return InstallResult(app: try registry.app(app.bundleIdentifier), home: root.home(app.containerID))
  }

  /// After a reinstall's commit, deletes its staging home; before it, takes the bundle out
  /// of the home again and deletes the staging home (see the header). Idempotent.
  func finishReinstall(_ fields: [String: String]) throws {
    guard let identifier = fields["bundleIdentifier"], let containerID = fields["containerID"],
      let stagingName = fields["staging"], stagingName.hasPrefix(HomeStaging.prefix),
      !stagingName.contains("/"),
      let bundle = fields["bundle"], bundle.hasSuffix(".app"), !bundle.contains("/"),
      let seal = fields["seal"]
    else {
      throw ContainerError(.invalidDevice, "A reinstall's journal entry lacks its fields; inspect it by hand")
    }
    let applicationRoot = try OwnedFileDescriptor.open(root.applicationRoot, O_RDONLY | O_DIRECTORY)
    let app = try registry.appIfPresent(identifier)
    let committed = app.map { !$0.isOffloaded && $0.seal == seal && $0.containerID == containerID } ?? false
    if !committed, let app, app.isOffloaded, app.containerID == containerID,
      try applicationRoot.borrowed.statusIfPresent(of: containerID) != nil
    {
      let home = try applicationRoot.borrowed.openOwned(containerID, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
      if try home.borrowed.statusIfPresent(of: bundle) != nil {
        // Back into the staging home when it is still there, else deleted.
        if try applicationRoot.borrowed.statusIfPresent(of: stagingName) != nil {
          let staging = try applicationRoot.borrowed.openOwned(
            stagingName, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
          if try staging.borrowed.statusIfPresent(of: bundle) == nil {
            try home.borrowed.rename(bundle, to: bundle, in: staging.borrowed, flags: .noReplace)
          } else {
            try FileTree.remove(bundle, in: home.borrowed)
          }
        } else {
          try FileTree.remove(bundle, in: home.borrowed)
        }
        try home.borrowed.sync()
      }
    }
    try FileTree.remove(stagingName, in: applicationRoot.borrowed)
    try applicationRoot.borrowed.sync()
  }
}
