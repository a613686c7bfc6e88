import AppboxCore
import Foundation
import Glibc

/// What an update did, for the migration report.
public struct UpdateReport: Sendable {
  public var bundleIdentifier: String
  public var oldContainerID: String
  public var newContainerID: String
  public var oldVersion: String
  public var newVersion: String
  public var newHome: String
  /// Documents and Library as moved (Library/Caches included).
  public var movedFiles: Int
  public var movedBytes: Int64
  /// What was left behind: tmp's contents and stray top-level items.
  public var droppedTmpFiles: Int
  public var droppedTmpBytes: Int64
  public var droppedItems: [String]
  public var preUpdateSnapshot: String?
  /// Entries the pre-update snapshot could not read (0: it is complete), and the first of
  /// their paths, shortened. The update proceeds either way.
  public var preUpdateUnreadable = 0
  public var preUpdateUnreadablePaths: [[UInt8]] = []
  /// Files (relative to the new home) that still mention the old home's absolute path.
  public var staleAbsolutePaths: [String]
  public var snapshotSeconds: Double
  /// The migration itself: moving the data, committing, switching homes (the old home is
  /// only renamed to trash here; it is deleted once the command has reported).
  public var migrationSeconds: Double
  /// Measuring what was dropped and what moved, and the stale-path survey (bounded: at most
  /// 5,000 files are read), after the migration.
  public var surveySeconds: Double = 0
  public var totalSeconds: Double
  /// The snapshots taken of the app's groups before the update, by group identifier (their
  /// containers are kept as they are; `revert --with-groups` restores these).
  public var preUpdateGroupSnapshots: [String: String] = [:]
  /// The app groups the app is a member of after the update.
  public var groups: [String] = []
  /// The update happened, but something after its commit failed (the next command finishes it).
  public var warnings: [String] = []
}

/// What the snapshot an update takes first recorded.
public struct PreUpdateSnapshot: Sendable {
  public var id: String
  /// Entries it could not read (0: complete), and the first of their paths, shortened.
  public var unreadable: Int
  public var unreadablePaths: [[UInt8]]
  /// The snapshots taken of the app's groups, by group identifier.
  public var groups: [String: String]

  public init(
    id: String, unreadable: Int = 0, unreadablePaths: [[UInt8]] = [], groups: [String: String] = [:]
  ) {
    self.id = id
    self.unreadable = unreadable
    self.unreadablePaths = unreadablePaths
    self.groups = groups
  }
}

