// Streams over S3 objects for readers and writers that pull and push bytes at their own pace
// (libarchive's callbacks): a download running ahead on a thread of its own into a bounded
// buffer, and an upload that cuts what it is given into multipart parts and sends each on a
// thread of its own while the next fills. Both are built on AppboxPipeline: the state shared
// with the thread is behind a Monitor, and the thread is a WorkerThread that is joined before
// the stream or upload is done with (no thread outlives what it serves).

import AppboxCore
import AppboxPipeline
import AppboxCrypto
import Foundation
import Glibc

/// Reads an object from an offset onward, a ranged GET running ahead of the reader on its own
/// thread into a bounded buffer (8 MiB). A dropped connection resumes where it stopped (see
/// `S3Client.read`). `close()` (or releasing the stream) stops the download and joins it.
public final class S3ObjectStream: Sendable {
  public let offset: Int64
  private struct State {
    var buffer: [UInt8] = []
    var start = 0
    var finished = false
    var failure: (any Error)?
    var cancelled = false
  }
  private let state = Monitor(State())
  private let thread: WorkerThread<Void>

  /// Starts reading `key` from `offset` (to the end, or `length` bytes).
  public init(
    client: S3Client, bucket: String, key: String, offset: Int64, length: Int64? = nil,
    capacity: Int = 8 << 20
  ) {
    self.offset = offset
    let state = self.state
    thread = WorkerThread(name: "appbox-s3-read") {
      do {
        try client.read(bucket, key, range: (offset, length)) { chunk in
          try Self.push(chunk, into: state, capacity: capacity)
        }
        state.withLock { state_ in
          state_.finished = true
          state.broadcast()
        }
      } catch {
        state.withLock { state_ in
          if !state_.cancelled { state_.failure = error }
          state_.finished = true
          state.broadcast()
        }
      }
    }
  }

  deinit { close() }

  private struct Cancelled: Error {}

  private static func push(_ chunk: UnsafeRawBufferPointer, into monitor: Monitor<State>, capacity: Int) throws {
    let bytes = Array(chunk)
    try monitor.withLock(waitingWhile: { state in
      state.buffer.count - state.start + bytes.count > capacity && state.buffer.count > state.start
        && !state.cancelled
    }) { (state) throws(Cancelled) in
      if state.cancelled { throw Cancelled() }
      if state.start > 0 && state.start == state.buffer.count {
        state.buffer.removeAll(keepingCapacity: true)
        state.start = 0
      } else if state.start > capacity {
        state.buffer.removeFirst(state.start)
        state.start = 0
      }
      state.buffer.append(contentsOf: bytes)
      monitor.broadcast()
    }
  }

  /// Copies the next bytes into `into`; 0 at the end of the range. Blocks until some arrive.
  public func read(into destination: UnsafeMutableRawBufferPointer) throws -> Int {
    let monitor = state
    let (count, failure): (Int, (any Error)?) = monitor.withLock(waitingWhile: { state in
      state.start == state.buffer.count && !state.finished
    }) { state in
      if state.start == state.buffer.count { return (0, state.failure) }
      let count = min(destination.count, state.buffer.count - state.start)
      let start = state.start
      state.buffer.withUnsafeBytes { source in
        destination.baseAddress!.copyMemory(from: source.baseAddress! + start, byteCount: count)
      }
      state.start += count
      monitor.broadcast()
      return (count, nil)
    }
    if let failure { throw failure }
    return count
  }

  /// Stops the download and waits for its thread.
  public func close() {
    let monitor = state
    monitor.withLock { state in
      state.cancelled = true
      monitor.broadcast()
    }
    try? thread.join()
  }
}

/// Writes one object from a stream of bytes: kept in memory and sent with one PUT when it ends
/// within the first part, else as a multipart upload whose parts go out on a thread of their
/// own while the next part fills (so at most two parts are in memory). Nothing is visible
/// under the key until `finish()` completes; `abort()` (or releasing it unfinished) abandons
/// the upload and deletes its parts.
///
/// Not Sendable: one writer owns it. The sender thread shares only `Parts` (behind a monitor)
/// and is joined before `finish()` or `abort()` returns.
public final class S3StreamingUpload {
  private let client: S3Client
  private let bucket: String
  private let key: String
  private let partSize: Int
  private var current: [UInt8] = []
  private var uploadID: String?
  private var partsStarted = 0
  private var done = false
  public private(set) var size: Int64 = 0

