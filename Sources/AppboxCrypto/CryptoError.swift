// AppboxCrypto owns libcrypto: SHA-256, AES-256-GCM, HKDF-SHA256 and secure random bytes,
// all through OpenSSL 3's EVP API. It is the only module that imports COpenSSL; it depends on
// AppboxCore alone. Callers never see an OpenSSL pointer.

import AppboxCore
import COpenSSL
import Glibc

/// A failed cryptographic operation: what was attempted, why it failed, and the OpenSSL
/// error or `errno` underneath when there is one.
public struct CryptoError: AppboxFailure {
  public let kind: FailureKind
  /// What was being attempted: "open AES-GCM sealed box", "hash file descriptor 7".
  public let operation: String
  /// Why it failed: "authentication failed", "key must be 32 bytes, got 16".
  public let reason: String
  /// The first code on OpenSSL's error queue when the failure came from OpenSSL.
  public let openSSLCode: UInt?
  /// The `errno` of a failed system call.
  public let systemErrno: Int32?

  public init(
    kind: FailureKind, operation: String, reason: String, openSSLCode: UInt? = nil,
    systemErrno: Int32? = nil
  ) {
    self.kind = kind
    self.operation = operation
    self.reason = reason
    self.openSSLCode = openSSLCode
    self.systemErrno = systemErrno
  }

  public var description: String {
    "Unable to \(operation): \(reason)"
  }

  /// An error from OpenSSL's error queue for this thread, which it then empties so later
  /// failures are not blamed on stale entries. Uses `ERR_get_error` and `ERR_error_string_n`.
  static func openSSL(_ operation: String, call: String, kind: FailureKind = .unavailable) -> CryptoError {
    let code = ERR_get_error()
    ERR_clear_error()
    guard code != 0 else {
      return CryptoError(kind: kind, operation: operation, reason: "\(call) failed")
    }
    var buffer = [CChar](repeating: 0, count: 256)
    ERR_error_string_n(code, &buffer, buffer.count)
    let text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    return CryptoError(kind: kind, operation: operation, reason: "\(call) failed: \(text)", openSSLCode: code)
  }

  /// An error for a failed system call, with `strerror`'s text. Uses `strerror`.
  static func system(_ operation: String, errno code: Int32) -> CryptoError {
    CryptoError(
      kind: .io, operation: operation, reason: String(cString: strerror(code)), systemErrno: code)
  }

  static func invalidArgument(_ operation: String, _ reason: String) -> CryptoError {
    CryptoError(kind: .invalidArgument, operation: operation, reason: reason)
  }
}

/// Algorithms fetched once from OpenSSL's default provider. Fetched objects are immutable
/// and reference-counted, so sharing them between threads is safe; fetching per call would
/// repeat a locked provider lookup on every hash or seal. Never freed (process lifetime).
enum Algorithms {
  /// Uses `EVP_MD_fetch`.
  nonisolated(unsafe) static let sha256: OpaquePointer? = EVP_MD_fetch(nil, "SHA256", nil)
  /// Uses `EVP_CIPHER_fetch`.
  nonisolated(unsafe) static let aes256GCM: OpaquePointer? = EVP_CIPHER_fetch(nil, "AES-256-GCM", nil)
  /// Uses `EVP_KDF_fetch`.
  nonisolated(unsafe) static let hkdf: OpaquePointer? = EVP_KDF_fetch(nil, "HKDF", nil)
}
