// Framed zstd archives: the layout of the frames and the index that finds them.
//
// A framed archive is an ordinary pax tar compressed as a sequence of independent zstd frames
// (RFC 8878), one after another: `zstd -d`, GNU tar's `--zstd` and bsdtar read it as any
// `.tar.zst`. Each frame is either compressed (by libzstd) or stored: a frame this module writes
// itself out of Raw_Blocks, for content that is already compressed, which costs a copy:
//
//   magic 28 B5 2F FD · descriptor (Single_Segment, Frame_Content_Size in 1, 2, 4 or 8 bytes,
//   no checksum, no dictionary) · content size · (block header[3] · ≤ 128 KiB of content)*
//
// A block header is little-endian: bit 0 Last_Block, bits 1-2 Block_Type (0: Raw_Block), bits
// 3-23 Block_Size. Every block but the last holds exactly 128 KiB, so the stored position of
// any content byte follows from its position: a read of a stored frame is a pread that steps
// over the block headers.
//
// The index lists every frame with its uncompressed and stored length and whether it is
// stored; offsets are the sums of the lengths before it, so the frames tile both streams from
// offset 0 by construction. Encoding (LEB128 varints):
//   count (uncompressedLength (storedLength << 1 | stored))*
// The index is untrusted input (it comes from a manifest or the catalog): `decode` bounds every
// length (a frame holds at most `maximumFrameLength` bytes; a stored frame's stored length is
// exactly what its content length implies; a compressed one's at most libzstd's bound for it)
// and every sum.

import CZstd

/// One frame of a framed archive.
public struct ArchiveFrame: Sendable, Equatable {
  /// Where its content starts in the uncompressed tar stream.
  public var uncompressedOffset: Int64
  public var uncompressedLength: Int
  /// Where the frame starts in the stored (compressed) file.
  public var storedOffset: Int64
  public var storedLength: Int
  /// A frame of Raw_Blocks (content stored as it is) rather than a compressed one.
  public var isStored: Bool

  public var uncompressedEnd: Int64 { uncompressedOffset + Int64(uncompressedLength) }
  public var storedEnd: Int64 { storedOffset + Int64(storedLength) }
}

/// Why a frame index could not be decoded.
public struct FrameIndexError: Error, Sendable, CustomStringConvertible {
  public var description: String
  init(_ description: String) { self.description = description }
}

/// The frames of a framed archive, in order, from the start of the archive.
public struct FrameIndex: Sendable, Equatable {
  /// The most content one frame may hold (what the writer makes is far less: FrameOptions).
  public static let maximumFrameLength = 32 << 20

  public private(set) var frames: [ArchiveFrame] = []

  public init() {}

  /// Where the last frame's content ends (the uncompressed bytes the index covers).
  public var uncompressedEnd: Int64 { frames.last?.uncompressedEnd ?? 0 }
  /// Where the last frame ends in the stored file.
  public var storedEnd: Int64 { frames.last?.storedEnd ?? 0 }
  public var count: Int { frames.count }
  public var isEmpty: Bool { frames.isEmpty }

  /// Adds a frame after the last.
  mutating func append(uncompressedLength: Int, storedLength: Int, stored: Bool) {
    frames.append(
      ArchiveFrame(
        uncompressedOffset: uncompressedEnd, uncompressedLength: uncompressedLength, storedOffset: storedEnd,
        storedLength: storedLength, isStored: stored))
  }

  /// The number of the frame holding uncompressed byte `offset`, or nil past the last.
  public func frame(containing offset: Int64) -> Int? {
    guard offset >= 0, offset < uncompressedEnd else { return nil }
    var low = 0
    var high = frames.count
    while high - low > 1 {
      let middle = (low + high) / 2
      if frames[middle].uncompressedOffset <= offset { low = middle } else { high = middle }
    }
    return low
  }

  /// The encoding (see the header).
  public func encoded() -> [UInt8] {
    var out: [UInt8] = []
    out.reserveCapacity(2 + frames.count * 6)
    appendVarint(UInt64(frames.count), to: &out)
    for frame in frames {
      appendVarint(UInt64(frame.uncompressedLength), to: &out)
      appendVarint(UInt64(frame.storedLength) << 1 | (frame.isStored ? 1 : 0), to: &out)
    }
    return out
  }

