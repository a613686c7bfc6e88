// How backups reach the keychain without depending on it: the CLI passes an object that
// exports an app's items (already encrypted under the device key) and imports them again.
// The backup stores the bytes as the archive member `.appbox/keychain`; restore hands them
// back. Items restore only on the device that made them: on another device the importer
// reports why, and the data is restored anyway.

import AppboxContainer
import AppboxKeychain

/// What importing keychain items achieved.
public enum KeychainRestoreOutcome: Sendable, Equatable {
  /// The items were restored.
  case restored(count: Int)
  /// The items belong to another device and cannot be decrypted here.
  case otherDevice(reason: String)
}

/// Exports and imports one app's keychain items as opaque, encrypted bytes.
public protocol KeychainSnapshotting: Sendable {
  /// The app's items, or nil when it has none worth storing.
  func exportItems(for app: AppRecord) throws -> [UInt8]?
  /// Replaces the app's items with those in `bytes`.
  func importItems(_ bytes: [UInt8], for app: AppRecord) throws -> KeychainRestoreOutcome
}

/// The device's own keychain (`<root>/Keychains`), as backups use it.
public struct DeviceKeychainSnapshotter: KeychainSnapshotting {
  public let directory: String

  public init(root: DeviceRoot) { directory = root.keychains }

  public func exportItems(for app: AppRecord) throws -> [UInt8]? {
    try Keychain(directory: directory).exportItems(for: app.keychainClient)
  }

  public func importItems(_ bytes: [UInt8], for app: AppRecord) throws -> KeychainRestoreOutcome {
    switch try Keychain(directory: directory).importItems(bytes, for: app.keychainClient) {
    case .restored(let count): return .restored(count: count)
    case .otherDevice(let reason): return .otherDevice(reason: reason)
    }
  }
}
