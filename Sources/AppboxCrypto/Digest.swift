/// A SHA-256 value.
///
/// Stored as four big-endian 64-bit words rather than an array: no heap allocation, equality
/// is four integer compares, and comparing the words in order sorts digests like their bytes.
public struct Digest: Hashable, Sendable, Comparable, CustomStringConvertible {
  /// Bytes in a SHA-256 digest.
  public static let byteCount = 32

  // Word i holds bytes 8i..<8i+8, most significant byte first.
  private let word0: UInt64
  private let word1: UInt64
  private let word2: UInt64
  private let word3: UInt64

  /// Makes a digest from its 32 bytes. A different count is a programming error and traps;
  /// use `init?(validating:)` for bytes read from outside.
  public init(bytes: some Collection<UInt8>) {
    guard let digest = Digest(validating: bytes) else {
      preconditionFailure("a SHA-256 digest is 32 bytes, got \(bytes.count)")
    }
    self = digest
  }

  /// Makes a digest from its 32 bytes, or returns nil for any other count.
  public init?(validating bytes: some Collection<UInt8>) {
    guard bytes.count == Digest.byteCount else { return nil }
    let words =
      bytes.withContiguousStorageIfAvailable { Digest.loadWords(UnsafeRawBufferPointer($0)) }
      ?? Array(bytes).withUnsafeBytes { Digest.loadWords($0) }
    self.init(words: words)
  }

  /// Parses 64 hexadecimal digits (either case); nil for anything else.
  public init?(hex: String) {
    var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
    var count = 0
    for character in hex.utf8 {
      guard count < 64, let nibble = Digest.nibble(character) else { return nil }
      let shift = UInt64(60 - (count % 16) * 4)
      let value = UInt64(nibble) << shift
      switch count / 16 {
      case 0: words.0 |= value
      case 1: words.1 |= value
      case 2: words.2 |= value
      default: words.3 |= value
      }
      count += 1
    }
    guard count == 64 else { return nil }
    self.init(words: words)
  }

  init(words: (UInt64, UInt64, UInt64, UInt64)) {
    word0 = words.0
    word1 = words.1
    word2 = words.2
    word3 = words.3
  }

  /// Makes a digest from the 32 bytes OpenSSL wrote into `raw`.
  init(rawBytes raw: UnsafeRawBufferPointer) {
    self.init(words: Digest.loadWords(raw))
  }

  private static func loadWords(_ raw: UnsafeRawBufferPointer) -> (UInt64, UInt64, UInt64, UInt64) {
    precondition(raw.count >= Digest.byteCount)
    func word(_ index: Int) -> UInt64 {
      UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: index * 8, as: UInt64.self))
    }
    return (word(0), word(1), word(2), word(3))
  }

  private static func nibble(_ character: UInt8) -> UInt8? {
    switch character {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): return character - UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): return character - UInt8(ascii: "a") + 10
    case UInt8(ascii: "A")...UInt8(ascii: "F"): return character - UInt8(ascii: "A") + 10
    default: return nil
    }
  }

  /// The 32 bytes.
  public var bytes: [UInt8] {
    withUnsafeBytes { Array($0) }
  }

  /// 64 lowercase hexadecimal digits.
  public var hex: String {
    let digits = Array("0123456789abcdef".utf8)
    return withUnsafeBytes { raw in
      String(unsafeUninitializedCapacity: 64) { out in
        for (index, byte) in raw.enumerated() {
          out[index * 2] = digits[Int(byte >> 4)]
          out[index * 2 + 1] = digits[Int(byte & 0x0F)]
        }
        return 64
      }
    }
  }

  public var description: String { hex }

  /// Lends the 32 bytes without allocating; valid only inside `body`.
  public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
    // A homogeneous tuple is laid out contiguously, so this is 32 bytes in digest order.
    var bigEndian = (word0.bigEndian, word1.bigEndian, word2.bigEndian, word3.bigEndian)
    return try Swift.withUnsafeBytes(of: &bigEndian, body)
  }

  public static func < (lhs: Digest, rhs: Digest) -> Bool {
    (lhs.word0, lhs.word1, lhs.word2, lhs.word3) < (rhs.word0, rhs.word1, rhs.word2, rhs.word3)
  }
}
