import AppboxCore
import COpenSSL

/// Cryptographically secure random bytes from OpenSSL's DRBG (seeded by the kernel).
public enum SecureRandom {
  /// `count` random bytes. Uses `RAND_bytes`.
  public static func bytes(_ count: Int) throws -> [UInt8] {
    guard count >= 0 else {
      throw CryptoError.invalidArgument("generate random bytes", "count must not be negative, got \(count)")
    }
    var output = [UInt8](repeating: 0, count: count)
    try output.withUnsafeMutableBytes { try fill($0) }
    return output
  }

  /// Overwrites `buffer` with random bytes. Uses `RAND_bytes`.
  public static func fill(_ buffer: UnsafeMutableRawBufferPointer) throws {
    guard let base = buffer.baseAddress, !buffer.isEmpty else { return }
    var offset = 0
    while offset < buffer.count {
      // RAND_bytes takes an int count; ask for at most 1 GiB at a time.
      let chunk = min(buffer.count - offset, 1 << 30)
      let pointer = (base + offset).assumingMemoryBound(to: UInt8.self)
      guard RAND_bytes(pointer, Int32(chunk)) == 1 else {
        throw CryptoError.openSSL("generate random bytes", call: "RAND_bytes")
      }
      offset += chunk
    }
  }
}
