// The read side of framed zstd archives (FrameIndex.swift has the format, FrameWriter.swift
// how frames are cut): uncompressed ranges read in place, through the frame index.
//
// `FrameDecoder.read` copies any uncompressed range by decoding only the frames it covers: a
// stored frame is read with one pread per block piece straight into the caller's buffer (its
// header checked against the header its recorded length implies); a compressed frame is read
// whole, checked to be exactly one zstd frame of the recorded content size, and decoded into
// the decoder's own buffer, which is kept: the next read in the same frame decodes nothing.
// One decoder per thread; the `FramedArchive` it reads (the index and a positional read) can
// be shared. `FramedArchiveInput` feeds libarchive the uncompressed stream from any offset:
// frame by frame through the index (each frame fully checked, a stored frame's block headers
// too), then the frames after the index (the manifest member and the end of the archive) by
// streaming decompression.
//
// Invariants: the index and the stored bytes are untrusted. Every frame read must be whole and
// decode to exactly its recorded length; anything else is `.badData` naming the frame, never a
// crash: lengths are bounded by the index's own checks (FrameIndex.decode), buffers grow only
// to a recorded length, and a read outside the indexed range is refused. Errors of the
// positional read (the file, a sealed object) pass through unchanged.

import CZstd

#if canImport(Glibc)
  import Glibc
#endif

/// A framed archive to read: its frame index and positional reads of its stored bytes.
/// Shareable between threads when `read` is (pread on a descriptor is).
public final class FramedArchive: @unchecked Sendable {
  /// Fills the buffer from the stored offset given; returns how many bytes, fewer only at the
  /// end of the file.
  public typealias PositionalRead = (UnsafeMutableRawBufferPointer, Int64) throws -> Int

  public let index: FrameIndex
  /// The archive's path or name, for messages.
  public let name: String
  /// The stored file's size, when known (the frames after the index end there).
  public let storedSize: Int64?
  let read: PositionalRead

  public init(index: FrameIndex, name: String, storedSize: Int64?, read: @escaping PositionalRead) {
    self.index = index
    self.name = name
    self.storedSize = storedSize
    self.read = read
  }

  func damaged(_ frame: Int?, _ what: String) -> ArchiveError {
    let subject =
      frame.map { "frame \($0) (uncompressed offset \(index.frames[$0].uncompressedOffset)): " }
      ?? ""
    return ArchiveError(kind: .badData, operation: .readData, archive: name, message: subject + what)
  }

  /// Reads exactly `buffer.count` stored bytes at `offset`, or throws naming `frame`.
  func readStored(_ buffer: UnsafeMutableRawBufferPointer, at offset: Int64, frame: Int?) throws {
    var done = 0
    while done < buffer.count {
      let count = try read(UnsafeMutableRawBufferPointer(rebasing: buffer[done...]), offset + Int64(done))
      guard count > 0 else { throw damaged(frame, "the archive ends inside it") }
      done += count
    }
  }
}

/// Reads uncompressed ranges of framed archives, decoding the frames they cover. One per thread.
public final class FrameDecoder {
  private let context: OpaquePointer
  private var input = UnsafeMutableRawBufferPointer.allocate(byteCount: 0, alignment: 64)
  private var output = UnsafeMutableRawBufferPointer.allocate(byteCount: 0, alignment: 64)
  /// The frame whose content `output` holds.
  private var decoded: (archive: ObjectIdentifier, frame: Int)?
  /// The stored frame whose header was checked last.
  private var checkedHeader: (archive: ObjectIdentifier, frame: Int)?
  /// Frames decoded (for tests: a read within the last frame decodes nothing).
  public private(set) var framesDecoded = 0

  public init() {
    guard let context = ZSTD_createDCtx() else { fatalError("out of memory: ZSTD_createDCtx") }
    self.context = context
  }

  deinit {
    ZSTD_freeDCtx(context)
    input.deallocate()
    output.deallocate()
  }

  /// Copies the uncompressed bytes `offset ..< offset + buffer.count` of `archive` into `buffer`.
  /// A range outside the indexed frames, or a damaged frame, throws `.badData`.
  public func read(_ archive: FramedArchive, into buffer: UnsafeMutableRawBufferPointer, at offset: Int64)
    throws
  {
    var position = offset
    var done = 0
    while done < buffer.count {
      guard let number = archive.index.frame(containing: position) else {
        throw archive.damaged(
          nil,
          "uncompressed offset \(position) lies outside its frames (they end at \(archive.index.uncompressedEnd))"
        )
      }
      let frame = archive.index.frames[number]
      let within = Int(position - frame.uncompressedOffset)
      let count = min(buffer.count - done, frame.uncompressedLength - within)
      let target = UnsafeMutableRawBufferPointer(rebasing: buffer[done..<(done + count)])
      if frame.isStored {
        try readStored(archive, number, from: within, into: target)
      } else {
        let content = try decodeCompressed(archive, number)
        target.baseAddress!.copyMemory(from: content.baseAddress! + within, byteCount: count)
      }
      done += count
      position += Int64(count)
    }
  }

