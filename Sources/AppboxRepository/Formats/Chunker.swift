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
//
// The cut parameters may change between versions (a repository written with others stays
// valid: chunks are named by their SHA-256, and a file's chunk list is whatever its archive
// recorded); what changes is only which chunks a new cut finds already stored. Until
// 2026-12-06 the cuts were 256 KiB to 4 MiB around 1 MiB (masks of 22 and 18 bits), so
// readers accept chunks up to `largestStored`.

package enum ChunkingParameters {
  /// Files at least this large are chunked (smaller ones are stored whole).
  package static let threshold: Int64 = 1 << 20
  static let minimum = 256 << 10
  static let average = 512 << 10
  /// The longest chunk this version cuts.
  package static let maximum = 2 << 20
  /// The longest chunk a repository may hold (what earlier versions cut): the bound readers
  /// and validators use.
  package static let largestStored = 4 << 20
  /// Bits the hash must have zero below the average (harder) and above it (easier): the
  /// average is 2^19, and normalization level 2 moves each mask two bits away from it.
  static let smallMask: UInt64 = topBits(21)
  static let largeMask: UInt64 = topBits(17)

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
        let cut = Chunker.roll(base, gear, &index, end, &hash, smallMask)
        if cut { return reset(index) }
        length += index - start
      }
      if length >= average && length < maximum && index < count {
        let end = min(count, index + (maximum - length))
        let start = index
        let cut = Chunker.roll(base, gear, &index, end, &hash, largeMask)
        if cut { return reset(index) }
        length += index - start
      }
      if length >= maximum { return reset(index) }
      self.hash = hash
      return (index, false)
    }
  }

  /// Ends the chunk after `index` bytes of the piece.
  private mutating func reset(_ index: Int) -> (count: Int, isBoundary: Bool) {
    hash = 0
    length = 0
    return (index, true)
  }

  /// Rolls the hash over `base[index..<end]`, testing it after every byte: true, with `index`
  /// just past the byte, at the first byte after which `hash & mask` is zero.
  ///
  /// Two bytes a step, with the same hash at every byte as one a step: from `h`, the first
  /// byte gives `2h + g0` and the second `4h + (2g0 + g1)`. The second needs only one shift and
  /// one add on `h` (the table sum is off the dependency chain), so the chain that bounds the
  /// loop is half as long per byte (docs/performance.md).
  @inline(__always)
  private static func roll(
    _ base: UnsafePointer<UInt8>, _ gear: UnsafePointer<UInt64>, _ index: inout Int, _ end: Int,
    _ hash: inout UInt64, _ mask: UInt64
  ) -> Bool {
    var i = index
    var h = hash
    defer {
      index = i
      hash = h
    }
    while i + 1 < end {
      let g0 = gear[Int(base[i])]
      let g1 = gear[Int(base[i + 1])]
      let first = (h &<< 1) &+ g0
      h = (h &<< 2) &+ ((g0 &<< 1) &+ g1)
      if first & mask == 0 {
        h = first
        i += 1
        return true
      }
      i += 2
      if h & mask == 0 { return true }
    }
    if i < end {
      h = (h &<< 1) &+ gear[Int(base[i])]
      i += 1
      if h & mask == 0 { return true }
    }
    return false
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
