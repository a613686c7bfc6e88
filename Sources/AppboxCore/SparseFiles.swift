// Sparse files: finding a file's holes, and writing data at offsets so holes stay holes.
//
// A hole is a range the file system stores no blocks for; it reads as zeros. An app can make a
// 1 TiB file that takes no space, so every copy appbox makes (backup archives, restores,
// imports, exports, installed bundles) keeps the holes instead of writing the zeros out.
//
// The map comes from `lseek(SEEK_DATA / seekHole)`, which reports at file-system block
// granularity (a data region may carry zeros at its edges; the content is the same either
// way). A hostile file could alternate data and holes every block to make the map huge, so
// the regions are coalesced below a cap by merging across the smallest holes first: the copy
// then stores a few more zeros, never fewer bytes.

import Glibc

// Linux's values; Glibc declares them only under _GNU_SOURCE, which the Swift module lacks.
private let seekData: Int32 = 3
private let seekHole: Int32 = 4

extension FileDescriptor {
  /// The data regions of this regular file of `size` bytes, in order, or nil when it has no
  /// holes (or the file system cannot say). At most `maxRegions` regions: beyond that, regions
  /// separated by the smallest holes are merged. Uses `lseek(2)` with `SEEK_DATA`/`SEEK_HOLE`.
  public func dataRegions(size: Int64, maxRegions: Int = 4096) throws -> [Range<Int64>]? {
    guard size > 0 else { return nil }
    var regions: [Range<Int64>] = []
    var position: Int64 = 0
    while position < size {
      let start = Glibc.lseek(rawValue, off_t(position), seekData)
      if start < 0 {
        if errno == ENXIO { break }  // no data after `position`: the rest is a hole
        if errno == EINVAL || errno == EOPNOTSUPP { return nil }
        throw SystemError("find the data of")
      }
      let end = Glibc.lseek(rawValue, off_t(start), seekHole)
      guard end >= 0 else { throw SystemError("find the holes of") }
      let clipped = Int64(start)..<min(Int64(end), size)
      if !clipped.isEmpty { regions.append(clipped) }
      guard Int64(end) > position else { break }
      position = Int64(end)
    }
    if regions.count == 1 && regions[0] == 0..<size { return nil }
    return Self.coalesced(regions, maxCount: maxRegions)
  }

  /// Merges regions across their gaps, smallest gaps first, until at most `maxCount` remain.
  public static func coalesced(_ regions: [Range<Int64>], maxCount: Int) -> [Range<Int64>] {
    guard regions.count > max(maxCount, 1) else { return regions }
    var threshold: Int64 = 4096
    var merged = regions
    while merged.count > max(maxCount, 1) {
      var next: [Range<Int64>] = []
      next.reserveCapacity(merged.count)
      for region in merged {
        if let last = next.last, region.lowerBound - last.upperBound < threshold {
          next[next.count - 1] = last.lowerBound..<region.upperBound
        } else {
          next.append(region)
        }
      }
      merged = next
      threshold = threshold.multipliedReportingOverflow(by: 2).partialValue
    }
    return merged
  }

  /// Reads up to `buffer.count` bytes at `offset` without moving the file offset; returns 0 at
  /// the end of the file. Uses `pread(2)`.
  public func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws -> Int {
    let n = retryingOnInterrupt { Glibc.pread(rawValue, buffer.baseAddress, buffer.count, off_t(offset)) }
    guard n >= 0 else { throw SystemError("read") }
    return n
  }

  /// Reads at `offset` until `buffer` is full or the file ends; returns the bytes read.
  /// Uses `pread(2)`.
  public func readAll(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws -> Int {
    var done = 0
    while done < buffer.count {
      let n = try read(
        into: UnsafeMutableRawBufferPointer(rebasing: buffer[done...]), at: offset + Int64(done))
      if n == 0 { break }
      done += n
    }
    return done
  }

  /// Writes all of `buffer` at `offset`, looping over short writes; whatever lies between the
  /// end of the file and `offset` stays a hole. Uses `pwrite(2)`.
  public func writeAll(_ buffer: UnsafeRawBufferPointer, at offset: Int64) throws {
    var done = 0
    while done < buffer.count {
      let n = retryingOnInterrupt {
        Glibc.pwrite(rawValue, buffer.baseAddress! + done, buffer.count - done, off_t(offset + Int64(done)))
      }
      guard n >= 0 else { throw SystemError("write") }
      done += n
    }
  }
}

extension FileStatus {
  /// Bytes the file system allocated for the file (`st_blocks` counts 512-byte units).
  public var allocatedBytes: Int64 { blocks &* 512 }

  /// Whether the file may have holes: fewer bytes allocated than its size. Cheap, no syscall.
  public var mayBeSparse: Bool { type == .regular && allocatedBytes < size }
}

/// Whether every byte of `bytes` is zero: `memcmp(3)` against a zeroed buffer, so it runs at
/// memory speed (a file of zeros being written must not cost a loop per byte).
public func isAllZero(_ bytes: UnsafeRawBufferPointer) -> Bool {
  var start = 0
  while start < bytes.count {
    let count = min(bytes.count - start, ZeroBlock.bytes.count)
    if memcmp(bytes.baseAddress! + start, ZeroBlock.bytes.baseAddress!, count) != 0 { return false }
    start += count
  }
  return true
}

/// 1 MiB of zeros, allocated once, never written.
private enum ZeroBlock {
  nonisolated(unsafe) static let bytes: UnsafeRawBufferPointer = {
    UnsafeRawBufferPointer(UnsafeMutableRawBufferPointer(start: calloc(1 << 20, 1), count: 1 << 20))
  }()
}
