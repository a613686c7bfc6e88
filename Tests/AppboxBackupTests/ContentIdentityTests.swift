import AppboxCore
import AppboxCrypto
import AppboxTestSupport
import Foundation
import Glibc
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

/// The sparse content identity (ContentIdentity.swift): a function of the content alone, computed
/// from the data, apart from the plain SHA-256 by construction.
struct ContentIdentityTests {
  /// Feeds `runs` (data at offsets) to a hasher of `size` bytes, each run in pieces of `piece`.
  func identity(
    size: Int64, _ runs: [(Int64, [UInt8])], sparse: Bool = true, piece: Int = 1 << 20
  ) -> (digest: Digest, dataBytes: Int64) {
    let hasher = ContentHasher(sparse: sparse, size: size)
    for (offset, bytes) in runs {
      var start = 0
      while start < bytes.count {
        let end = min(bytes.count, start + piece)
        bytes[start..<end].withUnsafeBytes { hasher.update($0, at: offset + Int64(start)) }
        start = end
      }
    }
    let data = hasher.dataBytes
    return (hasher.finalize(), data)
  }

  @Test func theSameBytesHaveTheSameIdentityWhateverTheirMap() {
    let size: Int64 = 5 << 20
    var random = SeededRandom(seed: 3)
    var a = [UInt8](repeating: 0, count: 10_000)
    a.withUnsafeMutableBytes { random.fill($0) }
    var b = [UInt8](repeating: 0, count: 3_000)
    b.withUnsafeMutableBytes { random.fill($0) }
    // Data at 100 and at 4 MiB + 17 (neither on a block boundary), holes elsewhere.
    let holes = identity(size: size, [(100, a), (4 << 20 + 17, b)])
    // The same content with the zeros around the data given as data (as a file system that
    // allocated whole blocks, or a dense member, hands them over), in odd pieces.
    var dense = [UInt8](repeating: 0, count: Int(size))
    dense.replaceSubrange(100..<(100 + a.count), with: a)
    dense.replaceSubrange((4 << 20 + 17)..<(4 << 20 + 17 + b.count), with: b)
    let whole = identity(size: size, [(0, dense)], piece: 12_345)
    #expect(holes.digest == whole.digest)
    let blocks = identity(size: size, [(0, Array(dense[0..<16384])), (4 << 20, Array(dense[(4 << 20)...]))])
    #expect(blocks.digest == holes.digest)
    // What was hashed: the data given, never the holes.
    #expect(holes.dataBytes == Int64(a.count + b.count))
    // Any byte of content changes it; so does the length.
    dense[4 << 20 + 17] ^= 1
    #expect(identity(size: size, [(0, dense)]).digest != holes.digest)
    #expect(identity(size: size + 1, [(100, a), (4 << 20 + 17, b)]).digest != holes.digest)
    #expect(identity(size: size, [(101, a), (4 << 20 + 17, b)]).digest != holes.digest)
  }

  /// The plain kind is the SHA-256 of every byte; the sparse kind is never the SHA-256 of any
  /// bytes an app could write: not of the content, not of the encoding it hashes.
  @Test func theTwoKindsAreApart() {
    let content = Array("a file an app wrote".utf8) + [UInt8](repeating: 0, count: 8192)
    let plain = identity(size: Int64(content.count), [(0, content)], sparse: false)
    #expect(plain.digest == SHA256.hash(content))
    let sparse = identity(size: Int64(content.count), [(0, content)])
    #expect(sparse.digest != plain.digest)
    // The bytes the sparse kind hashes, before its final XOR: a file with exactly these bytes
    // has a plain digest that is not the sparse identity.
    var encoding = Array("appbox sparse 1\n".utf8)
    withUnsafeBytes(of: UInt64(content.count).littleEndian) { encoding += $0 }
    withUnsafeBytes(of: UInt64(0).littleEndian) { encoding += $0 }
    encoding += content[0..<4096]
    let unmasked = SHA256.hash(encoding)
    #expect(sparse.digest != unmasked)
    #expect(
      sparse.digest == unmasked.xor(SHA256.hash(Array("appbox sparse content identity, version 1".utf8))))
  }

  /// A tebibyte of content with three small runs costs the runs: the hasher is handed them, and
  /// nothing else is hashed (no loop runs over the holes, or this would not finish).
  @Test func aTebibyteIsHashedByItsData() {
    let size: Int64 = 1 << 40
    let runs: [(Int64, [UInt8])] = [
      (0, [UInt8](repeating: 7, count: 65536)), (500 << 30, [UInt8](repeating: 9, count: 1 << 20)),
      (size - 100, [UInt8](repeating: 1, count: 100)),
    ]
    let first = identity(size: size, runs)
    #expect(first.dataBytes == 65536 + (1 << 20) + 100)
    #expect(identity(size: size, runs).digest == first.digest)
    #expect(identity(size: size, Array(runs.prefix(2))).digest != first.digest)
  }
}