/// App update, the platform's way: the new bundle gets a NEW home; Documents and Library
/// are moved there with rename(2) (cost independent of the data's size); the registry
/// commits the switch; the old home is renamed to trash (`.trash-<OLD-ID>`, one rename) and
/// deleted after the command has reported (`finishDeferredWork`), so what tmp, Caches and the
/// old bundle hold never lengthens the migration. Keychain items are not touched, nor are app
/// group containers (the snapshot step may take snapshots of the app's groups, whose locks
/// are held by then; memberships follow the new bundle's entitlements).
///
/// Crash safety: a journal entry `update-<NEW-ID>` is written before the first move.
/// Until the registry commit the update rolls back (data moved back to the old home,
/// staging removed); after it, it rolls forward (staging renamed into place, old home
/// removed). `UpdateRecovery` does this on the next mutating command. Trash left by a
/// process killed before it could delete it belongs to no registry row: `ContainerRecovery`
/// removes it.
extension DeviceSession {
  public func update(
    _ app: AppRecord, toBundleAt bundlePath: String, allowDowngrade: Bool,
    snapshot: (AppRecord) throws -> PreUpdateSnapshot?
  ) throws -> UpdateReport {
    precondition(isLocked(app.bundleIdentifier), "update needs the app's lock")
    let started = DispatchTime.now().uptimeNanoseconds
    let running = try ensureNotRunning(app)
    defer { withExtendedLifetime(running) {} }
    let staged = try HomeStaging.stage(bundleAt: bundlePath, root: root, device: identity)
    let applicationRoot = try FileDescriptor.open(root.applicationRoot, O_RDONLY | O_DIRECTORY)
    defer { applicationRoot.close() }
    var journaled = false
    var groups: GroupMembershipChange?
    do {
      try checkUpdate(app, staged: staged, allowDowngrade: allowDowngrade)
      // Memberships before the snapshots: the groups' locks are held by then, and a group of
      // another team is refused before any work.
      groups = try prepareMembershipChange(
        bundleIdentifier: app.bundleIdentifier, team: staged.info.entitlements?.teamIdentifier,
        groups: staged.info.entitlements?.applicationGroups ?? [])
      let snapshotStart = DispatchTime.now().uptimeNanoseconds
      let preUpdate = try snapshot(app)
      let snapshotID = preUpdate?.id
      let snapshotSeconds = seconds(since: snapshotStart)

      // What will be dropped: measured before anything moves.
      let oldHome = root.home(app.containerID)
      let measureStart = DispatchTime.now().uptimeNanoseconds
      let tmpMeasure = TreeMeasure.measure(oldHome + "/tmp")
      let tmp = (files: tmpMeasure.files, bytes: tmpMeasure.bytes, seconds: seconds(since: measureStart))
      let keep: Set<String> = ["Documents", "Library", "tmp", app.bundleDirectoryName, Home.metadataFile]
      let strays = ((try? FileManager.default.contentsOfDirectory(atPath: oldHome)) ?? []).filter {
        !keep.contains($0)
      }
      .sorted()

      let migrationStart = DispatchTime.now().uptimeNanoseconds
      journaled = true  // from here on, failures are left to recovery (it may have to roll forward)
      var warnings: [String] = []
      let record = try replaceHome(
        of: app, with: staged, event: "update", snapshot: snapshotID,
        groupSnapshots: preUpdate?.groups ?? [:],
        groups: groups, warnings: { warnings.append($0) },
        migrate: { staging, old in try HomeStaging.moveData(from: old, into: staging) })
      let migrationSeconds = seconds(since: migrationStart)

      let surveyStart = DispatchTime.now().uptimeNanoseconds
      let newHome = root.home(staged.containerID)
      let survey = StalePathScanner.survey(
        home: newHome, oldHomes: [root.home(app.containerID), Jail.homesDirectory + "/" + app.containerID])
      let surveySeconds = seconds(since: surveyStart) + tmp.seconds
      return UpdateReport(
        bundleIdentifier: app.bundleIdentifier, oldContainerID: app.containerID,
        newContainerID: staged.containerID,
        oldVersion: app.version, newVersion: record.version, newHome: newHome,
        movedFiles: survey.files, movedBytes: survey.bytes,
        droppedTmpFiles: tmp.files, droppedTmpBytes: tmp.bytes, droppedItems: strays,
        preUpdateSnapshot: snapshotID,
        preUpdateUnreadable: preUpdate?.unreadable ?? 0,
        preUpdateUnreadablePaths: preUpdate?.unreadablePaths ?? [],
        staleAbsolutePaths: survey.stale,
        snapshotSeconds: snapshotSeconds, migrationSeconds: migrationSeconds, surveySeconds: surveySeconds,
        totalSeconds: seconds(since: started), preUpdateGroupSnapshots: preUpdate?.groups ?? [:],
        groups: try registry.groups(of: app.bundleIdentifier).map(\.identifier), warnings: warnings)
    } catch {
      if journaled {
        // Finish or roll back now rather than at the next command.
        try? UpdateRecovery().recover(self, scope: .app(bundleIdentifier: app.bundleIdentifier))
      } else {
        try? FileTree.remove(staged.stagingName, in: applicationRoot)
        groups?.discard(root: root)
      }
      throw error
    }
  }

