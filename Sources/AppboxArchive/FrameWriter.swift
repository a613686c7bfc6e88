// The write side of framed zstd archives (FrameIndex.swift has the format): libarchive writes
// the uncompressed pax stream, unbuffered (a block size of 0, so every header and data write
// reaches the callback at once and the writer's uncompressed offset is exact), and this turns
// it into independent zstd frames.
//
// Where frames are cut: at a member's header when the current frame is stored (a stored run
// ends with its member), when it holds `frameSize` bytes or more, or when the member's data
// alone is that long (a large member starts frames of its own, so reading it decodes nothing
// of its neighbours; one whose name says its data is already compressed need not: its data
// starts stored frames anyway); at a member's data when that data is already compressed and at
// least `storedMinimum` bytes long (its header stays with the frame before, its data is
// stored); inside data when a compressed frame reaches twice `frameSize` (small members
// therefore never straddle two frames) or a stored one `storedFrameSize`; and when asked
// (`endFrame`, before the manifest). A compressed frame that did not shrink by at least 1/32 is
// written stored instead: zstd's own result is the probe for content no name or magic number
// gave away.
//
// Threads: the writing thread (libarchive's callback) only copies bytes into the frame being
// filled; full frames go to compression workers (two on two cores or more), each with its own
// zstd context, and are written in order: a worker that finished frame k writes it once frames
// before k are written, then records it in the index. Memory is a few frames' buffers
// (`workers + 2`, each twice `max(2 × frameSize, storedFrameSize)`).
//
// Invariants: every byte received is in exactly one frame, in order; the index lists every
// frame written, with its lengths, and nothing is in the index before it was handed to the
// output; `endFrame` returns once every frame so far is written (so the index is complete);
// after an output or compression error nothing more is written and every later call reports
// it; a writer released early stops its workers (what was not written never is).

import AppboxPipeline
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
  /// Threads compressing frames (0: two when the machine has two cores or more, else one).
  public var workers: Int

  public init(level: Int, frameSize: Int, storedFrameSize: Int, storedMinimum: Int, workers: Int = 0) {
    self.level = level
    self.frameSize = frameSize
    self.storedFrameSize = storedFrameSize
    self.storedMinimum = storedMinimum
    self.workers = workers
  }

  /// What appbox writes (the measurements that chose it: docs/performance.md, "Bytes per
  /// incremental").
  public static let standard = FrameOptions(
    level: 1, frameSize: 256 << 10, storedFrameSize: 1 << 20, storedMinimum: 64 << 10)

  var isValid: Bool {
    level >= -131_072 && level <= 22 && frameSize >= 4096 && frameSize * 2 <= FrameIndex.maximumFrameLength
      && storedFrameSize >= StoredFrame.blockSize && storedFrameSize <= FrameIndex.maximumFrameLength
      && storedMinimum >= 0 && workers >= 0 && workers <= 64
  }

  var workerCount: Int {
    workers > 0 ? workers : sysconf(Int32(_SC_NPROCESSORS_ONLN)) >= 2 ? 2 : 1
  }
}

/// One frame's buffers: its content as received, and the frame as written.
private final class FrameJob: @unchecked Sendable {
  let content: UnsafeMutableRawBufferPointer
  let output: UnsafeMutableRawBufferPointer
  var length = 0
  var stored = false
  var sequence = 0

  init(capacity: Int) {
    content = .allocate(byteCount: capacity, alignment: 64)
    output = .allocate(
      byteCount: max(ZSTD_compressBound(capacity), StoredFrame.storedLength(ofContent: capacity)),
      alignment: 64)
  }

  deinit {
    content.deallocate()
    output.deallocate()
  }
}

/// What the writing thread and the workers share, behind the monitor.
private struct FramingState {
  /// Frames waiting for a worker, in order.
  var queue: [FrameJob] = []
  var head = 0
  /// Buffers free for the writing thread.
  var free: [FrameJob] = []
  /// The sequence number the next submitted frame gets, and the next to be written.
  var submitted = 0
  var written = 0
  var index = FrameIndex()
  var compressedBytes: Int64 = 0
  var storedBytes: Int64 = 0
  /// The first failure: an errno, and libzstd's reason when compression failed.
  var failure: Int32?
  var compressionError: String?
  /// No more frames will come (finish, or the writer let go).
  var closed = false
}

