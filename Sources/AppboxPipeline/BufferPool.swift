// A fixed set of equal buffers passed between threads, and the handle they travel as.

/// A buffer of a `BufferPool`, as it travels between threads (in hand-off queue messages).
///
/// `@unchecked Sendable`, for a documented reason: a pooled buffer may be held by two threads
/// at once (shared: the stream hasher and the archiver read the same bytes), and region
/// isolation cannot express one value sent to two threads. What keeps the bytes safe is the
/// pool's protocol: whoever fills a buffer writes no more once it hands it over; holders only
/// read it; it is free again (to be taken and filled) once every holder gave it back.
public struct PooledBuffer: @unchecked Sendable, Hashable {
  public let bytes: UnsafeMutableRawBufferPointer

  public static func == (left: PooledBuffer, right: PooledBuffer) -> Bool {
    left.bytes.baseAddress == right.bytes.baseAddress
  }
  public func hash(into hasher: inout Hasher) { hasher.combine(bytes.baseAddress) }

  public var baseAddress: UnsafeMutableRawPointer? { bytes.baseAddress }
  public var count: Int { bytes.count }
  public subscript(range: Range<Int>) -> Slice<UnsafeMutableRawBufferPointer> { bytes[range] }
  public subscript(range: PartialRangeUpTo<Int>) -> Slice<UnsafeMutableRawBufferPointer> { bytes[range] }
  public subscript(range: PartialRangeFrom<Int>) -> Slice<UnsafeMutableRawBufferPointer> { bytes[range] }
}

/// A fixed set of equal buffers passed between threads: reading into a pooled buffer and
/// returning it once written keeps memory flat and spares malloc the churn of thousands of
/// large allocations (which glibc would keep around after the first few are freed). A buffer
/// belongs to whoever took it until it is given back (see `PooledBuffer`); the pool's books
/// are behind its monitor.
public final class BufferPool: Sendable {
  public let bufferSize: Int
  private struct State {
    var free: [PooledBuffer] = []
    var all: [PooledBuffer] = []
    var waiting = false
    /// Buffers handed to more than one consumer: how many more `give`s each waits for.
    var extraHolders: [PooledBuffer: Int] = [:]
  }
  private let monitor: Monitor<State>

  public init(count: Int, bufferSize: Int) {
    self.bufferSize = bufferSize
    var state = State()
    for _ in 0..<count {
      state.all.append(PooledBuffer(bytes: .allocate(byteCount: bufferSize, alignment: 64)))
    }
    state.free = state.all
    monitor = Monitor(state)
  }

  deinit {
    monitor.withLock { state in
      for buffer in state.all { buffer.bytes.deallocate() }
    }
  }

  /// A free buffer; waits for one, calling `beforeWaiting` first (to wake whoever holds them).
  public func take(beforeWaiting: () -> Void = {}) -> PooledBuffer {
    if let buffer = monitor.withLock({ $0.free.popLast() }) { return buffer }
    beforeWaiting()
    return monitor.withLock(waitingWhile: { state in
      state.waiting = state.free.isEmpty
      return state.waiting
    }) { state in
      state.free.removeLast()
    }
  }

  /// Whether at least half the buffers are free: whoever consumes them is keeping up.
  public var isMostlyFree: Bool { monitor.withLock { $0.free.count * 2 >= $0.all.count } }

  /// Gives a buffer back (it is free once every holder has given it back).
  public func give(_ buffer: PooledBuffer) {
    monitor.withLock { state in
      if let extra = state.extraHolders[buffer] {
        state.extraHolders[buffer] = extra > 1 ? extra - 1 : nil
      } else {
        state.free.append(buffer)
        if state.waiting { monitor.broadcast() }
      }
    }
  }

  /// One more holder of `buffer` (which must be taken): it is free only after one more `give`.
  public func share(_ buffer: PooledBuffer) {
    monitor.withLock { $0.extraHolders[buffer, default: 0] += 1 }
  }
}
