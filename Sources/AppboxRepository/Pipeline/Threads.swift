// The few threading tools the engines use (besides AppboxCore's Monitor): a thread one can join,
// and a bounded hand-off queue. Engines run their stages on plain threads (not Swift
// concurrency): each stage is a tight loop of blocking system calls, and each C handle
// (SQLite connection, libarchive object, hash context) must stay on one thread.

import AppboxCore
import AppboxCrypto
import Foundation
import Glibc

/// A thread running one closure; `join()` waits for it and returns what it threw, if anything.
package final class WorkerThread: @unchecked Sendable {
  private let done = DispatchSemaphore(value: 0)
  private var failure: Error?

  package init(name: String, _ body: @escaping @Sendable () throws -> Void) {
    let thread = Thread { [self] in
      do { try body() } catch { failure = error }
      done.signal()
    }
    thread.name = name
    thread.stackSize = 1 << 20
    thread.start()
  }

  private var joined = false

  /// Waits for the thread to finish; rethrows its error. Joining again returns at once.
  package func join() throws {
    if !joined {
      done.wait()
      joined = true
    }
    if let failure { throw failure }
  }
}

/// A first-in first-out queue between one producer and one consumer thread, bounded by a
/// cost (bytes in flight) so a fast producer cannot fill memory. `close()` ends it; after
/// `cancel()` both sides stop (the producer's `push` returns false).
///
/// Wake-ups are batched: a waiting consumer is woken once `batch` elements (or a quarter of
/// the capacity) are queued, and a waiting producer once the cost fell below half the
/// capacity. Waking a thread per element costs a futex round trip each, which for many small
/// files is more than the work itself.
package final class HandoffQueue<Element>: @unchecked Sendable {
  private let mutex = Monitor()
  private var items: [(Element, Int)] = []
  private var head = 0
  private var cost = 0
  private let capacity: Int
  private let batch: Int
  private var closed = false
  private var cancelled = false
  private var producerWaiting = false
  private var consumerWaiting = false

  package init(capacity: Int, batch: Int = 32) {
    self.capacity = capacity
    self.batch = batch
  }

  /// Adds an element of `cost` (waits while the queue is over capacity). Returns false when
  /// the consumer cancelled.
  @discardableResult
  package func push(_ element: Element, cost elementCost: Int = 1) -> Bool {
    mutex.withLock {
      while !cancelled && cost > 0 && cost + elementCost > capacity {
        producerWaiting = true
        if consumerWaiting { mutex.broadcast() }
        mutex.wait()
        producerWaiting = false
      }
      if cancelled { return false }
      items.append((element, elementCost))
      cost += elementCost
      if consumerWaiting && (items.count - head >= batch || cost >= capacity / 4) { mutex.broadcast() }
      return true
    }
  }

  /// Wakes a waiting consumer now, whatever is queued (the producer is about to block on
  /// something the consumer must release first, such as pool buffers).
  package func nudge() {
    mutex.withLock {
      if consumerWaiting { mutex.broadcast() }
    }
  }

  /// How many elements are queued (for tests).
  var pendingCount: Int { mutex.withLock { items.count - head } }

  /// No more elements will come.
  package func close() {
    mutex.withLock {
      closed = true
      mutex.broadcast()
    }
  }

  /// Stops both sides; pending elements are dropped (and handed to `discard`).
  package func cancel(discard: (Element) -> Void = { _ in }) {
    let dropped: [Element] = mutex.withLock {
      cancelled = true
      let rest = items[head...].map(\.0)
      items.removeAll()
      head = 0
      cost = 0
      mutex.broadcast()
      return rest
    }
    dropped.forEach(discard)
  }

  /// The next element, or nil once the queue is closed and empty (or cancelled).
  package func pop() -> Element? {
    mutex.withLock {
      while head == items.count && !closed && !cancelled {
        consumerWaiting = true
        if producerWaiting { mutex.broadcast() }
        mutex.wait()
        consumerWaiting = false
      }
      if cancelled || head == items.count { return nil }
      let (element, elementCost) = items[head]
      head += 1
      if head > 1024 && head * 2 > items.count {
        items.removeFirst(head)
        head = 0
      }
      cost -= elementCost
      if producerWaiting && cost <= capacity / 2 { mutex.broadcast() }
      return element
    }
  }
}

