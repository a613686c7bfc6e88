// An upload whose work (sealing, writing) runs on a thread of its own: the writer (the
// archiver) fills 1 MiB buffers from a pool of four and hands each over, going on with the
// next. Sealed archives use it, so AES-GCM runs beside the archiver instead of in its path.
// Pooled buffers, not fresh arrays: a new 1 MiB allocation per block would be an mmap, page
// faults and an munmap each. A failure of the inner upload stops the hand-over and is what the
// next write or the commit throws.

import AppboxCore
import AppboxPipeline

package final class PipelinedUpload: ObjectUpload {
  private let inner: ObjectUpload
  private let pool = BufferPool(count: 4, bufferSize: 1 << 20)
  private let queue = HandoffQueue<(PooledBuffer, Int)>(capacity: 4, batch: 1)
  private let worker: WorkerThread<Void>
  private var current: PooledBuffer?
  private var filled = 0
  private var closed = false

  init(_ inner: ObjectUpload) {
    self.inner = inner
    nonisolated(unsafe) let target = inner
    let queue = self.queue
    let pool = self.pool
    worker = WorkerThread(name: "appbox-seal") {
      do {
        while let (buffer, count) = queue.pop() {
          defer { pool.give(buffer) }
          try target.write(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
        }
      } catch {
        queue.cancel { pool.give($0.0) }
        throw error
      }
    }
  }

  deinit {
    if let current { pool.give(current) }
    if !closed {
      queue.cancel { [pool] in pool.give($0.0) }
      try? worker.join()
    }
  }

  package func write(_ bytes: UnsafeRawBufferPointer) throws {
    var rest = bytes
    while !rest.isEmpty {
      let buffer = current ?? pool.take(beforeWaiting: queue.nudge)
      current = buffer
      let count = min(buffer.count - filled, rest.count)
      (buffer.baseAddress! + filled).copyMemory(from: rest.baseAddress!, byteCount: count)
      filled += count
      rest = UnsafeRawBufferPointer(rebasing: rest[count...])
      if filled == buffer.count { try handOver() }
    }
  }

  private func handOver() throws {
    guard let buffer = current else { return }
    current = nil
    let count = filled
    filled = 0
    if !queue.push((buffer, count)) {
      // The worker stopped: its error says why.
      pool.give(buffer)
      closed = true
      try worker.join()
      throw RepositoryError(.invalidRequest, "the archive's upload stopped")
    }
  }

  @discardableResult package func commit(beforeVisible: () -> Void) throws -> Int64 {
    if filled > 0 { try handOver() }
    closed = true
    queue.close()
    try worker.join()
    return try inner.commit(beforeVisible: beforeVisible)
  }

  package func abort() {
    if !closed {
      closed = true
      queue.cancel { [pool] in pool.give($0.0) }
      try? worker.join()
    }
    inner.abort()
  }
}
