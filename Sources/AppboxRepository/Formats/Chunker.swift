// Content-defined chunking of large files: where to cut a file so that an edit in place moves
// only the cuts near it, and the chunks around it are stored once, as restic and borg do.
//
// Algorithm: a gear hash (FastCDC, Xia et al. 2016/2020) rolls over the bytes:
// `hash = hash << 1 + gear[byte]`, so bit 63 depends on the last 64 bytes and nothing older.
// A chunk ends after a byte where the hash's top bits are all zero. Normalized chunking keeps
// sizes near the average: below the average the test looks at more bits (harder to match),
// above it at fewer (easier). No chunk is shorter than the minimum (the bytes before it are not
// even hashed, except the 64 that fill the window) or longer than the maximum. restic cuts with
// a Rabin fingerprint (512 KiB to 8 MiB, 1 MiB average) and borg with a buzhash (512 KiB to
// 8 MiB, 2 MiB average); the gear hash needs one shift, one add and one table load per byte.
//
// Invariants: the cut points are a pure function of the bytes (the gear table is derived from a
// fixed seed and must never change, or chunks stop matching those already stored); feeding the
// bytes in any split gives the same cuts; every chunk but the last is at least `minimum` long.

package enum ChunkingParameters {
  /// Files at least this large are chunked (smaller ones are stored whole).
  package static let threshold: Int64 = 1 << 20
  static let minimum = 256 << 10
  static let average = 1 << 20
  package static let maximum = 4 << 20
  /// Bits the hash must have zero below the average (harder) and above it (easier): the
  /// average is 2^20, and normalization level 2 moves each mask two bits away from it.
  static let smallMask: UInt64 = topBits(22)
  static let largeMask: UInt64 = topBits(18)

  static func topBits(_ count: Int) -> UInt64 { ~UInt64(0) << UInt64(64 - count) }

  /// 256 pseudo-random values, SplitMix64 from a fixed seed: part of the storage format.
  static let gear: [UInt64] = {
    var state: UInt64 = 0x6170_7062_6F78_4344  // "appboxCD"
    return (0..<256).map { _ in
      state &+= 0x9E37_79B9_7F4A_7C15
      var z = state
      z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
      z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
      return z ^ (z >> 31)
    }
  }()
}

/// Finds chunk boundaries in a stream fed piece by piece.
package struct Chunker {
  /// Bytes of the current chunk seen so far.
  private(set) var length = 0
  private var hash: UInt64 = 0

  package init() {}

  /// How many bytes of `data` belong to the current chunk: `(count, true)` when the chunk ends
  /// after `count` bytes (the rest starts the next chunk; call again with it), `(data.count,
  /// false)` when the whole piece belongs to the chunk, which goes on.
  package mutating func consume(_ data: UnsafeRawBufferPointer) -> (count: Int, isBoundary: Bool) {
    let minimum = ChunkingParameters.minimum
    let average = ChunkingParameters.average
    let maximum = ChunkingParameters.maximum
    let count = data.count
    var index = 0
    // Up to the window's start nothing is hashed: no cut can come before the minimum.
    let windowStart = minimum - 64
    if length < windowStart {
      let skip = min(windowStart - length, count)
      index = skip
      length += skip
      if index == count { return (index, false) }
    }
    guard let base = data.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return (0, false) }
    let smallMask = ChunkingParameters.smallMask
    let largeMask = ChunkingParameters.largeMask
    return ChunkingParameters.gear.withUnsafeBufferPointer { table in
      let gear = table.baseAddress!
      var hash = self.hash
      // Each phase runs to a precomputed end, so the loop tests one bound per byte.
      // Filling the window before the minimum: hashed, never tested.
      if length < minimum {
        let end = min(count, index + (minimum - length))
        let start = index
        while index < end {
          hash = (hash << 1) &+ gear[Int(base[index])]
          index += 1
        }
        length += index - start
      }
      if length >= minimum && length < average && index < count {
        let end = min(count, index + (average - length))
        let start = index
        while index < end {
          let g = gear[Int(base[index])]
          hash = g &+ hash &* 2
          index += 1
          if hash & smallMask == 0 {
            self.hash = 0
            self.length = 0
            return (index, true)
          }
        }
        length += index - start
      }
      if length >= average && length < maximum && index < count {
        let end = min(count, index + (maximum - length))
        let start = index
        while index < end {
          let g = gear[Int(base[index])]
          hash = g &+ hash &* 2
          index += 1
          if hash & largeMask == 0 {
            self.hash = 0
            self.length = 0
            return (index, true)
          }
        }
        length += index - start
      }
      if length >= maximum {
        self.hash = 0
        self.length = 0
        return (index, true)
      }
      self.hash = hash
      return (index, false)
    }
  }

  /// The cut points of `data` taken whole: the length of each chunk, in order.
  static func chunkLengths(of data: UnsafeRawBufferPointer) -> [Int] {
    var chunker = Chunker()
    var lengths: [Int] = []
    var start = 0
    var current = 0
    while start < data.count {
      let (count, boundary) = chunker.consume(UnsafeRawBufferPointer(rebasing: data[start...]))
      current += count
      start += count
      if boundary {
        lengths.append(current)
        current = 0
      }
    }
    if current > 0 { lengths.append(current) }
    return lengths
  }
}
