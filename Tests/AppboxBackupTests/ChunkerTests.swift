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

  /// The cut points are part of the storage format: chunks already stored match only if the
  /// gear table and the masks never change.
  @Test func theCutPointsAreStable() {
    let lengths = chunkLengths(randomBytes(6 << 20, seed: 42))
    #expect(lengths == ChunkerTests.golden, "\(lengths)")
  }

  static let golden = [1_392_194, 1_717_805, 1_098_122, 1_209_128, 874_207]

  func offsets(_ lengths: [Int]) -> [Int] {
    var total = 0
    return lengths.map {
      total += $0
      return total
    }
  }
}
