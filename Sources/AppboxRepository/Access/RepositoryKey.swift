// The key hierarchy of an encrypted repository:
//
//   password ──scrypt(N=2^15, r=8, p=1, random salt)──▶ key-encryption key
//   key-encryption key ──AES-256-GCM──▶ wraps the master key (32 random bytes), in keys/<id>
//   master key ──HKDF──▶ object key ("appbox objects": every sealed object, SealedObjects.swift)
//              ──HKDF──▶ keychain key ("appbox keychain items": portable keychain items)
//
// A key object is JSON: {"kdf": "scrypt", "n", "r", "p", "salt", "wrapped", "created"} (salt
// and wrapped in base64); the wrap's associated data names the repository id, so a key object
// copied from another repository does not open. `repo passwd` writes a new key object (new
// salt, same master key) and deletes the old one: no data is rewritten. Without a password
// that opens a key object there is no way to the master key, and so none to the data.

import AppboxCore
import AppboxCrypto
import Foundation

/// An unlocked repository key.
package final class RepositoryKey: Sendable {
  let master: [UInt8]
  let objectKey: [UInt8]
  package let keychainKey: [UInt8]
  /// Plaintext bytes per sealed segment.
  let segmentSize: Int

  static let defaultSegmentSize = 64 << 10

  init(master: [UInt8], segmentSize: Int) throws {
    self.master = master
    self.segmentSize = segmentSize
    objectKey = try HKDF.derive(key: master, salt: [], info: Array("appbox objects".utf8), length: 32)
    keychainKey = try HKDF.derive(
      key: master, salt: [], info: Array("appbox keychain items".utf8), length: 32)
  }

  /// A new random master key.
  static func generate(segmentSize: Int = defaultSegmentSize) throws -> RepositoryKey {
    try RepositoryKey(master: try SecureRandom.bytes(32), segmentSize: segmentSize)
  }

  static let parameters = Scrypt.Parameters.interactive

  /// The key object that opens this key with `password`, for repository `id`.
  func wrapped(password: [UInt8], repositoryID: String) throws -> [UInt8] {
    let salt = try SecureRandom.bytes(32)
    let parameters = Self.parameters
    let kek = try Scrypt.derive(password: password, salt: salt, parameters: parameters, length: 32)
    let wrapped = try AESGCM.seal(master, key: kek, associatedData: Self.associatedData(repositoryID))
    let object: [String: Any] = [
      "kdf": "scrypt", "n": parameters.n, "r": parameters.r, "p": parameters.p,
      "salt": Data(salt).base64EncodedString(), "wrapped": Data(wrapped).base64EncodedString(),
      "created": ISO8601DateFormatter().string(from: Date()),
    ]
    return Array(try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]))
  }

  /// Opens the first of `keyObjects` that `password` unlocks; `.denied` (77) when none does.
  static func unlock(
    _ keyObjects: [(name: String, bytes: [UInt8])], password: [UInt8], repositoryID: String, segmentSize: Int,
    location: String
  ) throws -> (key: RepositoryKey, keyName: String) {
    guard !keyObjects.isEmpty else {
      throw RepositoryError(
        .corruptCatalog, "The encrypted repository '\(location)' has no key (keys/ is empty)")
    }
    for (name, bytes) in keyObjects {
      guard let object = try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any],
        object["kdf"] as? String == "scrypt", let n = object["n"] as? UInt64, let r = object["r"] as? UInt64,
        let p = object["p"] as? UInt64,
        let salt = (object["salt"] as? String).flatMap({ Data(base64Encoded: $0) }),
        let wrapped = (object["wrapped"] as? String).flatMap({ Data(base64Encoded: $0) })
      else {
        throw RepositoryError(.corruptCatalog, "The key object keys/\(name) of '\(location)' is malformed")
      }
      let kek = try Scrypt.derive(
        password: password, salt: Array(salt), parameters: Scrypt.Parameters(n: n, r: r, p: p), length: 32)
      if let master = try? AESGCM.open(Array(wrapped), key: kek, associatedData: associatedData(repositoryID))
      {
        return (try RepositoryKey(master: master, segmentSize: segmentSize), name)
      }
    }
    throw RepositoryError(.denied, "Wrong password for the encrypted repository '\(location)'")
  }

  static func associatedData(_ repositoryID: String) -> [UInt8] {
    Array("appbox repository key v1 \(repositoryID)".utf8)
  }
}
