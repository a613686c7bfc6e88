// AppboxKeychain owns the keychain: a device-bound, encrypted item store kept outside the
// sandbox (`<root>/Keychains/`), the access-group rules that decide which app sees which
// item, and the sealed export the backup engine stores. It depends on AppboxCore,
// AppboxStore and AppboxCrypto only, and must not import AppboxContainer (which sits above
// it and calls it at uninstall) or any C library module directly.

import AppboxCore

/// A keychain request that failed: the SecItem-style status, and a message naming the item,
/// the app and why.
public struct KeychainError: AppboxFailure, Equatable {
  /// The statuses of the SecItem API that appbox reports.
  public enum Code: Sendable, Equatable {
    /// An item with the same class, service, account and access group exists (exit 73).
    case duplicateItem
    /// No item the app can see matches the query (exit 66).
    case itemNotFound
    /// The app asked for an access group its entitlements do not list (exit 77).
    case missingEntitlement
    /// The query or item is malformed: empty service, oversized data, no changes (exit 64).
    case invalidParameter
    /// The store, the device key or an export is corrupt or was tampered with (exit 65).
    case corrupt
    /// The item's class is unavailable: the device is locked (errSecInteractionNotAllowed,
    /// exit 69).
    case interactionNotAllowed
    /// The item's class needs a device passcode and none is set (exit 69).
    case passcodeRequired
    /// The app would keep more items or bytes than its quota allows (exit 73).
    case quotaExceeded
    /// The keychain's rows from before access-group namespaces have not been migrated yet
    /// (exit 69; Keychain+Identity.swift).
    case migrationPending
  }

  public var code: Code
  public var message: String
  /// The file involved, when there is one (the key file, the database).
  public var path: String?

  public init(_ code: Code, _ message: String, path: String? = nil) {
    self.code = code
    self.message = message
    self.path = path
  }

  public var kind: FailureKind {
    switch code {
    case .duplicateItem, .quotaExceeded: return .cannotCreate
    case .itemNotFound: return .notFound
    case .missingEntitlement: return .denied
    case .invalidParameter: return .invalidArgument
    case .corrupt: return .badData
    case .interactionNotAllowed, .passcodeRequired, .migrationPending: return .unavailable
    }
  }

  public var description: String {
    guard let path, !message.contains(path) else { return message }
    return "\(message) ('\(path)')"
  }
}
