import AppboxCore
import COpenSSL

/// HMAC-SHA256 (RFC 2104 with SHA-256): the message authentication code AWS Signature
/// Version 4 chains to derive its signing key and to sign requests.
public enum HMACSHA256 {
  /// The 32-byte code of `message` under `key`. Uses `EVP_Q_mac`.
  public static func authenticationCode(for message: [UInt8], key: [UInt8]) throws -> [UInt8] {
    var output = [UInt8](repeating: 0, count: 32)
    var written = 0
    // A zero-length buffer still needs a valid pointer: give OpenSSL one byte of padding.
    let keyBytes = key + [0]
    let messageBytes = message + [0]
    let result = keyBytes.withUnsafeBufferPointer { keyPointer in
      messageBytes.withUnsafeBufferPointer { messagePointer in
        output.withUnsafeMutableBufferPointer { out in
          EVP_Q_mac(
            nil, "HMAC", nil, "SHA256", nil, keyPointer.baseAddress, key.count, messagePointer.baseAddress,
            message.count, out.baseAddress, 32, &written)
        }
      }
    }
    guard result != nil, written == 32 else {
      throw CryptoError.openSSL("compute an HMAC-SHA256", call: "EVP_Q_mac")
    }
    return output
  }
}

/// MD5, only where a protocol demands it (S3's `Content-MD5` header on multi-object
/// deletes): never for anything that must resist an attacker.
public enum MD5 {
  /// The 16-byte MD5 digest of `bytes`. Uses `EVP_Q_digest`.
  public static func hash(_ bytes: [UInt8]) throws -> [UInt8] {
    var output = [UInt8](repeating: 0, count: 16)
    var written = 0
    let input = bytes + [0]
    let result = input.withUnsafeBufferPointer { inputPointer in
      output.withUnsafeMutableBufferPointer { out in
        EVP_Q_digest(nil, "MD5", nil, inputPointer.baseAddress, bytes.count, out.baseAddress, &written)
      }
    }
    guard result == 1, written == 16 else {
      throw CryptoError.openSSL("compute an MD5 digest", call: "EVP_Q_digest")
    }
    return output
  }
}
