// The write side of framed zstd archives (FrameIndex.swift has the format): libarchive writes
// the uncompressed pax stream, unbuffered (a block size of 0, so every header and data write
// reaches the callback at once and the writer's uncompressed offset is exact), and this turns
// it into independent zstd frames.
//
// Where frames are cut: at a member's header when the current frame is stored (a stored run
// ends with its member), when it holds `frameSize` bytes or more, or when the member's data
// alone is that long (a large member starts frames of its own, so reading it decodes nothing
// of its neighbours); at a member's data when that data is already compressed and at least
// `storedMinimum` bytes long (its header stays with the frame before, its data is stored);
// inside data when a compressed frame reaches twice `frameSize` (small members therefore never
// straddle two frames) or a stored one `storedFrameSize`; and when asked (`endFrame`, before
// the manifest). A compressed frame that did not shrink by at least 1/32 is written stored
// instead: zstd's own result is the probe for content no name or magic number gave away.
//
// Invariants: every byte received is in exactly one frame, in order; the index lists every
// frame written, with its lengths, and nothing is in the index before it was handed to the
// output; after an output error nothing more is written.

import CZstd

#if canImport(Glibc)
  import Glibc
#endif

/// How a framed archive is cut and compressed.
public struct FrameOptions: Sendable, Equatable {
  /// The zstd level of compressed frames (negative levels are zstd's fast ones).
  public var level: Int
  /// A frame is cut at the next member once it holds this much; inside data at twice this.
  public var frameSize: Int
  /// Stored frames hold at most this much.
  public var storedFrameSize: Int
  /// Data already compressed goes to stored frames only from this length (shorter data rides
  /// in the compressed frame it falls in, where zstd stores its blocks raw anyway).
  public var storedMinimum: Int

  public init(level: Int, frameSize: Int, storedFrameSize: Int, storedMinimum: Int) {
    self.level = level
    self.frameSize = frameSize
    self.storedFrameSize = storedFrameSize
    self.storedMinimum = storedMinimum
  }

  /// What appbox writes (the measurements that chose it: docs/performance.md, "Bytes per
  /// incremental").
  public static let standard = FrameOptions(
    level: 1, frameSize: 512 << 10, storedFrameSize: 4 << 20, storedMinimum: 64 << 10)

  var isValid: Bool {
    level >= -131_072 && level <= 22 && frameSize >= 4096 && frameSize * 2 <= FrameIndex.maximumFrameLength
      && storedFrameSize >= StoredFrame.blockSize && storedFrameSize <= FrameIndex.maximumFrameLength
      && storedMinimum >= 0
  }
}

/// Cuts the uncompressed stream into frames and hands each, compressed or stored, to `deliver`.
final class FrameWriter {
  private enum Kind { case compressed, stored }

  let options: FrameOptions
  /// Writes a frame's bytes; returns an errno when that failed.
  private let deliver: (UnsafeRawBufferPointer) -> Int32?
  private let context: OpaquePointer
  private let pending: UnsafeMutableRawBufferPointer
  private let output: UnsafeMutableRawBufferPointer
  private var length = 0
  private var kind = Kind.compressed
  private(set) var index = FrameIndex()
  /// What went wrong in libzstd, when a frame could not be compressed.
  private(set) var compressionError: String?
  /// Uncompressed bytes that went into compressed and into stored frames.
  private(set) var compressedBytes: Int64 = 0
  private(set) var storedBytes: Int64 = 0

  init?(options: FrameOptions, deliver: @escaping (UnsafeRawBufferPointer) -> Int32?) {
    guard options.isValid, let context = ZSTD_createCCtx() else { return nil }
    self.options = options
    self.deliver = deliver
    self.context = context
    let capacity = max(options.frameSize * 2, options.storedFrameSize)
    pending = .allocate(byteCount: capacity, alignment: 64)
    output = .allocate(
      byteCount: max(
        ZSTD_compressBound(options.frameSize * 2), StoredFrame.storedLength(ofContent: capacity)),
      alignment: 64)
    _ = ZSTD_CCtx_setParameter(context, ZSTD_c_compressionLevel, Int32(options.level))
    // A 4-byte checksum per compressed frame: damage shows as a damaged frame, whoever decodes it.
    _ = ZSTD_CCtx_setParameter(context, ZSTD_c_checksumFlag, 1)
  }

  deinit {
    ZSTD_freeCCtx(context)
    pending.deallocate()
    output.deallocate()
  }

  /// Where the next byte goes in the uncompressed stream.
  var uncompressedOffset: Int64 { index.uncompressedEnd + Int64(length) }

  /// A member's header comes next; its data is `dataSize` bytes.
  func beginMember(dataSize: Int64) -> Int32? {
    var failure: Int32?
    if length > 0 && (kind == .stored || length >= options.frameSize || dataSize >= Int64(options.frameSize))
    {
      failure = endFrame()
    }
    kind = .compressed
    return failure
  }

  /// The current member's data comes next: `size` bytes, already compressed or not.
  func beginData(incompressible: Bool, size: Int64) -> Int32? {
    guard incompressible, size >= Int64(options.storedMinimum), size > 0 else { return nil }
    let failure = length > 0 ? endFrame() : nil
    kind = .stored
    return failure
  }

  /// Takes the next bytes of the uncompressed stream.
  func write(_ bytes: UnsafeRawBufferPointer) -> Int32? {
    var offset = 0
    while offset < bytes.count {
      let limit = kind == .stored ? options.storedFrameSize : options.frameSize * 2
      let count = min(bytes.count - offset, limit - length)
      (pending.baseAddress! + length).copyMemory(from: bytes.baseAddress! + offset, byteCount: count)
      length += count
      offset += count
      if length == limit, let failure = endFrame() { return failure }
    }
    return nil
  }

  /// Ends the current frame, if it holds anything: compresses or stores it and writes it.
  func endFrame() -> Int32? {
    guard length > 0 else { return nil }
    let content = UnsafeRawBufferPointer(rebasing: pending[0..<length])
    var stored = kind == .stored
    var frameLength = 0
    if !stored {
      let result = ZSTD_compress2(
        context, output.baseAddress, output.count, content.baseAddress, content.count)
      if ZSTD_isError(result) != 0 {
        compressionError = String(cString: ZSTD_getErrorName(result))
        return ENOMEM
      }
      if result > length - length / 32 {
        stored = true
      } else {
        frameLength = result
      }
    }
    if stored { frameLength = StoredFrame.write(content, to: output.baseAddress!) }
    if let failure = deliver(UnsafeRawBufferPointer(rebasing: output[0..<frameLength])) { return failure }
    index.append(uncompressedLength: length, storedLength: frameLength, stored: stored)
    if stored { storedBytes += Int64(length) } else { compressedBytes += Int64(length) }
    length = 0
    return nil
  }
}