/// A fixed set of equal buffers passed between threads: reading into a pooled buffer and
/// returning it once written keeps memory flat and spares malloc the churn of thousands of
/// large allocations (which glibc would keep around after the first few are freed).
package final class BufferPool: @unchecked Sendable {
  package let bufferSize: Int
  private let mutex = Monitor()
  private var free: [UnsafeMutableRawBufferPointer] = []
  private var all: [UnsafeMutableRawBufferPointer] = []
  private var waiting = false
  /// Buffers handed to more than one consumer: how many more `give`s each waits for.
  private var extraHolders: [UnsafeMutableRawPointer: Int] = [:]

  package init(count: Int, bufferSize: Int) {
    self.bufferSize = bufferSize
    for _ in 0..<count {
      let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: bufferSize, alignment: 64)
      all.append(buffer)
      free.append(buffer)
    }
  }

  deinit {
    for buffer in all { buffer.deallocate() }
  }

  /// A free buffer; waits for one, calling `beforeWaiting` first (to wake whoever holds them).
  package func take(beforeWaiting: () -> Void = {}) -> UnsafeMutableRawBufferPointer {
    if let buffer = mutex.withLock({ free.popLast() }) { return buffer }
    beforeWaiting()
    return mutex.withLock {
      while free.isEmpty {
        waiting = true
        mutex.wait()
        waiting = false
      }
      return free.removeLast()
    }
  }

  /// Whether at least half the buffers are free: whoever consumes them is keeping up.
  package var isMostlyFree: Bool { mutex.withLock { free.count * 2 >= all.count } }

  /// Gives a buffer back (it is free once every holder has given it back).
  package func give(_ buffer: UnsafeMutableRawBufferPointer) {
    mutex.withLock {
      if let base = buffer.baseAddress, let extra = extraHolders[base] {
        extraHolders[base] = extra > 1 ? extra - 1 : nil
        return
      }
      free.append(buffer)
      if waiting { mutex.broadcast() }
    }
  }

  /// One more holder of `buffer` (which must be taken): it is free only after one more `give`.
  func share(_ buffer: UnsafeMutableRawBufferPointer) {
    guard let base = buffer.baseAddress else { return }
    mutex.withLock { extraHolders[base, default: 0] += 1 }
  }
}

/// SHA-256 of a stream of pooled buffers, on a thread of its own: the third hand when a file is
/// hashed twice (whole, and chunk by chunk) and cut. Feed it a file's buffers in order (each
/// shared with whoever else holds it), then `finish()` waits for the digest.
package final class StreamHasher: @unchecked Sendable {
  private enum Job {
    case data(UnsafeMutableRawBufferPointer, Int)
    case finish
  }
  private let queue = HandoffQueue<Job>(capacity: 8 << 20)
  private let pool: BufferPool
  private let results = DispatchSemaphore(value: 0)
  private var digest: Digest?
  private var thread: WorkerThread?

  package init(pool: BufferPool) {
    self.pool = pool
    let queue = self.queue
    thread = WorkerThread(name: "appbox-hash") { [unowned self] in
      let hasher = SHA256Hasher()
      while let job = queue.pop() {
        switch job {
        case .data(let buffer, let count):
          hasher.update(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
          pool.give(buffer)
        case .finish:
          digest = hasher.finalize()
          results.signal()
        }
      }
    }
  }

  /// Hashes `buffer[0..<count]` next; the hasher gives the buffer back to the pool when done.
  package func feed(_ buffer: UnsafeMutableRawBufferPointer, count: Int) {
    pool.share(buffer)
    if !queue.push(.data(buffer, count), cost: count) { pool.give(buffer) }
  }

  /// Wakes the hashing thread whatever is queued (before blocking on pool buffers it holds).
  package func nudge() { queue.nudge() }

  /// The digest of everything fed since the last `finish()`.
  package func finish() -> Digest {
    queue.push(.finish)
    queue.nudge()
    results.wait()
    return digest!
  }

  /// Stops the thread (what is queued is given back).
  package func close() {
    queue.close()
    try? thread?.join()
    thread = nil
  }
}
