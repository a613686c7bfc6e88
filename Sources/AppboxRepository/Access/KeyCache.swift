// The device's copy of an encrypted repository's key, so that scrypt runs once per device and
// password, not once per command (the platform's own devices likewise remember the password of
// their encrypted backups). `<cache>/key` (0600, in the device's cache directory) holds:
//   the key object it was unlocked from (its name and SHA-256),
//   a check value of the password: HMAC-SHA256(device secret, password ‖ that SHA-256),
//   the master key sealed with AES-256-GCM under the device secret (bound to the same).
// The device secret is derived from the device key (Keychains/device.key), so the file is of
// no use off this device. Commands still need the password: one that fails the check value is
// tried the slow way (scrypt against every key object: a repository may have several), and
// wrong there is 77. A key object that is gone or changed (`repo passwd`, on any device) makes
// the copy stale: the next command unlocks with scrypt again. What it costs: whoever can read
// this device's root can read the repository without the password (as they can read the
// apps' data and keychain on the device); APPBOX_REPOSITORY_KEY_CACHE=0 keeps no copy.

import AppboxCore
import AppboxCrypto
import Foundation
import Glibc

package enum KeyCache {
  static func enabled(_ environment: [String: String]) -> Bool {
    environment["APPBOX_REPOSITORY_KEY_CACHE"] != "0"
  }

  private static func keys(_ secret: [UInt8]) throws -> (check: [UInt8], seal: [UInt8]) {
    (
      try HKDF.derive(key: secret, salt: [], info: Array("password check".utf8), length: 32),
      try HKDF.derive(key: secret, salt: [], info: Array("key seal".utf8), length: 32)
    )
  }

  /// The cached key, when the cache matches `keyObjects` and `password` passes the check.
  static func open(
    directory: String, keyObjects: [(name: String, bytes: [UInt8])], password: [UInt8], secret: [UInt8],
    repositoryID: String, segmentSize: Int
  ) throws -> (key: RepositoryKey, keyName: String)? {
    guard let data = FileManager.default.contents(atPath: directory + "/key"),
      let object = try? JSONSerialization.jsonObject(with: data) as? [String: String],
      let name = object["key"], let digest = object["digest"], let check = object["check"],
      let sealed = object["sealed"].flatMap({ Data(base64Encoded: $0) }),
      let current = keyObjects.first(where: { $0.name == name }), SHA256.hash(current.bytes).hex == digest
    else { return nil }
    let (checkKey, sealKey) = try keys(secret)
    let expected = try HMACSHA256.authenticationCode(for: password + Array(digest.utf8), key: checkKey)
    guard hex(expected) == check,
      let master = try? AESGCM.open(
        Array(sealed), key: sealKey, associatedData: associatedData(repositoryID, digest))
    else { return nil }
    return (try RepositoryKey(master: master, segmentSize: segmentSize), name)
  }

  /// Keeps `key` (unlocked from key object `keyName`) for this device.
  static func save(
    directory: String, key: RepositoryKey, keyName: String, keyObject: [UInt8], password: [UInt8],
    secret: [UInt8], repositoryID: String
  ) throws {
    let digest = SHA256.hash(keyObject).hex
    let (checkKey, sealKey) = try keys(secret)
    let object = [
      "key": keyName, "digest": digest,
      "check": hex(try HMACSHA256.authenticationCode(for: password + Array(digest.utf8), key: checkKey)),
      "sealed": Data(
        try AESGCM.seal(key.master, key: sealKey, associatedData: associatedData(repositoryID, digest))
      ).base64EncodedString(),
    ]
    let bytes = Array(try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]))
    let handle = try FileDescriptor.open(directory, O_RDONLY | O_DIRECTORY)
    defer { handle.close() }
    let staged = try StagedFile("key", in: handle, mode: 0o600)
    try staged.descriptor.writeAll(bytes)
    try staged.commit(durable: false)
  }

  static func remove(directory: String) { unlink(directory + "/key") }

  private static func associatedData(_ repositoryID: String, _ digest: String) -> [UInt8] {
    Array("appbox cached repository key v1 \(repositoryID) \(digest)".utf8)
  }

  private static func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
}