  /// Frame `number` of `archive`, decoded whole and fully checked (a stored frame's block
  /// headers too). The bytes stay valid until the next call.
  public func decode(_ archive: FramedArchive, frame number: Int) throws -> UnsafeRawBufferPointer {
    let frame = archive.index.frames[number]
    guard frame.isStored else { return try decodeCompressed(archive, number) }
    let stored = try load(archive, number)
    reserve(&output, frame.uncompressedLength)
    decoded = nil
    if let problem = StoredFrame.unpack(
      UnsafeRawBufferPointer(stored), contentSize: frame.uncompressedLength, to: output.baseAddress!)
    {
      throw archive.damaged(number, problem)
    }
    decoded = (ObjectIdentifier(archive), number)
    framesDecoded += 1
    return UnsafeRawBufferPointer(rebasing: output[0..<frame.uncompressedLength])
  }

  /// Content bytes `within ..< within + target.count` of stored frame `number`, read in place.
  private func readStored(
    _ archive: FramedArchive, _ number: Int, from within: Int, into target: UnsafeMutableRawBufferPointer
  ) throws {
    let frame = archive.index.frames[number]
    let key = (ObjectIdentifier(archive), number)
    if checkedHeader.map({ $0 != key }) ?? true {
      let length = StoredFrame.headerLength(ofContent: frame.uncompressedLength)
      var expected = [UInt8](repeating: 0, count: 16)
      var found = [UInt8](repeating: 0, count: 16)
      _ = expected.withUnsafeMutableBytes {
        StoredFrame.writeHeader(contentSize: frame.uncompressedLength, to: $0.baseAddress!)
      }
      try found.withUnsafeMutableBytes {
        try archive.readStored(
          UnsafeMutableRawBufferPointer(rebasing: $0[0..<length]), at: frame.storedOffset, frame: number)
      }
      guard found.prefix(length).elementsEqual(expected.prefix(length)) else {
        throw archive.damaged(
          number, "its header is not that of a stored frame of \(frame.uncompressedLength) bytes")
      }
      checkedHeader = key
    }
    var done = 0
    while done < target.count {
      let position = within + done
      let count = min(target.count - done, StoredFrame.blockSize - position % StoredFrame.blockSize)
      let stored =
        frame.storedOffset
        + Int64(StoredFrame.storedPosition(of: position, contentSize: frame.uncompressedLength))
      try archive.readStored(
        UnsafeMutableRawBufferPointer(rebasing: target[done..<(done + count)]), at: stored, frame: number)
      done += count
    }
  }

  /// Compressed frame `number`, decoded (or the copy decoded last, when it is that frame).
  private func decodeCompressed(_ archive: FramedArchive, _ number: Int) throws -> UnsafeRawBufferPointer {
    let frame = archive.index.frames[number]
    let key = (ObjectIdentifier(archive), number)
    if let decoded, decoded == key {
      return UnsafeRawBufferPointer(rebasing: output[0..<frame.uncompressedLength])
    }
    decoded = nil
    let stored = try load(archive, number)
    let size = ZSTD_getFrameContentSize(stored.baseAddress, stored.count)
    guard size == UInt64(frame.uncompressedLength) else {
      throw archive.damaged(
        number,
        size >= UInt64.max - 1
          ? "it is not a zstd frame with its content size"
          : "it holds \(size) bytes, not \(frame.uncompressedLength)")
    }
    guard ZSTD_findFrameCompressedSize(stored.baseAddress, stored.count) == stored.count else {
      throw archive.damaged(number, "it is not exactly one zstd frame of \(stored.count) bytes")
    }
    reserve(&output, frame.uncompressedLength)
    let result = ZSTD_decompressDCtx(
      context, output.baseAddress, frame.uncompressedLength, stored.baseAddress, stored.count)
    if ZSTD_isError(result) != 0 {
      throw archive.damaged(number, "zstd: \(String(cString: ZSTD_getErrorName(result)))")
    }
    guard result == frame.uncompressedLength else {
      throw archive.damaged(number, "it decodes to \(result) bytes, not \(frame.uncompressedLength)")
    }
    decoded = key
    framesDecoded += 1
    return UnsafeRawBufferPointer(rebasing: output[0..<frame.uncompressedLength])
  }

  /// The stored bytes of frame `number`, read whole into `input`.
  private func load(_ archive: FramedArchive, _ number: Int) throws -> UnsafeMutableRawBufferPointer {
    let frame = archive.index.frames[number]
    reserve(&input, frame.storedLength)
    let stored = UnsafeMutableRawBufferPointer(rebasing: input[0..<frame.storedLength])
    try archive.readStored(stored, at: frame.storedOffset, frame: number)
    return stored
  }

  private func reserve(_ buffer: inout UnsafeMutableRawBufferPointer, _ count: Int) {
    guard buffer.count < count else { return }
    buffer.deallocate()
    buffer = .allocate(byteCount: count, alignment: 64)
  }
}

