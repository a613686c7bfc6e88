import AppboxCrypto

extension Keychain {
  /// A 32-byte secret bound to this device's key, for another module's own `purpose` (the
  /// backup repository's key cache): derived from the device key with HKDF, never stored, and
  /// independent of every key the keychain itself uses.
  public func deviceBoundSecret(purpose: String) throws -> [UInt8] {
    try HKDF.derive(
      key: key.itemKey, salt: [], info: Array("appbox device-bound \(purpose)".utf8), length: 32)
  }
}