/// Where written frames go: called by one worker at a time, in frame order (the monitor's
/// hand-over orders the calls), so the output needs no lock of its own.
private final class FrameOutput: @unchecked Sendable {
  let deliver: (UnsafeRawBufferPointer) -> Int32?
  init(_ deliver: @escaping (UnsafeRawBufferPointer) -> Int32?) { self.deliver = deliver }
}

/// Cuts the uncompressed stream into frames and hands each, compressed or stored, to `deliver`.
final class FrameWriter {
  private enum Kind { case compressed, stored }

  let options: FrameOptions
  private let state = Monitor(FramingState())
  private var workers: [WorkerThread<Void>] = []
  /// The frame being filled (the writing thread's alone).
  private var current: FrameJob
  private var kind = Kind.compressed
  private var uncompressedSubmitted: Int64 = 0

  init?(options: FrameOptions, deliver: @escaping (UnsafeRawBufferPointer) -> Int32?) {
    guard options.isValid else { return nil }
    self.options = options
    let capacity = max(options.frameSize * 2, options.storedFrameSize)
    let count = options.workerCount
    current = FrameJob(capacity: capacity)
    let buffers = (0..<(count + 1)).map { _ in FrameJob(capacity: capacity) }
    state.withLock { $0.free = buffers }
    let output = FrameOutput(deliver)
    let monitor = state
    let level = options.level
    workers = (0..<count).map { number in
      WorkerThread(name: "appbox-frames-\(number)") {
        compressFrames(monitor: monitor, output: output, level: level)
      }
    }
  }

  deinit { stop() }

  /// Stops the workers: frames not yet written never are. (After `endFrame` there are none.)
  func stop() {
    state.withLock { state in
      state.closed = true
      if state.failure == nil && state.submitted > state.written { state.failure = ECANCELED }
      self.state.broadcast()
    }
    for worker in workers { try? worker.join() }
    workers = []
  }

  /// Where the next byte goes in the uncompressed stream.
  var uncompressedOffset: Int64 { uncompressedSubmitted + Int64(current.length) }

  /// The frames written so far (complete after `endFrame`).
  var index: FrameIndex { state.withLock { $0.index } }
  var compressedBytes: Int64 { state.withLock { $0.compressedBytes } }
  var storedBytes: Int64 { state.withLock { $0.storedBytes } }
  /// What went wrong in libzstd, when a frame could not be compressed.
  var compressionError: String? { state.withLock { $0.compressionError } }

  /// A member's header comes next; its data is `dataSize` bytes, known to be already
  /// compressed when `incompressible` (its name said so: the data will start stored frames of
  /// its own, so its header need not start a frame).
  func beginMember(dataSize: Int64, incompressible: Bool) -> Int32? {
    var failure: Int32?
    let large =
      dataSize >= Int64(options.frameSize) && !(incompressible && dataSize >= Int64(options.storedMinimum))
    if current.length > 0 && (kind == .stored || current.length >= options.frameSize || large) {
      failure = submit()
    }
    kind = .compressed
    return failure
  }

  /// The current member's data comes next: `size` bytes, already compressed or not.
  func beginData(incompressible: Bool, size: Int64) -> Int32? {
    guard incompressible, size >= Int64(options.storedMinimum), size > 0 else { return nil }
    let failure = current.length > 0 ? submit() : nil
    kind = .stored
    return failure
  }

  /// Takes the next bytes of the uncompressed stream.
  func write(_ bytes: UnsafeRawBufferPointer) -> Int32? {
    var offset = 0
    while offset < bytes.count {
      let limit = kind == .stored ? options.storedFrameSize : options.frameSize * 2
      let count = min(bytes.count - offset, limit - current.length)
      (current.content.baseAddress! + current.length).copyMemory(
        from: bytes.baseAddress! + offset, byteCount: count)
      current.length += count
      offset += count
      if current.length == limit, let failure = submit() { return failure }
    }
    return nil
  }