  /// Switches `app` to the staged home, journaled: `migrate` puts the data into the
  /// staging home (moving it from the old home, or from elsewhere), then the registry
  /// commits the new record (event `event`, with `snapshot` and `groupSnapshots`) and the
  /// app's group memberships as the staged bundle lists them (`groups` when prepared
  /// already), the staging home takes its final name and the old home is renamed to trash,
  /// to be deleted by `finishDeferredWork` once the command has reported. Until the commit
  /// a crash rolls back (data that left the old home goes back, the staging home is
  /// removed); after it, recovery rolls forward. Returns the new record.
  public func replaceHome(
    of app: AppRecord, with staged: StagedHome, event: String, snapshot: String?,
    groupSnapshots: [String: String] = [:], groups prepared: GroupMembershipChange? = nil,
    warnings: ((String) -> Void)? = nil,
    migrate: (_ staging: FileDescriptor, _ old: FileDescriptor) throws -> Void
  ) throws -> AppRecord {
    let applicationRoot = try FileDescriptor.open(root.applicationRoot, O_RDONLY | O_DIRECTORY)
    defer { applicationRoot.close() }
    let groups =
      try prepared
      ?? prepareMembershipChange(
        bundleIdentifier: app.bundleIdentifier, team: staged.info.entitlements?.teamIdentifier,
        groups: staged.info.entitlements?.applicationGroups ?? [])
    var committed = false
    defer { if !committed { groups.discard(root: root) } }
    let journal = Journal(root: root)
    let entry = "update-" + staged.containerID
    try journal.write(
      entry,
      [
        "bundleIdentifier": app.bundleIdentifier, "oldContainerID": app.containerID,
        "newContainerID": staged.containerID,
      ])
    CrashPoint.hit("update.journaled")
    var record = staged.record(installedAt: app.installedAt, uid: app.uid)
    record.updatedAt = Date()
    do {
      try moveIn(of: app, with: staged, in: applicationRoot, migrate: migrate)
      try registry.database.inTransaction {
        try registry.replace(record)
        try registry.record(
          .init(
            bundleIdentifier: app.bundleIdentifier, event: event, containerID: record.containerID,
            previousContainerID: app.containerID, version: record.version, previousVersion: app.version,
            snapshot: snapshot, groupSnapshots: groupSnapshots))
        try groups.commit(to: registry)
      }
    } catch {
      // Not committed: back to the old home now (data moved back, staging removed), so that
      // a failed command has changed nothing; if that fails too, the next command does it.
      try? UpdateRecovery().recover(self, scope: .app(bundleIdentifier: app.bundleIdentifier))
      throw error
    }
    committed = true
    CrashPoint.hit("update.committed")
    // Committed: the switch has happened, whatever fails from here on. What is left is tried
    // once more through recovery, and failing that left to the next command's (a warning).
    do {
      try groups.finish(root: root)
      let trash = try finishUpdate(
        oldContainerID: app.containerID, newContainerID: staged.containerID, in: applicationRoot,
        removingTrash: false)
      try journal.remove(entry)
      CrashPoint.hit("update.finished")
      deferRemoval(ofTrash: trash)
    } catch {
      // Said either way: a sync that failed once may pass the second time without its data
      // having reached the disk.
      let retried: Bool
      do {
        try groups.finish(root: root)
        try UpdateRecovery().recover(self, scope: .app(bundleIdentifier: app.bundleIdentifier))
        retried = true
      } catch {
        retried = false
      }
      warnings?(
        "the new home is committed, but finishing the switch failed (\(error)); "
          + (retried ? "a second try finished it" : "the next appbox command finishes it"))
    }
    removeRunningLock(of: app)
    return record
  }