  /// Decodes an index and checks every frame's lengths (see the header); the bytes must be
  /// exactly one encoding.
  public static func decode(_ bytes: UnsafeRawBufferPointer) throws(FrameIndexError) -> FrameIndex {
    var position = 0
    func varint() throws(FrameIndexError) -> UInt64 {
      var value: UInt64 = 0
      var shift: UInt64 = 0
      while true {
        guard position < bytes.count else { throw FrameIndexError("it ends inside a number") }
        let byte = bytes[position]
        position += 1
        guard shift < 64, shift < 63 || byte <= 1 else { throw FrameIndexError("a number is too large") }
        value |= UInt64(byte & 0x7F) << shift
        if byte & 0x80 == 0 { return value }
        shift += 7
      }
    }
    let count = try varint()
    // Each frame takes at least two bytes.
    guard count <= UInt64(bytes.count / 2) else {
      throw FrameIndexError("it counts more frames than it holds")
    }
    var index = FrameIndex()
    index.frames.reserveCapacity(Int(count))
    for number in 0..<Int(count) {
      let length = try varint()
      let stored = try varint()
      guard length >= 1, length <= UInt64(maximumFrameLength) else {
        throw FrameIndexError("frame \(number) holds \(length) bytes, outside 1...\(maximumFrameLength)")
      }
      let storedLength = stored >> 1
      let isStored = stored & 1 == 1
      let content = Int(length)
      if isStored {
        guard storedLength == UInt64(StoredFrame.storedLength(ofContent: content)) else {
          throw FrameIndexError("stored frame \(number) has the wrong stored length for its content")
        }
      } else {
        guard storedLength >= UInt64(StoredFrame.minimumHeaderLength + 3),
          storedLength <= UInt64(ZSTD_compressBound(content) + 64)
        else { throw FrameIndexError("compressed frame \(number) has an impossible stored length") }
      }
      index.append(uncompressedLength: content, storedLength: Int(storedLength), stored: isStored)
    }
    guard position == bytes.count else { throw FrameIndexError("bytes follow its last frame") }
    return index
  }

  public static func decode(_ bytes: [UInt8]) throws(FrameIndexError) -> FrameIndex {
    do {
      return try bytes.withUnsafeBytes { raw in try decode(raw) }
    } catch let error as FrameIndexError {
      throw error
    } catch {
      fatalError("unreachable: decode throws only FrameIndexError")
    }
  }
}

private func appendVarint(_ value: UInt64, to out: inout [UInt8]) {
  var value = value
  while value >= 0x80 {
    out.append(UInt8(truncatingIfNeeded: value) | 0x80)
    value >>= 7
  }
  out.append(UInt8(value))
}

/// The layout of a stored frame: a zstd frame of Raw_Blocks (RFC 8878, sections 3.1.1 and
/// 3.1.1.2), single-segment, with its content size.
enum StoredFrame {
  static let magic: [UInt8] = [0x28, 0xB5, 0x2F, 0xFD]
  /// Block_Maximum_Size: every block but the last is this long.
  static let blockSize = 128 << 10
  static let blockHeaderLength = 3
  /// Magic, descriptor and a 1-byte content size.
  static let minimumHeaderLength = 6

  /// The bytes of Frame_Content_Size and the descriptor's flag for them (a single-segment
  /// frame: 1 byte below 256, 2 bytes holding size - 256 up to 65,791, then 4, then 8).
  static func contentSizeField(_ size: Int) -> (flag: UInt8, bytes: Int) {
    if size < 256 { return (0, 1) }
    if size <= 65_791 { return (1, 2) }
    if UInt64(size) <= UInt64(UInt32.max) { return (2, 4) }
    return (3, 8)
  }

  static func headerLength(ofContent size: Int) -> Int { 5 + contentSizeField(size).bytes }

  static func blockCount(ofContent size: Int) -> Int { max(1, (size + blockSize - 1) / blockSize) }

