import AppboxCore
import AppboxKeychain
import AppboxPlist
import AppboxSecItem
import AppboxTestSupport
import Foundation

@testable import AppboxSecItemBroker

/// Clients shaped like the fixture bundles: Notes and Journal of team ABCDE12345 share
/// `ABCDE12345.shared`; Other is of team ZZZZZ99999.
enum Apps {
  static let notes = KeychainClient(
    bundleIdentifier: "com.example.notes", teamIdentifier: "ABCDE12345",
    keychainAccessGroups: ["ABCDE12345.com.example.notes", "ABCDE12345.shared"])
  static let journal = KeychainClient(
    bundleIdentifier: "com.example.journal", teamIdentifier: "ABCDE12345",
    keychainAccessGroups: ["ABCDE12345.com.example.journal", "ABCDE12345.shared"])
  static let other = KeychainClient(
    bundleIdentifier: "org.other.app", teamIdentifier: "ZZZZZ99999",
    keychainAccessGroups: ["ZZZZZ99999.org.other.app"])
  static let shared = "ABCDE12345.shared"
}

/// A keychain directory in a fresh temp directory, and services (one per app) on it.
final class Fixture: @unchecked Sendable {
  let directory = TemporaryDirectory("secitem")
  var keychainPath: String { directory.url("Keychains") }

  func service(_ client: KeychainClient = Apps.notes) -> SecItemService {
    SecItemService(client: client, keychainDirectory: keychainPath)
  }

  func broker(_ client: KeychainClient = Apps.notes) throws -> SecItemBroker {
    try SecItemBroker(client: client, keychainDirectory: keychainPath)
  }
}

/// A decoded reply.
struct Reply {
  var status: OSStatus
  var result: PropertyList?
  var message: String?

  init(_ bytes: [UInt8]) throws {
    let reply = try PropertyList.decode(Data(bytes))
    status = OSStatus(reply["status"]?.integer ?? 999)
    result = reply["result"]
    message = reply["message"]?.string
  }
}

extension SecItemService {
  /// Sends one operation with `query` and decodes the reply.
  func call(
    _ operation: SecItemWire.Operation, _ query: [String: PropertyList],
    changes: [String: PropertyList]? = nil
  ) throws -> Reply {
    try Reply(answer(SecItemWire.request(operation, query: query, attributesToUpdate: changes)))
  }
}

/// A generic-password query for `service` and `account`, plus `extra`.
func query(_ service: String? = "svc", _ account: String? = "acct", _ extra: [String: PropertyList] = [:])
  -> [String: PropertyList]
{
  var query: [String: PropertyList] = [kSecClass: .string(kSecClassGenericPassword)]
  if let service { query[kSecAttrService] = .string(service) }
  if let account { query[kSecAttrAccount] = .string(account) }
  return query.merging(extra) { $1 }
}

func data(_ text: String) -> PropertyList { .data(Data(text.utf8)) }

/// `query("svc", "acct", extra)`.
func query(extra: [String: PropertyList]) -> [String: PropertyList] { query("svc", "acct", extra) }