  /// `replaceHome`'s migration: the data into the staging home, the standard directories
  /// it lacks, both homes synced.
  private func moveIn(
    of app: AppRecord, with staged: StagedHome, in applicationRoot: FileDescriptor,
    migrate: (_ staging: FileDescriptor, _ old: FileDescriptor) throws -> Void
  ) throws {
    let old = try applicationRoot.open(app.containerID, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    defer { old.close() }
    let staging = try applicationRoot.open(staged.stagingName, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    defer { staging.close() }
    try migrate(staging, old)
    // Library/Preferences and Library/Caches exist in every home.
    for directory in ["Library", "Library/Preferences", "Library/Caches"]
    where try staging.statusIfPresent(of: directory) == nil {
      try staging.makeDirectory(directory, mode: 0o755)
    }
    // The app keeps its uid; what the staging home created is handed to it.
    if let owner = AppUser.dataOwner(of: app) {
      try DataOwnership.handOverStandardDirectories(in: staging, to: owner)
    }
    try staging.sync()
    try old.sync()
    CrashPoint.hit("update.moved")
  }

  private func checkUpdate(_ app: AppRecord, staged: StagedHome, allowDowngrade: Bool) throws {
    guard staged.info.identifier == app.bundleIdentifier else {
      throw ContainerError(
        .invalidBundle,
        "Cannot update '\(app.bundleIdentifier)' with a bundle of '\(staged.info.identifier)': the identifiers differ"
      )
    }
    guard let current = BundleVersion(app.version) else { return }
    let new = staged.info.version
    if new == current && !allowDowngrade {
      throw ContainerError(
        .invalidBundle,
        "Cannot update '\(app.bundleIdentifier)': version \(new) is already installed (use --allow-downgrade to reinstall)"
      )
    }
    if new < current && !allowDowngrade {
      throw ContainerError(
        .invalidBundle,
        "Cannot update '\(app.bundleIdentifier)' from \(current) to \(new): that is a downgrade (use --allow-downgrade)"
      )
    }
  }

  /// After the registry commit: the staging home takes its final name and the old home is
  /// renamed to trash (so a crash leaves no ambiguity), then removed unless `removingTrash`
  /// is false (the caller removes it later). Idempotent. Returns the trash's name.
  @discardableResult
  func finishUpdate(
    oldContainerID: String, newContainerID: String, in applicationRoot: FileDescriptor,
    removingTrash: Bool = true
  ) throws -> String {
    let stagingName = HomeStaging.prefix + newContainerID
    if try applicationRoot.statusIfPresent(of: stagingName) != nil {
      try applicationRoot.rename(stagingName, to: newContainerID, flags: .noReplace)
    }
    let trash = HomeStaging.trashPrefix + oldContainerID
    if try applicationRoot.statusIfPresent(of: oldContainerID) != nil {
      try applicationRoot.rename(oldContainerID, to: trash, flags: .noReplace)
    }
    try applicationRoot.sync()
    CrashPoint.hit("update.switched")
    if removingTrash { try FileTree.remove(trash, in: applicationRoot) }
    return trash
  }
}

func seconds(since start: UInt64) -> Double { Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9 }

/// Finishes or rolls back updates a crash interrupted (see `DeviceSession.update`).
/// Runs before `ContainerRecovery`, which would otherwise take the staging home for debris.
public struct UpdateRecovery: RecoveryStep {
  public init() {}

  public func recover(_ session: DeviceSession) throws { try recover(session, scope: .everything) }

  public func hasPendingWork(_ session: DeviceSession, bundleIdentifier: String) throws -> Bool {
    try Journal(root: session.root).entries(prefix: "update-").contains {
      $0.fields["bundleIdentifier"] == bundleIdentifier
    }
  }

  public func recover(_ session: DeviceSession, scope: RecoveryScope) throws {
    let journal = Journal(root: session.root)
    if scope == .everything { try journal.removeInterruptedWrites() }
    for (name, fields) in try journal.entries(prefix: "update-") {
      guard let bundle = fields["bundleIdentifier"], let oldID = fields["oldContainerID"],
        let newID = fields["newContainerID"]
      else {
        throw ContainerError(
          .invalidDevice, "Journal entry '\(name)' lacks its container ids; inspect it by hand")
      }
      if case .app(let bundleIdentifier) = scope, bundleIdentifier != bundle { continue }
      let applicationRoot = try FileDescriptor.open(session.root.applicationRoot, O_RDONLY | O_DIRECTORY)
      defer { applicationRoot.close() }
      if try session.registry.appIfPresent(bundle)?.containerID == newID {
        try session.finishUpdate(oldContainerID: oldID, newContainerID: newID, in: applicationRoot)
      } else {
        try rollBack(oldID: oldID, stagingName: HomeStaging.prefix + newID, in: applicationRoot)
      }
      try journal.remove(name)
    }
  }

  /// Moves Documents and Library back from the staging home if they went there, then
  /// removes the staging home.
  private func rollBack(oldID: String, stagingName: String, in applicationRoot: FileDescriptor) throws {
    guard try applicationRoot.statusIfPresent(of: stagingName) != nil else { return }
    let staging = try applicationRoot.open(stagingName, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    defer { staging.close() }
    if try applicationRoot.statusIfPresent(of: oldID) != nil {
      let old = try applicationRoot.open(oldID, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
      defer { old.close() }
      for directory in ["Documents", "Library"]
      where try old.statusIfPresent(of: directory) == nil && staging.statusIfPresent(of: directory) != nil {
        try staging.rename(directory, to: directory, in: old, flags: .noReplace)
      }
      try old.sync()
    }
    try FileTree.remove(stagingName, in: applicationRoot)
  }
}
