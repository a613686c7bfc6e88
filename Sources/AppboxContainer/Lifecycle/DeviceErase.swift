// `device erase [--keep-backups]`: back to a freshly initialised device, as `simctl erase`
// does: no apps, no app groups, no keychain items, no passcode, no launch logs, no backups
// (unless kept). The identity stays: UDID, name, capabilities, and the device key.
//
// Algorithm (the root lock held exclusively: no other appbox changes the device; every app's
// exclusive running lock held: none runs or starts), rolled forward from the journal entry
// `erase` (LifecycleRecovery.swift):
// 1. journal `erase`, naming a discard directory `.appbox/discard-<UUID>`;
// 2. rename into it ApplicationRoot, Shared (the app groups), Backups and the repository
//    caches (unless kept), the file protection state, the launch logs, crash records and
//    run records (one rename each: the cost does not depend on what they hold);
// 3. the keychain: delete every item (one transaction), then remove the file protection
//    class keys from the kernel and set aside the keybag, the unlock attempts and the class
//    secrets (fresh ones are made at the next open, as on a new device);
// 4. the registry: delete every row of every table (one transaction);
// 5. make the empty layout again (createLayout) and sync;
// 6. remove the journal entry; after the report, delete the discard directory.
// Each step after 1 is idempotent; recovery runs 2-5 again for an entry it finds.

import AppboxCore
import AppboxKeychain
import Foundation
import Glibc

/// What an erase did.
public struct EraseReport: Sendable {
  public var identity: DeviceIdentity
  /// The apps and app groups that were on the device.
  public var apps: [String]
  public var groups: [String]
  public var keptBackups: Bool
}

extension DeviceSession {
  /// The exclusive running locks of every installed app: 75 naming the first that runs.
  public func ensureNoAppRuns() throws -> [FileLock] {
    try registry.apps().map { try ensureNotRunning($0) }
  }

  /// Erases the device (see the header). Takes the root lock exclusively; refused with 75
  /// while an app runs.
  public func erase(keepBackups: Bool) throws -> EraseReport {
    try lockDeviceExclusively()
    let running = try ensureNoAppRuns()
    defer { withExtendedLifetime(running) {} }
    let report = EraseReport(
      identity: identity, apps: try registry.apps().map(\.bundleIdentifier),
      groups: try registry.groups().map(\.identifier), keptBackups: keepBackups)
    let fields = [
      "discard": Lifecycle.stateDiscardPrefix + UUID().uuidString, "keepBackups": keepBackups ? "1" : "0",
    ]
    let journal = Journal(root: root)
    try journal.write(Lifecycle.eraseEntry, fields)
    CrashPoint.hit("erase.journaled")
    try finishErase(fields)
    try journal.remove(Lifecycle.eraseEntry)
    CrashPoint.hit("erase.finished")
    deferRemoval(atPath: root.stateDirectory + "/" + fields["discard"]!)
    return report
  }

  /// Steps 2-5 of an erase, for `erase` and for recovery. Idempotent.
  func finishErase(_ fields: [String: String]) throws {
    guard let discardName = fields["discard"], discardName.hasPrefix(Lifecycle.stateDiscardPrefix),
      !discardName.contains("/")
    else {
      throw ContainerError(.invalidDevice, "The erase's journal entry lacks its fields; inspect it by hand")
    }
    let keepBackups = fields["keepBackups"] == "1"
    let device = try OwnedFileDescriptor.open(root.path, O_RDONLY | O_DIRECTORY)
    let state = try OwnedFileDescriptor.open(root.stateDirectory, O_RDONLY | O_DIRECTORY)
    try Lifecycle.makeDirectoryIfMissing(discardName, in: state.borrowed)
    let discard = try state.borrowed.openOwned(discardName, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    for name in ["ApplicationRoot", "Shared"] + (keepBackups ? [] : ["Backups"]) {
      try Lifecycle.setAside(name, from: device.borrowed, into: discard.borrowed)
    }
    for name in ["protection"] + LaunchRecords.stateDirectories + (keepBackups ? [] : ["cache"]) {
      try Lifecycle.setAside(name, from: state.borrowed, into: discard.borrowed)
    }
    CrashPoint.hit("erase.moved")
    try eraseKeychain(into: discard.borrowed)
    CrashPoint.hit("erase.keychain")
    try registry.database.inTransaction {
      for table in [
        "apps", "history", "app_users", "app_groups", "group_members", "group_users", "group_adoption",
      ] {
        try registry.database.execute("DELETE FROM \(table)")
      }
    }
    CrashPoint.hit("erase.registry")
    try root.createLayout()
    try discard.borrowed.sync()
    try state.borrowed.sync()
    try device.borrowed.sync()
  }

  /// Step 3 of an erase: no item left, no class key in the kernel, the keybag and the class
  /// secrets set aside into `discard`. Idempotent.
  private func eraseKeychain(into discard: FileDescriptor) throws {
    let keychains = try OwnedFileDescriptor.open(root.keychains, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    // While the class secrets are there (an item sealed under a missing one is damage to the
    // keychain's open), the items go first.
    if try keychains.borrowed.statusIfPresent(of: Keychain.classSecretsDirectoryName) != nil {
      try Keychain(directory: root.keychains).deleteAllItems(forgettingSecrets: true)
    }
    protection.removeClassKeys()
    for name in ["keybag.plist", "unlock-attempts.plist", Keychain.classSecretsDirectoryName] {
      try Lifecycle.setAside(name, from: keychains.borrowed, into: discard)
    }
    try keychains.borrowed.sync()
  }
}

extension DeviceProtection {
  /// Removes every class key of the keybag from the kernel's keyring (an erase: the files
  /// they open are set aside). Keys already gone are fine.
  func removeClassKeys() {
    guard let keybag = try? Keybag.load(in: keychainDirectory),
      let fd = try? FileDescriptor.open(root.path, O_RDONLY | O_DIRECTORY)
    else { return }
    defer { fd.close() }
    for wrapped in keybag.keys.values { _ = try? fd.removeEncryptionKey(wrapped.identifier) }
  }
}