  /// What the writer and the sender share: the part waiting for the sender, and what it
  /// reported.
  private struct Parts {
    var queued: (number: Int, bytes: [UInt8])?
    var etags: [Int: String] = [:]
    var failure: (any Error)?
    var closing = false
  }
  private let parts = Monitor(Parts())
  private var sender: WorkerThread<Void>?

  public init(client: S3Client, bucket: String, key: String) {
    self.client = client
    self.bucket = bucket
    self.key = key
    self.partSize = client.configuration.partSize
    current.reserveCapacity(min(partSize, 1 << 20))
  }

  deinit { if !done { abort() } }

  /// Adds bytes; may wait while the previous part is still being sent. Throws what the
  /// sending failed with.
  public func write(_ bytes: UnsafeRawBufferPointer) throws {
    var remaining = bytes
    while !remaining.isEmpty {
      let room = partSize - current.count
      let taken = min(room, remaining.count)
      current.append(contentsOf: remaining[..<taken])
      remaining = UnsafeRawBufferPointer(rebasing: remaining[taken...])
      size += Int64(taken)
      if current.count == partSize && !remaining.isEmpty { try sendPart() }
    }
    if let failure = parts.withLock({ $0.failure }) { throw failure }
  }

  /// Hands the full part to the sender (starting the multipart upload, and the sender, on the
  /// first); waits while the previous part is still being sent.
  private func sendPart() throws {
    if uploadID == nil { uploadID = try client.startMultipart(bucket, key) }
    partsStarted += 1
    let part = (number: partsStarted, bytes: current)
    current = []
    current.reserveCapacity(partSize)
    let parts = self.parts
    try parts.withLock(waitingWhile: { $0.queued != nil && $0.failure == nil }) { (state) throws(any Error) in
      if let failure = state.failure { throw failure }
      state.queued = part
      parts.broadcast()
    }
    if sender == nil { sender = startSender(uploadID: uploadID!) }
  }

  /// The sender: sends each queued part until the writer closes or a part fails.
  private func startSender(uploadID: String) -> WorkerThread<Void> {
    let (client, bucket, key, parts) = (self.client, self.bucket, self.key, self.parts)
    return WorkerThread(name: "appbox-s3-upload") {
      while true {
        let part: (number: Int, bytes: [UInt8])? = parts.withLock(waitingWhile: { state in
          state.queued == nil && !state.closing && state.failure == nil
        }) { state in state.failure == nil ? state.queued : nil }
        guard let part else { return }
        do {
          let etag = try client.uploadPart(bucket, key, uploadID: uploadID, number: part.number, bytes: part.bytes)
          parts.withLock { state in
            state.etags[part.number] = etag
            state.queued = nil
            parts.broadcast()
          }
          CrashPoint.hit("s3.part-sent")
        } catch {
          parts.withLock { state in
            state.failure = error
            state.queued = nil
            parts.broadcast()
          }
          return
        }
      }
    }
  }

  /// Stops the sender once the queued part is sent (or failed) and joins it.
  private func stopSender() {
    let parts = self.parts
    parts.withLock { state in
      state.closing = true
      parts.broadcast()
    }
    try? sender?.join()
    sender = nil
  }

  /// Sends what is left and makes the object visible: one PUT for a small object, else the
  /// last part and the completion. Returns the object's size.
  @discardableResult
  public func finish() throws -> Int64 {
    if uploadID == nil {
      try client.put(bucket, key, current)
      done = true
      return size
    }
    if !current.isEmpty || partsStarted == 0 { try sendPart() }
    let started = partsStarted
    let parts = self.parts
    let (etags, failure) = parts.withLock(waitingWhile: { state in
      (state.queued != nil || state.etags.count < started) && state.failure == nil
    }) { state in (state.etags, state.failure) }
    stopSender()
    if let failure { throw failure }
    done = true
    let ordered = (1...partsStarted).map { etags[$0]! }
    try client.completeMultipart(bucket, key, uploadID: uploadID!, etags: ordered)
    return size
  }

  /// Abandons the upload: parts already sent are deleted (best effort).
  public func abort() {
    done = true
    parts.withLock { state in
      if state.failure == nil { state.failure = CancellationError() }
    }
    stopSender()
    if let uploadID { try? client.abortMultipart(bucket, key, uploadID: uploadID) }
    current = []
  }
}
