import AppboxKeychain
import AppboxTestSupport
import Testing

/// Clients shaped like the fixture bundles: Notes and Journal of team ABCDE12345 share
/// `ABCDE12345.shared`; Other is of team ZZZZZ99999.
enum Clients {
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

/// A keychain in a fresh temp directory (`<tmp>/Keychains`), kept alive with it.
final class KeychainFixture {
  let directory = TemporaryDirectory("keychain")
  var path: String { directory.url("Keychains") }
  let keychain: Keychain

  init() throws {
    keychain = try Keychain(directory: directory.url("Keychains"))
  }

  /// Opens a second, independent keychain on the same directory (another connection).
  func reopen() throws -> Keychain { try Keychain(directory: path) }
}

func secret(_ text: String) -> [UInt8] { Array(text.utf8) }

func item(
  _ service: String = "svc", _ account: String = "acct", data: String = "s3cret", group: String? = nil,
  itemClass: KeychainItemClass = .generic, label: String? = nil, comment: String? = nil
) -> KeychainItem {
  KeychainItem(
    itemClass: itemClass, service: service, account: account, accessGroup: group, label: label,
    comment: comment,
    data: secret(data))
}

/// The status of a failed keychain call, or nil when it succeeded.
func status(_ body: () throws -> Void) -> KeychainError.Code? {
  do {
    try body()
    return nil
  } catch let error as KeychainError {
    return error.code
  } catch {
    Issue.record("unexpected error: \(error)")
    return nil
  }
}
