import AppboxCore
import COpenSSL

/// AES-256-GCM authenticated encryption in one self-contained format:
/// `nonce (12 bytes) || ciphertext (as long as the plaintext) || tag (16 bytes)`.
///
/// Every seal draws a fresh random nonce, so sealing the same plaintext twice gives different
/// output. With random 96-bit nonces, keep to well under 2^32 seals per key (NIST SP 800-38D).
public enum AESGCM {
  /// Bytes in a key.
  public static let keyByteCount = 32
  /// Bytes in the nonce at the start of a sealed message.
  public static let nonceByteCount = 12
  /// Bytes in the tag at the end of a sealed message.
  public static let tagByteCount = 16

  /// Encrypts and authenticates `plaintext`, and authenticates `associatedData` (which is not
  /// stored: `open` must be given the same bytes). Uses `EVP_EncryptInit_ex2`,
  /// `EVP_EncryptUpdate`, `EVP_EncryptFinal_ex` and `EVP_CIPHER_CTX_ctrl`.
  public static func seal(
    _ plaintext: [UInt8], key: [UInt8], associatedData: [UInt8] = []
  ) throws -> [UInt8] {
    let operation = "seal with AES-256-GCM"
    try checkKey(key, operation)
    let context = try Context(operation)
    let textCount = plaintext.count
    var sealed = [UInt8](repeating: 0, count: nonceByteCount + textCount + tagByteCount)
    try sealed.withUnsafeMutableBytes { output in
      let base = output.baseAddress!.assumingMemoryBound(to: UInt8.self)
      let nonce = UnsafeMutableRawBufferPointer(rebasing: output[..<nonceByteCount])
      try SecureRandom.fill(nonce)
      let started = key.withUnsafeBufferPointer { keyBytes in
        EVP_EncryptInit_ex2(context.handle, Algorithms.aes256GCM, keyBytes.baseAddress, base, nil)
      }
      guard started == 1 else { throw CryptoError.openSSL(operation, call: "EVP_EncryptInit_ex2") }
      try associatedData.withUnsafeBytes { try context.update($0, into: nil, operation) }
      try plaintext.withUnsafeBytes { try context.update($0, into: base + nonceByteCount, operation) }
      var finalCount: Int32 = 0
      let tag = base + nonceByteCount + textCount
      guard EVP_EncryptFinal_ex(context.handle, tag, &finalCount) == 1, finalCount == 0 else {
        throw CryptoError.openSSL(operation, call: "EVP_EncryptFinal_ex")
      }
      guard EVP_CIPHER_CTX_ctrl(context.handle, EVP_CTRL_GCM_GET_TAG, Int32(tagByteCount), tag) == 1 else {
        throw CryptoError.openSSL(operation, call: "EVP_CIPHER_CTX_ctrl(GET_TAG)")
      }
    }
    return sealed
  }

  /// Checks and decrypts a message made by `seal`. A wrong key, wrong associated data, or any
  /// changed byte fails with `.badData` ("authentication failed") and returns no plaintext.
  /// Uses `EVP_DecryptInit_ex2`, `EVP_DecryptUpdate`, `EVP_CIPHER_CTX_ctrl` and
  /// `EVP_DecryptFinal_ex`; wipes rejected plaintext with `OPENSSL_cleanse`.
  public static func open(_ sealed: [UInt8], key: [UInt8], associatedData: [UInt8] = []) throws -> [UInt8] {
    let operation = "open AES-256-GCM sealed message"
    try checkKey(key, operation)
    let overhead = nonceByteCount + tagByteCount
    guard sealed.count >= overhead else {
      throw CryptoError(
        kind: .badData, operation: operation,
        reason: "sealed message is \(sealed.count) bytes, shorter than its \(overhead)-byte nonce and tag")
    }
    let context = try Context(operation)
    let textCount = sealed.count - overhead
    var plaintext = [UInt8](repeating: 0, count: textCount)
    let authentic = try sealed.withUnsafeBytes { input -> Bool in
      let nonce = input.baseAddress!.assumingMemoryBound(to: UInt8.self)
      let started = key.withUnsafeBufferPointer { keyBytes in
        EVP_DecryptInit_ex2(context.handle, Algorithms.aes256GCM, keyBytes.baseAddress, nonce, nil)
      }
      guard started == 1 else { throw CryptoError.openSSL(operation, call: "EVP_DecryptInit_ex2") }
      try associatedData.withUnsafeBytes { try context.update($0, into: nil, operation) }
      let ciphertext = UnsafeRawBufferPointer(rebasing: input[nonceByteCount..<nonceByteCount + textCount])
      try plaintext.withUnsafeMutableBufferPointer { output in
        try context.update(ciphertext, into: output.baseAddress, operation)
      }
      // SET_TAG only reads the tag, but the C signature takes a mutable pointer; give it a copy.
      var tag = Array(input[(nonceByteCount + textCount)...])
      guard EVP_CIPHER_CTX_ctrl(context.handle, EVP_CTRL_GCM_SET_TAG, Int32(tagByteCount), &tag) == 1 else {
        throw CryptoError.openSSL(operation, call: "EVP_CIPHER_CTX_ctrl(SET_TAG)")
      }
      var finalCount: Int32 = 0
      var scratch = [UInt8](repeating: 0, count: 16)
      return EVP_DecryptFinal_ex(context.handle, &scratch, &finalCount) > 0
    }
    guard authentic else {
      // Do not leave unauthenticated plaintext lying around in freed memory.
      plaintext.withUnsafeMutableBytes { OPENSSL_cleanse($0.baseAddress, $0.count) }
      ERR_clear_error()
      throw CryptoError(kind: .badData, operation: operation, reason: "authentication failed")
    }
    return plaintext
  }

  private static func checkKey(_ key: [UInt8], _ operation: String) throws {
    guard key.count == keyByteCount else {
      throw CryptoError.invalidArgument(operation, "key must be \(keyByteCount) bytes, got \(key.count)")
    }
    guard Algorithms.aes256GCM != nil else {
      throw CryptoError.openSSL(operation, call: "EVP_CIPHER_fetch(AES-256-GCM)")
    }
  }

  /// Owns one `EVP_CIPHER_CTX` for the length of a seal or open.
  private final class Context {
    let handle: OpaquePointer

    /// Uses `EVP_CIPHER_CTX_new`.
    init(_ operation: String) throws {
      guard let handle = EVP_CIPHER_CTX_new() else {
        throw CryptoError.openSSL(operation, call: "EVP_CIPHER_CTX_new")
      }
      self.handle = handle
    }

    /// Uses `EVP_CIPHER_CTX_free`, which also wipes the key schedule.
    deinit {
      EVP_CIPHER_CTX_free(handle)
    }

    /// Feeds `input` through the cipher in chunks that fit its `int` lengths; GCM writes as
    /// many bytes as it reads. With `output` nil the input is associated data.
    /// Uses `EVP_CipherUpdate`.
    func update(
      _ input: UnsafeRawBufferPointer, into output: UnsafeMutablePointer<UInt8>?, _ operation: String
    ) throws {
      guard let base = input.baseAddress, !input.isEmpty else { return }
      var offset = 0
      while offset < input.count {
        let chunk = min(input.count - offset, 1 << 30)
        var written: Int32 = 0
        let status = EVP_CipherUpdate(
          handle, output.map { $0 + offset }, &written,
          (base + offset).assumingMemoryBound(to: UInt8.self), Int32(chunk))
        guard status == 1, output == nil || Int(written) == chunk else {
          throw CryptoError.openSSL(operation, call: "EVP_CipherUpdate")
        }
        offset += chunk
      }
    }
  }
}
