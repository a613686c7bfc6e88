import AppboxCore
import COpenSSL

/// scrypt (RFC 7914): a memory-hard key derivation from a password, so that each guess costs
/// `128 · r · n` bytes of memory and matching time.
public enum Scrypt {
  /// The cost parameters: `n` (a power of two) scales memory and time, `r` the block size,
  /// `p` the parallelism.
  public struct Parameters: Sendable, Equatable {
    public var n: UInt64
    public var r: UInt64
    public var p: UInt64
    public init(n: UInt64, r: UInt64, p: UInt64) {
      self.n = n
      self.r = r
      self.p = p
    }
    /// 2^15 · 8 · 128 = 32 MiB and about a tenth of a second per guess on one core.
    public static let interactive = Parameters(n: 1 << 15, r: 8, p: 1)
    /// The memory these parameters need, with room for OpenSSL's own bookkeeping.
    var memoryLimit: UInt64 { 128 * r * n * (p + 1) + (1 << 20) }
  }

  /// `length` bytes derived from `password` and `salt`. Uses `EVP_PBE_scrypt`.
  public static func derive(
    password: [UInt8], salt: [UInt8], parameters: Parameters, length: Int
  ) throws -> [UInt8] {
    let operation = "derive a key with scrypt"
    guard parameters.n > 1, parameters.n & (parameters.n - 1) == 0, parameters.r > 0, parameters.p > 0,
      parameters.n <= 1 << 22, parameters.r <= 32, parameters.p <= 16
    else {
      throw CryptoError.invalidArgument(
        operation, "N must be a power of two up to 2^22, r 1...32 and p 1...16 (got \(parameters))")
    }
    guard (1...1024).contains(length) else {
      throw CryptoError.invalidArgument(operation, "length must be 1...1024, got \(length)")
    }
    var output = [UInt8](repeating: 0, count: length)
    let result = password.withUnsafeBytes { passwordBytes in
      salt.withUnsafeBufferPointer { saltBytes in
        output.withUnsafeMutableBufferPointer { out in
          EVP_PBE_scrypt(
            passwordBytes.baseAddress?.assumingMemoryBound(to: CChar.self), passwordBytes.count,
            saltBytes.baseAddress, saltBytes.count, parameters.n, parameters.r, parameters.p,
            parameters.memoryLimit, out.baseAddress, length)
        }
      }
    }
    guard result == 1 else { throw CryptoError.openSSL(operation, call: "EVP_PBE_scrypt") }
    return output
  }
}
