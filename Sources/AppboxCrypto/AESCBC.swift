import AppboxCore
import COpenSSL

/// AES-256-CBC with PKCS#7 padding, streamed: the cipher of an iOS backup's files and of its
/// encrypted Manifest.db (each with its own key and an all-zero IV, as the format has it). It
/// has no integrity of its own: a reader checks what it decrypted (the padding here, the
/// sizes and hashes above).
///
/// One instance encrypts or decrypts one stream: `update` as the bytes come, then `finish`.
/// Not thread-safe: one per thread.
public final class AESCBCStream {
  private let context: OpaquePointer
  private let encrypting: Bool
  private let operation: String
  private var finished = false

  /// The block size, and the most `update` or `finish` writes beyond its input.
  public static let blockSize = 16

  /// Uses `EVP_CIPHER_CTX_new` and `EVP_CipherInit_ex2` with AES-256-CBC.
  public init(key: [UInt8], iv: [UInt8] = [UInt8](repeating: 0, count: 16), encrypting: Bool) throws {
    operation = encrypting ? "encrypt with AES-256-CBC" : "decrypt with AES-256-CBC"
    guard key.count == 32, iv.count == 16 else {
      throw CryptoError.invalidArgument(
        operation, "the key must be 32 bytes and the IV 16, got \(key.count) and \(iv.count)")
    }
    guard LegacyAlgorithms.aes256CBC != nil else {
      throw CryptoError.openSSL(operation, call: "EVP_CIPHER_fetch(AES-256-CBC)")
    }
    guard let context = EVP_CIPHER_CTX_new() else {
      throw CryptoError.openSSL(operation, call: "EVP_CIPHER_CTX_new")
    }
    self.context = context
    self.encrypting = encrypting
    guard EVP_CipherInit_ex2(context, LegacyAlgorithms.aes256CBC, key, iv, encrypting ? 1 : 0, nil) == 1
    else {
      throw CryptoError.openSSL(operation, call: "EVP_CipherInit_ex2")
    }
  }

  /// Uses `EVP_CIPHER_CTX_free`, which also wipes the key schedule.
  deinit {
    EVP_CIPHER_CTX_free(context)
  }

  /// Feeds `input`; writes what it completes into `output`, which must have room for
  /// `input.count + blockSize` bytes (decryption holds the last block back until `finish`).
  /// Returns the bytes written. Uses `EVP_CipherUpdate`.
  public func update(_ input: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) throws
    -> Int
  {
    guard !finished else { throw CryptoError.invalidArgument(operation, "the stream is finished") }
    guard let base = input.baseAddress, !input.isEmpty else { return 0 }
    guard output.count >= input.count + Self.blockSize, let out = output.baseAddress else {
      throw CryptoError.invalidArgument(operation, "the output buffer is too small")
    }
    var total = 0
    var offset = 0
    while offset < input.count {
      let chunk = min(input.count - offset, 1 << 30)
      var written: Int32 = 0
      guard
        EVP_CipherUpdate(
          context, (out + total).assumingMemoryBound(to: UInt8.self), &written,
          (base + offset).assumingMemoryBound(to: UInt8.self), Int32(chunk)) == 1
      else { throw CryptoError.openSSL(operation, call: "EVP_CipherUpdate", kind: .badData) }
      total += Int(written)
      offset += chunk
    }
    return total
  }

  /// Ends the stream: encryption writes the padded last block; decryption checks and strips
  /// the padding (a `.badData` error when it is not PKCS#7, as from a wrong key or damaged
  /// bytes) and writes what is left. `output` needs `blockSize` bytes of room.
  /// Uses `EVP_CipherFinal_ex`.
  public func finish(into output: UnsafeMutableRawBufferPointer) throws -> Int {
    guard !finished else { throw CryptoError.invalidArgument(operation, "the stream is finished") }
    finished = true
    guard output.count >= Self.blockSize, let out = output.baseAddress else {
      throw CryptoError.invalidArgument(operation, "the output buffer is too small")
    }
    var written: Int32 = 0
    guard EVP_CipherFinal_ex(context, out.assumingMemoryBound(to: UInt8.self), &written) == 1 else {
      ERR_clear_error()
      throw CryptoError(
        kind: .badData, operation: operation,
        reason: encrypting ? "the cipher failed" : "the padding is wrong (a wrong key, or damaged bytes)")
    }
    return Int(written)
  }

  /// `bytes` encrypted or decrypted whole.
  public static func process(_ bytes: [UInt8], key: [UInt8], encrypting: Bool) throws -> [UInt8] {
    let stream = try AESCBCStream(key: key, encrypting: encrypting)
    var output = [UInt8](repeating: 0, count: bytes.count + 2 * blockSize)
    let written = try bytes.withUnsafeBytes { input in
      try output.withUnsafeMutableBytes { out in
        let first = try stream.update(input, into: out)
        return first + (try stream.finish(into: UnsafeMutableRawBufferPointer(rebasing: out[first...])))
      }
    }
    return Array(output[..<written])
  }
}
