import AppboxCore
import COpenSSL

/// AES key wrap (RFC 3394) with a 256-bit key-encryption key: how an iOS backup's keybag holds
/// its class keys, and how each file's key is held under its class key. The wrapped form is 8
/// bytes longer than the key; unwrapping checks the RFC's integrity value, so a wrong
/// key-encryption key (a wrong password) is told apart from a right one.
public enum AESKeyWrap {
  /// `key` (16 to 4096 bytes, a multiple of 8) wrapped under `keyEncryptionKey` (32 bytes).
  /// Uses `EVP_CipherInit_ex2` with AES-256-WRAP.
  public static func wrap(_ key: [UInt8], with keyEncryptionKey: [UInt8]) throws -> [UInt8] {
    let operation = "wrap a key with AES-256 key wrap"
    try check(keyEncryptionKey, input: key, minimum: 16, operation)
    guard let output = try run(key, keyEncryptionKey, encrypt: true, operation) else {
      throw CryptoError.openSSL(operation, call: "EVP_CipherUpdate")
    }
    return output
  }

  /// The key inside `wrapped`, or nil when the integrity check fails (the wrong
  /// key-encryption key, or damaged bytes). Uses `EVP_CipherInit_ex2` with AES-256-WRAP.
  public static func unwrap(_ wrapped: [UInt8], with keyEncryptionKey: [UInt8]) throws -> [UInt8]? {
    let operation = "unwrap a key with AES-256 key wrap"
    try check(keyEncryptionKey, input: wrapped, minimum: 24, operation)
    return try run(wrapped, keyEncryptionKey, encrypt: false, operation)
  }

  private static func check(_ kek: [UInt8], input: [UInt8], minimum: Int, _ operation: String) throws {
    guard kek.count == 32 else {
      throw CryptoError.invalidArgument(
        operation, "the key-encryption key must be 32 bytes, got \(kek.count)")
    }
    guard input.count >= minimum, input.count <= 4096 + 8, input.count % 8 == 0 else {
      throw CryptoError.invalidArgument(
        operation, "the input must be a multiple of 8 bytes, at least \(minimum), got \(input.count)")
    }
    guard LegacyAlgorithms.aes256Wrap != nil else {
      throw CryptoError.openSSL(operation, call: "EVP_CIPHER_fetch(AES-256-WRAP)")
    }
  }

  /// Runs the cipher once over `input`; nil when decryption's integrity check fails.
  private static func run(_ input: [UInt8], _ kek: [UInt8], encrypt: Bool, _ operation: String) throws
    -> [UInt8]?
  {
    guard let context = EVP_CIPHER_CTX_new() else {
      throw CryptoError.openSSL(operation, call: "EVP_CIPHER_CTX_new")
    }
    defer { EVP_CIPHER_CTX_free(context) }
    EVP_CIPHER_CTX_set_flags(context, EVP_CIPHER_CTX_FLAG_WRAP_ALLOW)
    guard EVP_CipherInit_ex2(context, LegacyAlgorithms.aes256Wrap, kek, nil, encrypt ? 1 : 0, nil) == 1 else {
      throw CryptoError.openSSL(operation, call: "EVP_CipherInit_ex2")
    }
    var output = [UInt8](repeating: 0, count: input.count + 16)
    var written: Int32 = 0
    let status = output.withUnsafeMutableBufferPointer { out in
      EVP_CipherUpdate(context, out.baseAddress, &written, input, Int32(input.count))
    }
    guard status == 1 else {
      ERR_clear_error()
      return nil
    }
    var final: Int32 = 0
    let finished = output.withUnsafeMutableBufferPointer { out in
      EVP_CipherFinal_ex(context, out.baseAddress! + Int(written), &final)
    }
    guard finished == 1 else {
      ERR_clear_error()
      return nil
    }
    let length = Int(written + final)
    guard length == input.count + (encrypt ? 8 : -8) else { return nil }
    return Array(output[..<length])
  }
}
