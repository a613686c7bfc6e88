import COpenSSL
import Foundation
import Glibc

/// An incremental SHA-256 computation over one reusable OpenSSL context.
///
/// `update` hashes the caller's memory in place: no copy and no allocation per call, so the
/// speed is OpenSSL's (SHA extensions where the CPU has them). After `finalize` the hasher
/// starts over and can hash the next input. Not thread-safe: one hasher per thread.
public final class SHA256Hasher {
  private let context: OpaquePointer

  /// Uses `EVP_MD_CTX_new` and `EVP_DigestInit_ex2`.
  public init() {
    guard Algorithms.sha256 != nil, let context = EVP_MD_CTX_new() else {
      // Only without memory or without OpenSSL's default provider; nothing sensible to do.
      fatalError("OpenSSL cannot provide SHA-256: \(CryptoError.openSSL("hash", call: "EVP_MD_fetch"))")
    }
    self.context = context
    start()
  }

  /// Uses `EVP_MD_CTX_free`.
  deinit {
    EVP_MD_CTX_free(context)
  }

  /// Uses `EVP_DigestInit_ex2`.
  private func start() {
    guard EVP_DigestInit_ex2(context, Algorithms.sha256, nil) == 1 else {
      fatalError("\(CryptoError.openSSL("hash", call: "EVP_DigestInit_ex2"))")
    }
  }

  /// Adds bytes without copying them. Uses `EVP_DigestUpdate`.
  public func update(_ buffer: UnsafeRawBufferPointer) {
    guard let base = buffer.baseAddress, !buffer.isEmpty else { return }
    // EVP_DigestUpdate fails only on a misused context, which this class does not allow.
    guard EVP_DigestUpdate(context, base, buffer.count) == 1 else {
      fatalError("\(CryptoError.openSSL("hash", call: "EVP_DigestUpdate"))")
    }
  }

  /// Adds bytes. Uses `EVP_DigestUpdate`.
  public func update(_ bytes: [UInt8]) {
    bytes.withUnsafeBytes { update($0) }
  }

  /// Adds bytes. Uses `EVP_DigestUpdate`.
  public func update(_ data: Data) {
    data.withUnsafeBytes { update($0) }
  }

  /// Adds everything that can be read from `fileDescriptor`, from its current offset to end
  /// of file, retrying reads interrupted by signals. Returns the number of bytes hashed.
  /// Uses `read(2)`.
  @discardableResult
  public func update(readingFrom fileDescriptor: Int32) throws -> Int {
    let capacity = 128 * 1024
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: capacity, alignment: 16)
    defer { buffer.deallocate() }
    var total = 0
    while true {
      let count = Glibc.read(fileDescriptor, buffer.baseAddress, capacity)
      if count == 0 { return total }
      if count < 0 {
        let code = errno
        if code == EINTR { continue }
        throw CryptoError.system("read file descriptor \(fileDescriptor) for hashing", errno: code)
      }
      update(UnsafeRawBufferPointer(rebasing: buffer[..<count]))
      total += count
    }
  }

  /// Returns the digest of everything added since the last `finalize` (or `init`) and starts
  /// over. Uses `EVP_DigestFinal_ex`.
  public func finalize() -> Digest {
    var output: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
    var length: UInt32 = 0
    let status = withUnsafeMutableBytes(of: &output) { raw in
      EVP_DigestFinal_ex(context, raw.baseAddress!.assumingMemoryBound(to: UInt8.self), &length)
    }
    guard status == 1, length == UInt32(Digest.byteCount) else {
      fatalError("\(CryptoError.openSSL("hash", call: "EVP_DigestFinal_ex"))")
    }
    start()
    return withUnsafeBytes(of: &output) { Digest(rawBytes: $0) }
  }
}

/// One-shot SHA-256.
public enum SHA256 {
  /// The digest of `bytes` (an array, `Data`, a slice or a raw buffer), hashed in place.
  /// For many small inputs, reusing one `SHA256Hasher` avoids a context allocation per call.
  /// Uses `EVP_Digest`.
  public static func hash(_ bytes: some ContiguousBytes) -> Digest {
    var output: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
    var length: UInt32 = 0
    let status = bytes.withUnsafeBytes { input in
      withUnsafeMutableBytes(of: &output) { raw in
        // An empty buffer may have no address; hand OpenSSL a valid one rather than NULL.
        let start = input.baseAddress ?? UnsafeRawPointer(raw.baseAddress!)
        return EVP_Digest(
          start, input.count, raw.baseAddress!.assumingMemoryBound(to: UInt8.self), &length,
          Algorithms.sha256, nil)
      }
    }
    guard status == 1, length == UInt32(Digest.byteCount) else {
      fatalError("\(CryptoError.openSSL("hash", call: "EVP_Digest"))")
    }
    return withUnsafeBytes(of: &output) { Digest(rawBytes: $0) }
  }

  /// The digest of everything readable from `fileDescriptor`, from its current offset to end
  /// of file. The descriptor stays open; its offset ends at end of file. Uses `read(2)`.
  public static func hash(fileDescriptor: Int32) throws -> Digest {
    let hasher = SHA256Hasher()
    try hasher.update(readingFrom: fileDescriptor)
    return hasher.finalize()
  }
}
