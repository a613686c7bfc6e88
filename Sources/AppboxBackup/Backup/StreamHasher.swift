// SHA-256 on a thread of its own, for the backup engine (the threading tools themselves, a thread
// one can join, a bounded hand-off queue and a buffer pool, are AppboxPipeline's). Engines run
// their stages on plain threads (not Swift concurrency): each stage is a tight loop of blocking
// system calls, and each C handle (SQLite connection, libarchive object, hash context) must
// stay on one thread.

import AppboxCore
import AppboxCrypto
import AppboxPipeline
import Foundation
import Glibc

/// SHA-256 of a stream of pooled buffers, on a thread of its own: the third hand when a file is
/// hashed twice (whole, and chunk by chunk) and cut. Feed it a file's buffers in order (each
/// shared with whoever else holds it), then `finish()` waits for the digest.
final class StreamHasher: Sendable {
  private enum Job {
    case data(PooledBuffer, Int)
    case finish
  }
  private let queue = HandoffQueue<Job>(capacity: 8 << 20)
  private let pool: BufferPool
  /// The digests the thread finished and nobody took yet.
  private let digests = Monitor<[Digest]>([])
  private let thread: WorkerThread<Void>

  init(pool: BufferPool) {
    self.pool = pool
    let queue = self.queue
    let digests = self.digests
    thread = WorkerThread(name: "appbox-hash") {
      let hasher = SHA256Hasher()
      while let job = queue.pop() {
        switch job {
        case .data(let buffer, let count):
          hasher.update(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
          pool.give(buffer)
        case .finish:
          let digest = hasher.finalize()
          digests.withLock { done in
            done.append(digest)
            digests.broadcast()
          }
        }
      }
    }
  }

  /// Hashes `buffer[0..<count]` next; the hasher gives the buffer back to the pool when done.
  func feed(_ buffer: PooledBuffer, count: Int) {
    pool.share(buffer)
    if !queue.push(.data(buffer, count), cost: count) { pool.give(buffer) }
  }

  /// Wakes the hashing thread whatever is queued (before blocking on pool buffers it holds).
  func nudge() { queue.nudge() }

  /// The digest of everything fed since the last `finish()`.
  func finish() -> Digest {
    queue.push(.finish)
    queue.nudge()
    return digests.withLock(waitingWhile: { $0.isEmpty }) { $0.removeFirst() }
  }

  /// Stops the thread (what is queued is given back). Closing again does nothing.
  func close() {
    queue.close()
    try? thread.join()
  }
}