/// The uncompressed stream of a framed archive from any offset, for libarchive
/// (`ArchiveReader(input:startingAt:)`): the indexed frames one by one, then the frames after
/// them by streaming decompression. With `verifying`, nothing is skipped unread: every frame
/// is decoded and checked (what `check` wants); otherwise skips over indexed frames read none
/// of their bytes.
public final class FramedArchiveInput: ArchiveInput {
  private let archive: FramedArchive
  private let verifying: Bool
  private let decoder = FrameDecoder()
  /// The next indexed frame to decode; `index.count` once in the frames after the index.
  private var next: Int
  /// What is left of the frame decoded last.
  private var view = UnsafeRawBufferPointer(start: nil, count: 0)
  /// Bytes to drop before anything is delivered (the start offset's distance into its frame,
  /// or what a skip left inside a frame).
  private var dropping: Int64
  private var tail: StreamingTail?

  /// Starts at uncompressed `offset` (0: the start of the archive).
  public init(_ archive: FramedArchive, from offset: Int64, verifying: Bool = false) throws {
    self.archive = archive
    self.verifying = verifying
    if let number = archive.index.frame(containing: offset) {
      next = number
      dropping = offset - archive.index.frames[number].uncompressedOffset
    } else {
      guard offset >= archive.index.uncompressedEnd else {
        throw archive.damaged(nil, "offset \(offset) lies before its first frame")
      }
      next = archive.index.count
      dropping = offset - archive.index.uncompressedEnd
    }
  }

  public func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
    guard buffer.count > 0 else { return 0 }
    while true {
      if view.count > 0 {
        let count = min(view.count, buffer.count)
        buffer.baseAddress!.copyMemory(from: view.baseAddress!, byteCount: count)
        view = UnsafeRawBufferPointer(rebasing: view[count...])
        return count
      }
      if next < archive.index.count {
        let content = try decoder.decode(archive, frame: next)
        next += 1
        let dropped = Int(min(dropping, Int64(content.count)))
        dropping -= Int64(dropped)
        view = UnsafeRawBufferPointer(rebasing: content[dropped...])
        continue
      }
      if tail == nil { tail = try StreamingTail(archive) }
      while dropping > 0 {
        let count = try tail!.read(
          into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<Int(min(dropping, Int64(buffer.count)))]))
        guard count > 0 else { return 0 }
        dropping -= Int64(count)
      }
      return try tail!.read(into: buffer)
    }
  }

  public func skip(_ count: Int64) throws -> Bool {
    guard !verifying, count > 0, next <= archive.index.count, tail == nil else { return false }
    var left = count
    let inView = min(Int64(view.count), left)
    view = UnsafeRawBufferPointer(rebasing: view[Int(inView)...])
    left -= inView
    while left > 0, next < archive.index.count {
      let length = Int64(archive.index.frames[next].uncompressedLength) - dropping
      guard left >= length else { break }
      left -= length
      dropping = 0
      next += 1
    }
    dropping += left
    return true
  }
}

/// The frames after the index (or of an archive read without one), decoded as one stream from
/// where the index ends to the end of the file.
private final class StreamingTail {
  private let archive: FramedArchive
  private let context: OpaquePointer
  private let input = UnsafeMutableRawBufferPointer.allocate(byteCount: 128 << 10, alignment: 64)
  private var inputStart = 0
  private var inputEnd = 0
  private var position: Int64
  private var atEnd = false
  /// libzstd's last answer: 0 when a frame was just completed.
  private var lastResult = 0

  init(_ archive: FramedArchive) throws {
    self.archive = archive
    position = archive.index.storedEnd
    guard let context = ZSTD_createDCtx() else { fatalError("out of memory: ZSTD_createDCtx") }
    self.context = context
    // Bounds the memory a hostile frame can ask for (appbox's frames need far less).
    _ = ZSTD_DCtx_setParameter(context, ZSTD_d_windowLogMax, 24)
  }

  deinit {
    ZSTD_freeDCtx(context)
    input.deallocate()
  }

  func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
    var out = ZSTD_outBuffer(dst: buffer.baseAddress, size: buffer.count, pos: 0)
    while out.pos == 0 {
      if inputStart == inputEnd {
        if atEnd {
          guard lastResult == 0 else { throw archive.damaged(nil, "it ends inside its last zstd frame") }
          return 0
        }
        var wanted = input.count
        if let size = archive.storedSize { wanted = Int(min(Int64(wanted), max(0, size - position))) }
        let count =
          wanted > 0
          ? try archive.read(UnsafeMutableRawBufferPointer(rebasing: input[0..<wanted]), position) : 0
        if count == 0 {
          atEnd = true
          continue
        }
        position += Int64(count)
        inputStart = 0
        inputEnd = count
      }
      var source = ZSTD_inBuffer(src: input.baseAddress! + inputStart, size: inputEnd - inputStart, pos: 0)
      let result = ZSTD_decompressStream(context, &out, &source)
      if ZSTD_isError(result) != 0 {
        throw archive.damaged(
          nil, "a zstd frame after its indexed frames: \(String(cString: ZSTD_getErrorName(result)))")
      }
      inputStart += source.pos
      lastResult = result
    }
    return out.pos
  }
}