  /// The whole frame's length for `size` bytes of content.
  static func storedLength(ofContent size: Int) -> Int {
    headerLength(ofContent: size) + blockCount(ofContent: size) * blockHeaderLength + size
  }

  /// Where content byte `position` lies, from the frame's first byte.
  static func storedPosition(of position: Int, contentSize size: Int) -> Int {
    headerLength(ofContent: size) + (position / blockSize + 1) * blockHeaderLength + position
  }

  /// Writes the frame header for `size` bytes of content at `out`; returns its length.
  static func writeHeader(contentSize size: Int, to out: UnsafeMutableRawPointer) -> Int {
    let (flag, bytes) = contentSizeField(size)
    for (offset, byte) in magic.enumerated() {
      out.storeBytes(of: byte, toByteOffset: offset, as: UInt8.self)
    }
    // Frame_Content_Size_flag in bits 7-6, Single_Segment_flag (bit 5) set.
    out.storeBytes(of: flag << 6 | 0x20, toByteOffset: 4, as: UInt8.self)
    var value = UInt64(size) - (bytes == 2 ? 256 : 0)
    for offset in 0..<bytes {
      out.storeBytes(of: UInt8(truncatingIfNeeded: value), toByteOffset: 5 + offset, as: UInt8.self)
      value >>= 8
    }
    return 5 + bytes
  }

  /// The header of a raw block of `size` bytes.
  static func blockHeader(size: Int, last: Bool) -> (UInt8, UInt8, UInt8) {
    let value = UInt32(size) << 3 | (last ? 1 : 0)
    return (
      UInt8(truncatingIfNeeded: value), UInt8(truncatingIfNeeded: value >> 8),
      UInt8(truncatingIfNeeded: value >> 16)
    )
  }

  /// Writes a whole stored frame of `content` at `out` (which has room for
  /// `storedLength(ofContent:)` bytes); returns its length.
  static func write(_ content: UnsafeRawBufferPointer, to out: UnsafeMutableRawPointer) -> Int {
    var position = writeHeader(contentSize: content.count, to: out)
    let blocks = blockCount(ofContent: content.count)
    for block in 0..<blocks {
      let start = block * blockSize
      let length = min(blockSize, content.count - start)
      let header = blockHeader(size: length, last: block == blocks - 1)
      out.storeBytes(of: header.0, toByteOffset: position, as: UInt8.self)
      out.storeBytes(of: header.1, toByteOffset: position + 1, as: UInt8.self)
      out.storeBytes(of: header.2, toByteOffset: position + 2, as: UInt8.self)
      position += blockHeaderLength
      if length > 0 { (out + position).copyMemory(from: content.baseAddress! + start, byteCount: length) }
      position += length
    }
    return position
  }

  /// Checks that `frame` (a whole stored frame as read) is the stored frame of `size` bytes of
  /// content this module writes, and copies its content to `out`. Returns why not, or nil.
  static func unpack(_ frame: UnsafeRawBufferPointer, contentSize size: Int, to out: UnsafeMutableRawPointer)
    -> String?
  {
    guard frame.count == storedLength(ofContent: size) else { return "its stored length is wrong" }
    var header = [UInt8](repeating: 0, count: 16)
    let headerLength = header.withUnsafeMutableBytes { writeHeader(contentSize: size, to: $0.baseAddress!) }
    guard frame.prefix(headerLength).elementsEqual(header.prefix(headerLength)) else {
      return "its header is not that of a stored frame of \(size) bytes"
    }
    var position = headerLength
    let blocks = blockCount(ofContent: size)
    for block in 0..<blocks {
      let length = min(blockSize, size - block * blockSize)
      let expected = blockHeader(size: length, last: block == blocks - 1)
      guard frame[position] == expected.0, frame[position + 1] == expected.1,
        frame[position + 2] == expected.2
      else { return "the header of its block \(block) is damaged" }
      position += blockHeaderLength
      if length > 0 {
        (out + block * blockSize).copyMemory(from: frame.baseAddress! + position, byteCount: length)
      }
      position += length
    }
    return nil
  }
}
