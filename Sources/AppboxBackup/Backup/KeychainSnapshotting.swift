// How backups reach the keychain without depending on it: the CLI passes an object that
// exports an app's items (already encrypted under the device key) and imports them again.
// The backup stores the bytes as the archive member `.appbox/keychain`; restore hands them
// back. Items restore only on the device that made them: on another device the importer
// reports why, and the data is restored anyway.

import AppboxContainer

/// What importing keychain items achieved.
public enum KeychainRestoreOutcome: Sendable, Equatable {
  /// The items were restored.
  case restored(count: Int)
  /// The items belong to another device and cannot be decrypted here.
  case otherDevice(reason: String)
  /// From another device through an encrypted repository: the portable items were restored;
  /// `notes` say what was not (this-device-only items, locked classes).
  case restoredFromElsewhere(count: Int, notes: [String])
}

/// Exports and imports one app's keychain items as opaque, encrypted bytes.
public protocol KeychainSnapshotting: Sendable {
  /// The app's items, or nil when it has none worth storing.
  func exportItems(for app: AppRecord) throws -> [UInt8]?
  /// Replaces the app's items with those in `bytes`.
  func importItems(_ bytes: [UInt8], for app: AppRecord) throws -> KeychainRestoreOutcome
  /// As `exportItems(for:)`; with a portable key (an encrypted repository's), items that are
  /// not this-device-only are also sealed under it, so another device can restore them.
  func exportItems(for app: AppRecord, portableKey: [UInt8]?) throws -> [UInt8]?
  /// As `importItems(_:for:)`; with the portable key, items from another device come back too.
  func importItems(_ bytes: [UInt8], for app: AppRecord, portableKey: [UInt8]?) throws
    -> KeychainRestoreOutcome
}

extension KeychainSnapshotting {
  public func exportItems(for app: AppRecord, portableKey: [UInt8]?) throws -> [UInt8]? {
    try exportItems(for: app)
  }
  public func importItems(_ bytes: [UInt8], for app: AppRecord, portableKey: [UInt8]?) throws
    -> KeychainRestoreOutcome
  {
    try importItems(bytes, for: app)
  }
}
