// `reset APP`: the app as just installed, keeping its bundle, container id and groups.
//
// Algorithm (the app's lock and its exclusive running lock held: no launch starts meanwhile):
// 1. journal `reset-<CONTAINER-ID>` (LifecycleRecovery.swift): from here on the reset
//    happens, whatever stops this process;
// 2. make `ApplicationRoot/.discard-<UUID>` and rename Documents, Library and tmp into it
//    (three renames: the cost does not depend on how much data they hold);
// 3. make empty Documents, Library, Library/Preferences, Library/Caches and tmp, handed to
//    the app's uid; sync the home and the discard directory;
// 4. record the event in the app's history;
// 5. with --keychain, delete the keychain items only this app can see (as uninstall does,
//    one transaction); remove the journal entry;
// 6. after the report, delete the discard directory (finishDeferredWork).
// Every step after 1 is idempotent, and recovery runs 2-5 again for an entry it finds, so a
// reset killed at any moment is finished, never half-done. A step that fails with an error
// (not a kill) rolls the reset back instead: the data goes back from the discard directory
// and the entry is removed, so the command's failure leaves the home as it was: the home holds the old data or
// empty directories, never a mix. What a process killed during step 6 leaves is deleted by
// the next recovery of everything (a discard no entry names).

import AppboxCore
import Foundation
import Glibc

/// What a reset did.
public struct ResetReport: Sendable {
  public var app: AppRecord
  public var home: String
  /// The directories emptied, relative to the home.
  public var emptied: [String]
  /// Keychain items deleted (--keychain), or nil when the keychain was left alone.
  public var keychainItemsDeleted: Int?
  /// What went wrong after the reset was done (it stands).
  public var warnings: [String] = []
}

extension DeviceSession {
  /// Resets `app` (see the header): refused with 75 while it runs. With `keychain`, also
  /// deletes the keychain items only it can see. Needs the app's lock.
  public func reset(_ app: AppRecord, keychain: Bool) throws -> ResetReport {
    precondition(isLocked(app.bundleIdentifier), "reset needs the app's lock")
    let running = try ensureNotRunning(app)
    defer { withExtendedLifetime(running) {} }
    // Opened first, so a keychain that cannot open refuses the reset before anything moves.
    if keychain { _ = try openKeychain() }
    let journal = Journal(root: root)
    let entry = Lifecycle.resetPrefix + app.containerID
    let fields = [
      "bundleIdentifier": app.bundleIdentifier, "containerID": app.containerID,
      "discard": Lifecycle.newDiscardName(), "keychain": keychain ? "1" : "0",
      "started": String(Date().timeIntervalSince1970),
    ]
    try journal.write(entry, fields)
    CrashPoint.hit("reset.journaled")
    let (deleted, warnings) = try completeJournaled(
      "reset", entry: entry, in: journal, fields: fields, putting: DataOwnership.dataDirectories,
      backInto: app.containerID, finishedPoint: "reset.finished"
    ) { try finishReset(fields) }
    return ResetReport(
      app: app, home: root.home(app.containerID), emptied: ["Documents", "Library", "tmp"],
      keychainItemsDeleted: keychain ? deleted : nil, warnings: warnings)
  }

  /// Steps 2-5 of a reset (see the header), for `reset` and for recovery. Idempotent.
  /// Returns how many keychain items went.
  func finishReset(_ fields: [String: String]) throws -> Int {
    guard let identifier = fields["bundleIdentifier"], let containerID = fields["containerID"],
      let discardName = fields["discard"], discardName.hasPrefix(Lifecycle.discardPrefix)
    else {
      throw ContainerError(.invalidDevice, "A reset's journal entry lacks its fields; inspect it by hand")
    }
    // The app may be gone (an uninstall finished by recovery meanwhile): nothing to reset.
    guard let app = try registry.appIfPresent(identifier), app.containerID == containerID else { return 0 }
    let applicationRoot = try OwnedFileDescriptor.open(root.applicationRoot, O_RDONLY | O_DIRECTORY)
    try Lifecycle.makeDirectoryIfMissing(discardName, in: applicationRoot.borrowed)
    let discard = try applicationRoot.borrowed.openOwned(discardName, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    let home = try applicationRoot.borrowed.openOwned(containerID, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    for name in DataOwnership.dataDirectories {
      try Lifecycle.setAside(name, from: home.borrowed, into: discard.borrowed)
      CrashPoint.hit("reset.moved-one")
    }
    try recreateStandardDirectories(in: home.borrowed, of: app)
    try discard.borrowed.sync()
    try home.borrowed.sync()
    CrashPoint.hit("reset.recreated")
    let started = Date(timeIntervalSince1970: Double(fields["started"] ?? "") ?? 0)
    try recordOnce(
      .init(bundleIdentifier: identifier, event: "reset", containerID: containerID, version: app.version),
      since: started)
    // Last: one transaction of the keychain's, so a failure before it leaves every item.
    return fields["keychain"] == "1" ? try deleteKeychainItems(of: app) : 0
  }

  /// Makes the standard directories a home lacks (empty, 0755), handed to the app's uid.
  /// Their times are the app's install time, children first: the home as installed, and
  /// the same whether the reset or a recovery of it made them.
  func recreateStandardDirectories(in home: FileDescriptor, of app: AppRecord) throws {
    for directory in Home.standardDirectories where try home.statusIfPresent(of: directory) == nil {
      try home.makeDirectory(directory, mode: 0o755)
      try home.open(directory, O_RDONLY | O_DIRECTORY | O_NOFOLLOW).closeAfter {
        try $0.setPermissions(0o755)
      }
    }
    let installed = Timespec(totalNanoseconds: Int64(app.installedAt.timeIntervalSince1970 * 1e9))
    for directory in Home.standardDirectories.reversed() {
      try home.open(directory, O_RDONLY | O_DIRECTORY | O_NOFOLLOW).closeAfter {
        try $0.setTimes(access: installed, modification: installed)
      }
    }
    if let owner = AppUser.dataOwner(of: app) {
      try DataOwnership.handOverStandardDirectories(in: home, to: owner)
    }
  }

  /// Records `event` unless the app's newest history line is that event, recorded at or after
  /// `since` (a recovery repeating a step that got as far as recording it).
  func recordOnce(_ event: Registry.Event, since: Date) throws {
    if let last = try registry.history(of: event.bundleIdentifier).first, last.event == event.event,
      last.time >= since
    {
      return
    }
    try registry.record(event)
  }
}
