import AppboxCore
import COpenSSL

/// HKDF with SHA-256 (RFC 5869): derives keys from input keying material.
public enum HKDF {
  /// Largest output RFC 5869 allows with SHA-256: 255 blocks of 32 bytes.
  public static let maximumLength = 255 * 32

  /// Extract-then-expand: `length` bytes derived from `key`, `salt` and `info`. An empty salt
  /// means 32 zero bytes, as the RFC specifies; an empty info is no context.
  /// Uses `EVP_KDF_CTX_new`, `EVP_KDF_CTX_set_params` and `EVP_KDF_derive`.
  public static func derive(key: [UInt8], salt: [UInt8], info: [UInt8], length: Int) throws -> [UInt8] {
    let operation = "derive a key with HKDF-SHA256"
    guard !key.isEmpty else {
      throw CryptoError.invalidArgument(operation, "input key material must not be empty")
    }
    guard (1...maximumLength).contains(length) else {
      throw CryptoError.invalidArgument(operation, "length must be 1...\(maximumLength), got \(length)")
    }
    guard let kdf = Algorithms.hkdf, let context = EVP_KDF_CTX_new(kdf) else {
      throw CryptoError.openSSL(operation, call: "EVP_KDF_CTX_new(HKDF)")
    }
    defer { EVP_KDF_CTX_free(context) }

    // Each parameter is set by its own call so that the C strings and buffers it points to
    // only need to live for that call: EVP_KDF_CTX_set_params copies what it is given.
    let digestSet = "digest".withCString { name in
      "SHA256".withCString { value in
        var params = [
          OSSL_PARAM_construct_utf8_string(name, UnsafeMutablePointer(mutating: value), 0),
          OSSL_PARAM_construct_end(),
        ]
        return EVP_KDF_CTX_set_params(context, &params)
      }
    }
    guard digestSet == 1 else { throw CryptoError.openSSL(operation, call: "EVP_KDF_CTX_set_params(digest)") }
    for (name, bytes) in [("key", key), ("salt", salt), ("info", info)] where !bytes.isEmpty {
      let set = name.withCString { name in
        bytes.withUnsafeBytes { buffer in
          var params = [
            OSSL_PARAM_construct_octet_string(
              name, UnsafeMutableRawPointer(mutating: buffer.baseAddress), buffer.count),
            OSSL_PARAM_construct_end(),
          ]
          return EVP_KDF_CTX_set_params(context, &params)
        }
      }
      guard set == 1 else { throw CryptoError.openSSL(operation, call: "EVP_KDF_CTX_set_params(\(name))") }
    }

    var output = [UInt8](repeating: 0, count: length)
    let derived = output.withUnsafeMutableBufferPointer {
      EVP_KDF_derive(context, $0.baseAddress, length, nil)
    }
    guard derived == 1 else { throw CryptoError.openSSL(operation, call: "EVP_KDF_derive") }
    return output
  }
}
