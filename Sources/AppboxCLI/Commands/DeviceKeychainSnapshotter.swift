// The device side of `KeychainSnapshotting` (AppboxBackup): backups export an app's items
// from the device's own keychain (`<root>/Keychains`), already sealed under the device key,
// and restores import them again. It lives in the CLI, which may import AppboxKeychain; the
// engines see only the protocol.

import AppboxBackup
import AppboxContainer
import AppboxKeychain

/// The device's own keychain (`<root>/Keychains`), as backups use it.
public struct DeviceKeychainSnapshotter: KeychainSnapshotting {
  public let root: DeviceRoot

  public init(root: DeviceRoot) { self.root = root }

  public func exportItems(for app: AppRecord) throws -> [UInt8]? {
    try root.openKeychain().exportItems(for: app.keychainClient)
  }

  public func importItems(_ bytes: [UInt8], for app: AppRecord) throws -> KeychainRestoreOutcome {
    try importItems(bytes, for: app, portableKey: nil)
  }

  public func exportItems(for app: AppRecord, portableKey: [UInt8]?) throws -> [UInt8]? {
    try root.openKeychain().exportItems(for: app.keychainClient, portableKey: portableKey)
  }

  /// Items of an export from before access-group namespaces come back under the app's
  /// teamless group only when no installed team app has a group of that name (an impostor's
  /// old export holds what it could see then: the team's items).
  public func importItems(_ bytes: [UInt8], for app: AppRecord, portableKey: [UInt8]?) throws
    -> KeychainRestoreOutcome
  {
    var client = app.keychainClient
    if let legacy = client.legacyGroup {
      let others = try Registry(root: root).apps().filter { $0.bundleIdentifier != app.bundleIdentifier }
      if others.contains(where: { $0.keychainClient.accessGroups.contains(legacy) }) {
        client.legacyGroup = nil
      }
    }
    switch try root.openKeychain().importItems(bytes, for: client, portableKey: portableKey) {
    case .restored(let count): return .restored(count: count)
    case .otherDevice(let reason): return .otherDevice(reason: reason)
    case .restoredFromElsewhere(let count, let notes):
      return .restoredFromElsewhere(count: count, notes: notes)
    }
  }
}
