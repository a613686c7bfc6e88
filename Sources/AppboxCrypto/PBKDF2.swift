import AppboxCore
import COpenSSL

/// PBKDF2 (RFC 8018) with HMAC over SHA-1 or SHA-256: the key derivation iOS device backups use
/// for their password (PBKDF2-SHA256, then PBKDF2-SHA1 of that, since iOS 10.2). Not for
/// appbox's own secrets, which use scrypt.
public enum PBKDF2 {
  public enum Hash: String, Sendable {
    case sha1 = "SHA1"
    case sha256 = "SHA256"
  }

  /// The most iterations one derivation runs: a keybag is untrusted input, and its counts decide
  /// the work (iOS writes 10,000,000 for the first round and 10,000 for the second).
  public static let maximumIterations: UInt32 = 50_000_000

  /// `length` bytes derived from `password` and `salt`. Uses `PKCS5_PBKDF2_HMAC`.
  public static func derive(
    password: [UInt8], salt: [UInt8], iterations: UInt32, hash: Hash, length: Int
  ) throws -> [UInt8] {
    let operation = "derive a key with PBKDF2-\(hash.rawValue)"
    guard iterations >= 1, iterations <= maximumIterations else {
      throw CryptoError.invalidArgument(
        operation, "the iteration count must be 1...\(maximumIterations), got \(iterations)")
    }
    guard (1...1024).contains(length) else {
      throw CryptoError.invalidArgument(operation, "length must be 1...1024, got \(length)")
    }
    guard let digest = hash == .sha1 ? LegacyAlgorithms.sha1 : Algorithms.sha256 else {
      throw CryptoError.openSSL(operation, call: "EVP_MD_fetch(\(hash.rawValue))")
    }
    var output = [UInt8](repeating: 0, count: length)
    // Zero-length inputs still need valid pointers: give OpenSSL one byte of padding.
    let passwordBytes = password + [0]
    let saltBytes = salt + [0]
    let result = passwordBytes.withUnsafeBufferPointer { passwordPointer in
      saltBytes.withUnsafeBufferPointer { saltPointer in
        output.withUnsafeMutableBufferPointer { out in
          passwordPointer.baseAddress!.withMemoryRebound(to: CChar.self, capacity: passwordBytes.count) {
            PKCS5_PBKDF2_HMAC(
              $0, Int32(password.count), saltPointer.baseAddress, Int32(salt.count), Int32(iterations),
              digest, Int32(length), out.baseAddress)
          }
        }
      }
    }
    guard result == 1 else { throw CryptoError.openSSL(operation, call: "PKCS5_PBKDF2_HMAC") }
    return output
  }
}

/// SHA-1, only where a format demands it (an iOS backup names each file by the SHA-1 of its
/// domain and path): never for anything that must resist an attacker.
public enum SHA1 {
  /// The 20-byte SHA-1 digest of `bytes`. Uses `EVP_Digest` (the algorithm fetched once).
  public static func hash(_ bytes: [UInt8]) throws -> [UInt8] {
    guard let sha1 = LegacyAlgorithms.sha1 else {
      throw CryptoError.openSSL("compute a SHA-1 digest", call: "EVP_MD_fetch(SHA1)")
    }
    var output = [UInt8](repeating: 0, count: 20)
    var written: UInt32 = 0
    let result = bytes.withUnsafeBytes { input in
      output.withUnsafeMutableBufferPointer { out in
        // A zero-length input still needs a valid pointer.
        EVP_Digest(
          input.baseAddress ?? UnsafeRawPointer(out.baseAddress!), input.count, out.baseAddress, &written,
          sha1, nil)
      }
    }
    guard result == 1, written == 20 else {
      throw CryptoError.openSSL("compute a SHA-1 digest", call: "EVP_Digest")
    }
    return output
  }
}

/// The older algorithms the iOS backup format needs, fetched once like `Algorithms`.
enum LegacyAlgorithms {
  /// Uses `EVP_MD_fetch`.
  nonisolated(unsafe) static let sha1: OpaquePointer? = EVP_MD_fetch(nil, "SHA1", nil)
  /// Uses `EVP_CIPHER_fetch`.
  nonisolated(unsafe) static let aes256CBC: OpaquePointer? = EVP_CIPHER_fetch(nil, "AES-256-CBC", nil)
  /// RFC 3394 key wrap. Uses `EVP_CIPHER_fetch`.
  nonisolated(unsafe) static let aes256Wrap: OpaquePointer? = EVP_CIPHER_fetch(nil, "AES-256-WRAP", nil)
}
