import AppboxTestSupport
import Foundation
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

/// Pseudo-random bytes from a seed (fresh content: nothing repeats).
func randomBytes(_ count: Int, seed: UInt64) -> [UInt8] {
  var random = SeededRandom(seed: seed)
  var bytes = [UInt8](repeating: 0, count: count)
  bytes.withUnsafeMutableBytes { random.fill($0) }
  return bytes
}

func chunkLengths(_ bytes: [UInt8]) -> [Int] { bytes.withUnsafeBytes { Chunker.chunkLengths(of: $0) } }

struct ChunkerTests {
  /// Cuts fall where the content says, whatever pieces the bytes arrive in.
  @Test func cutsDoNotDependOnHowTheBytesArrive() {
    let bytes = randomBytes(12 << 20, seed: 1)
    let whole = chunkLengths(bytes)
    var generator = SeededRandom(seed: 2)
    var chunker = Chunker()
    var lengths: [Int] = []
    var current = 0
    var start = 0
    while start < bytes.count {
      let piece = min(bytes.count - start, 1 + generator.below(300_000))
      var offset = start
      while offset < start + piece {
        let (count, boundary) = bytes.withUnsafeBytes {
          chunker.consume(UnsafeRawBufferPointer(rebasing: $0[offset..<(start + piece)]))
        }
        current += count
        offset += count
        if boundary {
          lengths.append(current)
          current = 0
        }
      }
      start += piece
    }
    if current > 0 { lengths.append(current) }
    #expect(lengths == whole)
    #expect(whole.reduce(0, +) == bytes.count)
  }

  @Test func chunksStayWithinTheBoundsAndAverageNearTheTarget() {
    let bytes = randomBytes(64 << 20, seed: 3)
    let lengths = chunkLengths(bytes)
    #expect(
      lengths.dropLast().allSatisfy { $0 >= ChunkingParameters.minimum && $0 <= ChunkingParameters.maximum })
    let average = Double(bytes.count) / Double(lengths.count)
    #expect(
      average > 0.6 * Double(ChunkingParameters.average) && average < 1.6 * Double(ChunkingParameters.average)
    )
  }

  /// An edit in place moves only the cuts near it: every other chunk is the same.
  @Test func anEditInPlaceChangesOnlyTheChunksAroundIt() {
    var bytes = randomBytes(32 << 20, seed: 4)
    let before = chunkLengths(bytes)
    for index in (16 << 20)..<((16 << 20) + 4096) { bytes[index] ^= 0x5A }
    let after = chunkLengths(bytes)
    let common = Set(offsets(before)).intersection(offsets(after))
    #expect(before.count - common.count <= 2, "\(before.count) chunks, \(common.count) cuts kept")
    // Inserting bytes shifts the content, not the cuts after the next one.
    bytes.insert(contentsOf: [UInt8](repeating: 7, count: 1000), at: 8 << 20)
    let inserted = chunkLengths(bytes)
    #expect(Set(inserted).intersection(before).count >= before.count - 4)
  }

  @Test func zerosAreCutAtTheLargestSize() {
    let lengths = chunkLengths([UInt8](repeating: 0, count: 10 << 20))
    #expect(lengths.dropLast().allSatisfy { $0 == lengths[0] && $0 >= ChunkingParameters.minimum })
  }

  /// The cut points decide which stored chunks a new cut finds again: they change only on
  /// purpose (a change makes each chunked file store its chunks once more at its next edit).
  /// These are the cuts of 512 KiB on average (256 KiB to 2 MiB), since 2026-12-06.
  @Test func theCutPointsAreStable() {
    let lengths = chunkLengths(randomBytes(6 << 20, seed: 42))
    #expect(lengths == ChunkerTests.golden, "\(lengths)")
  }

  static let golden = [
    598_907, 635_983, 784_508, 579_080, 511_521, 740_991, 738_673, 573_399, 728_985, 399_409,
  ]

  /// The chunker rolls two bytes a step; the cuts are those of the plain definition (one byte a
  /// step, the hash tested after each), on content where cuts fall at odd and even offsets,
  /// on either side of the average and at the maximum, fed whole and in odd-sized pieces.
  @Test func theCutsAreThoseOfTheOneByteDefinition() {
    for seed in UInt64(50)..<UInt64(54) {
      var bytes = randomBytes(14 << 20, seed: seed)
      // A run of zeros (no cut inside it until the maximum) in half the inputs.
      if seed % 2 == 0 { for index in (4 << 20)..<(9 << 20) { bytes[index] = 0 } }
      let expected = ChunkerTests.referenceLengths(bytes)
      #expect(chunkLengths(bytes) == expected, "seed \(seed)")
      #expect(Set(expected.map { $0 % 2 }).count == 2, "seed \(seed): cuts at both parities")
      var chunker = Chunker()
      var lengths: [Int] = []
      var current = 0
      var offset = 0
      var generator = SeededRandom(seed: seed)
      while offset < bytes.count {
        let end = min(bytes.count, offset + 1 + generator.below(3) * 2 + generator.below(70_000))
        let (count, boundary) = bytes.withUnsafeBytes {
          chunker.consume(UnsafeRawBufferPointer(rebasing: $0[offset..<end]))
        }
        current += count
        offset += count
        if boundary {
          lengths.append(current)
          current = 0
        }
      }
      if current > 0 { lengths.append(current) }
      #expect(lengths == expected, "seed \(seed), in pieces")
    }
  }

  /// The definition, a byte at a time: `hash = 2·hash + gear[byte]` from the chunk's first
  /// byte, a cut after a byte where the hash's tested bits are zero (22 of them below the
  /// average length, 18 above), never before the minimum, always at the maximum.
  static func referenceLengths(_ bytes: [UInt8]) -> [Int] {
    var lengths: [Int] = []
    var hash: UInt64 = 0
    var length = 0
    for byte in bytes {
      hash = (hash &<< 1) &+ ChunkingParameters.gear[Int(byte)]
      length += 1
      let mask =
        length <= ChunkingParameters.average ? ChunkingParameters.smallMask : ChunkingParameters.largeMask
      if (length > ChunkingParameters.minimum && hash & mask == 0) || length == ChunkingParameters.maximum {
        lengths.append(length)
        hash = 0
        length = 0
      }
    }
    if length > 0 { lengths.append(length) }
    return lengths
  }

  func offsets(_ lengths: [Int]) -> [Int] {
    var total = 0
    return lengths.map {
      total += $0
      return total
    }
  }
}
