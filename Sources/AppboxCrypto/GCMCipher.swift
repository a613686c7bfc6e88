import AppboxCore
import COpenSSL

/// AES-256-GCM for many messages under one key, with nonces the caller chooses: the cipher of
/// a sealed stream, one message per segment, where the nonce is the segment's position (see
/// the repository's object format). The key schedule is set up once per direction and reused,
/// so sealing 64 KiB segments runs at AES-NI speed.
///
/// The caller must never use one nonce twice with one key (a per-object key and a counter do
/// that). Not thread-safe: one cipher per thread.
public final class GCMCipher {
  public static let tagByteCount = 16
  public static let nonceByteCount = 12

  private let key: [UInt8]
  private var encryptor: OpaquePointer?
  private var decryptor: OpaquePointer?

  public init(key: [UInt8]) throws {
    guard key.count == AESGCM.keyByteCount else {
      throw CryptoError.invalidArgument("set up AES-256-GCM", "key must be 32 bytes, got \(key.count)")
    }
    guard Algorithms.aes256GCM != nil else {
      throw CryptoError.openSSL("set up AES-256-GCM", call: "EVP_CIPHER_fetch(AES-256-GCM)")
    }
    self.key = key
  }

  /// Uses `EVP_CIPHER_CTX_free`, which also wipes the key schedule.
  deinit {
    if let encryptor { EVP_CIPHER_CTX_free(encryptor) }
    if let decryptor { EVP_CIPHER_CTX_free(decryptor) }
  }

  /// A context for one direction, keyed on first use. Uses `EVP_CIPHER_CTX_new` and
  /// `EVP_CipherInit_ex2`.
  private func context(encrypting: Bool, _ operation: String) throws -> OpaquePointer {
    if let existing = encrypting ? encryptor : decryptor { return existing }
    guard let context = EVP_CIPHER_CTX_new() else {
      throw CryptoError.openSSL(operation, call: "EVP_CIPHER_CTX_new")
    }
    let keyed = key.withUnsafeBufferPointer {
      EVP_CipherInit_ex2(context, Algorithms.aes256GCM, $0.baseAddress, nil, encrypting ? 1 : 0, nil)
    }
    guard keyed == 1 else {
      EVP_CIPHER_CTX_free(context)
      throw CryptoError.openSSL(operation, call: "EVP_CipherInit_ex2")
    }
    if encrypting { encryptor = context } else { decryptor = context }
    return context
  }

  /// Encrypts `plaintext` into `output` (exactly `plaintext.count + 16` bytes: the ciphertext,
  /// then the tag), authenticating `associatedData` too. Uses `EVP_CipherInit_ex2`,
  /// `EVP_CipherUpdate`, `EVP_CipherFinal_ex` and `EVP_CIPHER_CTX_ctrl`.
  public func seal(
    _ plaintext: UnsafeRawBufferPointer, nonce: [UInt8], associatedData: UnsafeRawBufferPointer,
    into output: UnsafeMutableRawBufferPointer
  ) throws {
    let operation = "seal a segment with AES-256-GCM"
    guard nonce.count == Self.nonceByteCount, output.count == plaintext.count + Self.tagByteCount,
      plaintext.count < Int(Int32.max)
    else { throw CryptoError.invalidArgument(operation, "nonce or output size is wrong") }
    let context = try context(encrypting: true, operation)
    try start(context, nonce: nonce, encrypting: true, operation)
    try update(context, associatedData, into: nil, operation)
    let out = output.baseAddress!.assumingMemoryBound(to: UInt8.self)
    try update(context, plaintext, into: out, operation)
    var finalCount: Int32 = 0
    guard EVP_CipherFinal_ex(context, out + plaintext.count, &finalCount) == 1, finalCount == 0 else {
      throw CryptoError.openSSL(operation, call: "EVP_CipherFinal_ex")
    }
    guard
      EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_GET_TAG, Int32(Self.tagByteCount), out + plaintext.count) == 1
    else { throw CryptoError.openSSL(operation, call: "EVP_CIPHER_CTX_ctrl(GET_TAG)") }
  }

  /// Checks and decrypts `sealed` (ciphertext then tag) into `output` (exactly
  /// `sealed.count - 16` bytes). A changed byte, a wrong nonce or wrong associated data fails
  /// with `.badData` ("authentication failed") and leaves `output` zeroed.
  public func open(
    _ sealed: UnsafeRawBufferPointer, nonce: [UInt8], associatedData: UnsafeRawBufferPointer,
    into output: UnsafeMutableRawBufferPointer
  ) throws {
    let operation = "open a segment sealed with AES-256-GCM"
    guard nonce.count == Self.nonceByteCount, sealed.count >= Self.tagByteCount,
      output.count == sealed.count - Self.tagByteCount
    else { throw CryptoError.invalidArgument(operation, "nonce or buffer size is wrong") }
    let context = try context(encrypting: false, operation)
    try start(context, nonce: nonce, encrypting: false, operation)
    try update(context, associatedData, into: nil, operation)
    let textCount = output.count
    try update(
      context, UnsafeRawBufferPointer(rebasing: sealed[..<textCount]),
      into: output.baseAddress?.assumingMemoryBound(to: UInt8.self), operation)
    var tag = Array(sealed[textCount...])
    guard EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_TAG, Int32(Self.tagByteCount), &tag) == 1 else {
      throw CryptoError.openSSL(operation, call: "EVP_CIPHER_CTX_ctrl(SET_TAG)")
    }
    var finalCount: Int32 = 0
    var scratch = [UInt8](repeating: 0, count: 16)
    guard EVP_CipherFinal_ex(context, &scratch, &finalCount) > 0 else {
      if let base = output.baseAddress { OPENSSL_cleanse(base, output.count) }
      ERR_clear_error()
      throw CryptoError(kind: .badData, operation: operation, reason: "authentication failed")
    }
  }

  private func start(_ context: OpaquePointer, nonce: [UInt8], encrypting: Bool, _ operation: String) throws {
    let started = nonce.withUnsafeBufferPointer {
      EVP_CipherInit_ex2(context, nil, nil, $0.baseAddress, encrypting ? 1 : 0, nil)
    }
    guard started == 1 else { throw CryptoError.openSSL(operation, call: "EVP_CipherInit_ex2(nonce)") }
  }

  private func update(
    _ context: OpaquePointer, _ input: UnsafeRawBufferPointer, into output: UnsafeMutablePointer<UInt8>?,
    _ operation: String
  ) throws {
    guard let base = input.baseAddress, !input.isEmpty else { return }
    var written: Int32 = 0
    let status = EVP_CipherUpdate(
      context, output, &written, base.assumingMemoryBound(to: UInt8.self), Int32(input.count))
    guard status == 1, output == nil || Int(written) == input.count else {
      throw CryptoError.openSSL(operation, call: "EVP_CipherUpdate")
    }
  }
}