  /// Ends the current frame, if it holds anything, and waits until every frame so far is
  /// written (the index is then complete).
  func endFrame() -> Int32? {
    if current.length > 0, let failure = submit() { return failure }
    return state.withLock(waitingWhile: { $0.failure == nil && $0.written < $0.submitted }) { $0.failure }
  }

  /// Hands the current frame to the workers and takes a free buffer for the next.
  private func submit() -> Int32? {
    let job = current
    job.stored = kind == .stored
    uncompressedSubmitted += Int64(job.length)
    let next: FrameJob? = state.withLock(
      waitingWhile: { $0.failure == nil && $0.free.isEmpty }
    ) { state in
      guard state.failure == nil else { return nil }
      job.sequence = state.submitted
      state.submitted += 1
      state.queue.append(job)
      self.state.broadcast()
      return state.free.removeLast()
    }
    guard let next else { return state.withLock { $0.failure } }
    next.length = 0
    current = next
    return nil
  }

}

/// A framing worker: takes frames in order, compresses (or stores) each, writes it when its
/// turn comes, and gives its buffer back.
private func compressFrames(monitor: Monitor<FramingState>, output: FrameOutput, level: Int) {
  guard let context = ZSTD_createCCtx() else {
    monitor.withLock { state in
      if state.failure == nil {
        state.failure = ENOMEM
        state.compressionError = "out of memory"
      }
      monitor.broadcast()
    }
    return
  }
  defer { ZSTD_freeCCtx(context) }
  _ = ZSTD_CCtx_setParameter(context, ZSTD_c_compressionLevel, Int32(level))
  // A 4-byte checksum per compressed frame: damage shows as a damaged frame, whoever decodes it.
  _ = ZSTD_CCtx_setParameter(context, ZSTD_c_checksumFlag, 1)
  while true {
    let taken: FrameJob? = monitor.withLock(
      waitingWhile: { $0.head == $0.queue.count && !$0.closed && $0.failure == nil }
    ) { state in
      guard state.failure == nil, state.head < state.queue.count else { return nil }
      let job = state.queue[state.head]
      state.head += 1
      if state.head == state.queue.count {
        state.queue.removeAll(keepingCapacity: true)
        state.head = 0
      }
      return job
    }
    guard let job = taken else { return }
    let content = UnsafeRawBufferPointer(rebasing: job.content[0..<job.length])
    var frameLength = 0
    var failure: (Int32, String?)?
    if !job.stored {
      let result = ZSTD_compress2(
        context, job.output.baseAddress, job.output.count, content.baseAddress, content.count)
      if ZSTD_isError(result) != 0 {
        failure = (ENOMEM, String(cString: ZSTD_getErrorName(result)))
      } else if result > job.length - job.length / 32 {
        job.stored = true
      } else {
        frameLength = result
      }
    }
    if job.stored { frameLength = StoredFrame.write(content, to: job.output.baseAddress!) }
    // Its turn: every frame before it written.
    let go = monitor.withLock(waitingWhile: { $0.failure == nil && $0.written != job.sequence }) { state in
      if let failure, state.failure == nil {
        state.failure = failure.0
        state.compressionError = failure.1
        monitor.broadcast()
      }
      return state.failure == nil
    }
    guard go else { return }
    let written = output.deliver(UnsafeRawBufferPointer(rebasing: job.output[0..<frameLength]))
    monitor.withLock { state in
      if let written {
        if state.failure == nil { state.failure = written }
      } else {
        state.index.append(uncompressedLength: job.length, storedLength: frameLength, stored: job.stored)
        if job.stored {
          state.storedBytes += Int64(job.length)
        } else {
          state.compressedBytes += Int64(job.length)
        }
        state.written += 1
        state.free.append(job)
      }
      monitor.broadcast()
    }
  }
}
