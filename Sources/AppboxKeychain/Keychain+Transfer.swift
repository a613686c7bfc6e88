import AppboxCore
import AppboxCrypto
import AppboxStore
import Foundation
import Glibc

// A device's whole keychain at once: emptied (device erase, `simctl keychain reset`), or
// carried over to a new device (`device clone --new-device`).
//
// Carrying over is what restoring a backup onto another device does (Keychain+Backup.swift):
// an item that may leave its device is opened with this device's keys and sealed anew under
// the new device's, and an item marked this-device-only stays behind (it is dropped). It runs
// on a copy of the keychain directory that nothing else uses yet (the clone being built):
// 1. every item is read and opened with the current device key and class secrets;
// 2. a new device key (`device.key`) and new class secrets (`classes/*.key`) are written,
//    each whole (temp file, fsync, rename);
// 3. one transaction deletes the this-device-only items and re-seals the others (key
//    version 1, sealed under their own group), and records the new secrets' identifiers.
// Without a passcode (the clone refuses devices that have file protection keys) every class
// secret is a plain file, so step 1 needs no unlocked device.

/// What carrying a keychain over to a new device did.
public struct KeychainTransfer: Sendable, Equatable {
  /// Items sealed anew under the new device's keys.
  public var resealed: Int
  /// Items dropped because they are this-device-only.
  public var dropped: Int
}

extension Keychain {
  /// Deletes every item, in one transaction; returns how many went. With `forgettingSecrets`
  /// (an erase, which also sets the class secret files aside), the recorded identifiers of
  /// the class secrets go too, so the next open makes fresh ones.
  @discardableResult
  public func deleteAllItems(forgettingSecrets: Bool = false) throws -> Int {
    try database.inTransaction(.immediate) { () throws -> Int in
      try database.execute("DELETE FROM items")
      let count = database.changes
      if forgettingSecrets {
        try database.execute("DELETE FROM class_secrets")
        try database.execute("DELETE FROM settings WHERE name = 'identities'")
      }
      return count
    }
  }

  /// Carries the keychain in `directory` (a copy only the caller uses) over to a new device:
  /// see the header. Items whose class secret cannot be read (a locked device) fail it.
  public static func transferToNewDevice(directory: String) throws -> KeychainTransfer {
    let old = try Keychain(directory: directory)
    try old.requireCurrentIdentities()
    let statement = try old.database.prepare("SELECT \(Row.columns) FROM items")
    var rows = try statement.rows { try Row($0, path: old.database.path) }
    for index in rows.indices where !rows[index].accessibility.isThisDeviceOnly {
      let key =
        rows[index].keyVersion == 0 ? old.key.itemKey : try old.itemKey(for: rows[index].accessibility)
      rows[index].secret = try SealedSecret.open(
        rows[index].sealed, key: key, associatedData: rows[index].associatedData,
        item: rows[index].item(includingData: false).summary)
    }
    // The new device's key and class secrets, each written whole.
    let handle = try KeychainDirectory.open(directory)
    defer { handle.close() }
    let newKey = try SecureRandom.bytes(DeviceKey.byteCount)
    try AtomicFile.write(newKey, to: DeviceKey.fileName, in: handle, mode: 0o600)
    let classes = try old.openClassSecretsDirectory()
    defer { classes.close() }
    var secrets: [KeychainClassSecret: [UInt8]] = [:]
    for secret in KeychainClassSecret.permanent {
      let bytes = try SecureRandom.bytes(classSecretByteCount)
      try AtomicFile.write(bytes, to: secret.fileName, in: classes, mode: 0o600)
      secrets[secret] = bytes
    }
    if try classes.statusIfPresent(of: KeychainClassSecret.whenPasscodeSet.fileName) != nil {
      try classes.remove(KeychainClassSecret.whenPasscodeSet.fileName)
    }
    try classes.sync()
    let device = try DeviceKey(bytes: newKey)
    var transfer = KeychainTransfer(resealed: 0, dropped: 0)
    try old.database.inTransaction(.immediate) {
      for row in rows {
        guard let secret = row.secret else {
          try old.database.execute("DELETE FROM items WHERE id = ?1", .integer(row.id))
          transfer.dropped += 1
          continue
        }
        guard let classSecret = secrets[row.accessibility.classSecret] else {
          try old.database.execute("DELETE FROM items WHERE id = ?1", .integer(row.id))
          transfer.dropped += 1
          continue
        }
        let sealed = try secret.seal(
          key: try device.itemKey(classSecret: classSecret), associatedData: row.currentAssociatedData)
        try old.database.execute(
          "UPDATE items SET sealed = ?1, key_version = 1, sealed_group = NULL WHERE id = ?2", .blob(sealed),
          .integer(row.id))
        transfer.resealed += 1
      }
      try old.database.execute("DELETE FROM class_secrets")
      for (secret, bytes) in secrets { try old.recordIdentifier(of: secret, bytes: bytes) }
    }
    return transfer
  }
}
