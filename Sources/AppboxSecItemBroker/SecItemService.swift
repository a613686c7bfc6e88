// Answering one SecItem request for one app: the adapter between the wire protocol
// (AppboxSecItem) and the keychain (AppboxKeychain).
//
// Algorithm: decode the request (binary property lists only, within the protocol's size and
// depth limits), check its shape and every key and value against what the operation takes
// (anything else is errSecParam, naming the key), turn it into a `KeychainQuery`,
// `KeychainItem` or `KeychainChanges`, make the one keychain call for the app's
// `KeychainClient`, and encode the status and the result asked for. Keychain errors become
// the platform's statuses; nothing is ever thrown out of `answer`, so one bad request cannot
// end the session or the broker.
//
// Invariants: the identity is `client`, fixed when the broker started: no key of a request
// can name another app (there is none to name, and an access group the app is not entitled
// to is errSecMissingEntitlement, exactly as for `appbox keychain`). Class secrets are read
// again for every request, so a device locked while the app runs makes its items
// unavailable at once (errSecInteractionNotAllowed). Replies carry secrets only when the
// request asked for data (kSecReturnData).

import AppboxCore
import AppboxKeychain
import AppboxPlist
import AppboxSecItem
import Foundation

/// Answers SecItem requests of one app against the device's keychain. Not thread-safe: the
/// broker calls it from its one thread.
public final class SecItemService {
  /// The app the broker serves.
  public let client: KeychainClient
  private let opener: () throws -> Keychain
  private var keychain: Keychain?
  /// The largest reply sent (`SecItemWire.maximumReplySize`; smaller in tests).
  var maximumReplySize = SecItemWire.maximumReplySize

  /// Serves `client` with the keychain in `keychainDirectory`, opened on the first request
  /// (an app that never uses the keychain costs nothing).
  public convenience init(client: KeychainClient, keychainDirectory: String) {
    self.init(client: client) { try Keychain(directory: keychainDirectory) }
  }

  /// Serves `client` with the keychain `openKeychain` opens on the first request (the
  /// device's, migrated to access-group namespaces first: `DeviceRoot.openKeychain`).
  public init(client: KeychainClient, openKeychain: @escaping () throws -> Keychain) {
    self.client = client
    opener = openKeychain
  }

  /// The reply (a binary property list) to the request `body`.
  public func answer(_ body: [UInt8]) -> [UInt8] {
    let response: SecItemResponse
    do {
      let request = try SecItemRequest(decoding: body)
      response = SecItemResponse(status: errSecSuccess, result: try perform(request))
    } catch let failure as SecItemFailure {
      response = SecItemResponse(status: failure.status, message: failure.message)
    } catch let error as KeychainError {
      response = SecItemResponse(status: Self.status(of: error), message: error.description)
    } catch let error as SystemError {
      response = SecItemResponse(status: errSecIO, message: error.description)
    } catch {
      response = SecItemResponse(status: errSecInternalComponent, message: "\(error)")
    }
    let reply = SecItemWire.reply(status: response.status, result: response.result, message: response.message)
    guard reply.count <= maximumReplySize else {
      return SecItemWire.reply(
        status: errSecAllocate,
        message:
          "The result is \(reply.count) bytes, more than the \(maximumReplySize) bytes a reply may hold; "
          + "narrow the query or set kSecMatchLimit")
    }
    return reply
  }

  /// The platform's status for a keychain error.
  public static func status(of error: KeychainError) -> OSStatus {
    switch error.code {
    case .duplicateItem: return errSecDuplicateItem
    case .itemNotFound: return errSecItemNotFound
    case .missingEntitlement: return errSecMissingEntitlement
    case .invalidParameter: return errSecParam
    case .corrupt: return errSecDecode
    case .interactionNotAllowed: return errSecInteractionNotAllowed
    case .passcodeRequired: return errSecAuthFailed
    case .quotaExceeded: return errSecDiskFull
    case .migrationPending: return errSecNotAvailable
    }
  }

  private func openKeychain() throws -> Keychain {
    if let keychain {
      keychain.forgetClassSecrets()
      return keychain
    }
    let opened = try opener()
    keychain = opened
    return opened
  }

  private func perform(_ request: SecItemRequest) throws -> PropertyList? {
    let keychain = try openKeychain()
    let query = request.query
    switch request.operation {
    case .add:
      let added = try keychain.add(query.item(), for: client)
      guard query.returnsData || query.returnsAttributes else { return nil }
      var item = added
      item.data = query.data
      return query.result(for: item)
    case .copyMatching:
      var keychainQuery = query.keychainQuery
      keychainQuery.limit = query.limit == .one ? .one : .all
      keychainQuery.returnsData = query.returnsData
      var items = try keychain.find(keychainQuery, for: client)
      if case .count(let count) = query.limit { items = Array(items.prefix(count)) }
      guard query.returnsData || query.returnsAttributes else { return nil }
      let results = items.map { query.result(for: $0) }
      return query.limit == .one ? results.first : .array(results)
    case .update:
      try keychain.update(query.keychainQuery, changes: request.changes ?? KeychainChanges(), for: client)
      return nil
    case .delete:
      try keychain.delete(query.keychainQuery, for: client)
      return nil
    }
  }
}

/// A request refused before it reached the keychain.
struct SecItemFailure: Error {
  var status: OSStatus
  var message: String

  static func parameter(_ message: String) -> SecItemFailure {
    SecItemFailure(status: errSecParam, message: message)
  }
}
