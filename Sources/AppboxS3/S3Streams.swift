// Streams over S3 objects for readers and writers that pull and push bytes at their own pace
// (libarchive's callbacks): a download running ahead on a thread of its own into a bounded
// buffer, and an upload that cuts what it is given into multipart parts and sends each on a
// thread of its own while the next fills.

import AppboxCore
import AppboxPipeline
import AppboxCrypto
import Foundation
import Glibc

/// Reads an object from an offset onward, a ranged GET running ahead of the reader on its own
/// thread into a bounded buffer (8 MiB). A dropped connection resumes where it stopped (see
/// `S3Client.read`). `close()` (or releasing the stream) stops the download.
public final class S3ObjectStream: @unchecked Sendable {
  public let offset: Int64
  private let condition = Monitor()
  private let capacity: Int
  private var buffer: [UInt8] = []
  private var start = 0
  private var finished = false
  private var failure: Error?
  private var cancelled = false
  private var threadDone = false

  /// Starts reading `key` from `offset` (to the end, or `length` bytes).
  public init(
    client: S3Client, bucket: String, key: String, offset: Int64, length: Int64? = nil,
    capacity: Int = 8 << 20
  ) {
    self.offset = offset
    self.capacity = capacity
    let thread = Thread { [self] in
      do {
        try client.read(bucket, key, range: (offset, length)) { chunk in
          try self.push(chunk)
        }
        condition.withLock {
          finished = true
          condition.broadcast()
        }
      } catch {
        condition.withLock {
          if !cancelled { failure = error }
          finished = true
          condition.broadcast()
        }
      }
      condition.withLock {
        threadDone = true
        condition.broadcast()
      }
    }
    thread.name = "appbox-s3-read"
    thread.start()
  }

  deinit { close() }

  private struct Cancelled: Error {}

  private func push(_ chunk: UnsafeRawBufferPointer) throws {
    try condition.withLock {
      while buffer.count - start + chunk.count > capacity && buffer.count > start && !cancelled {
        condition.wait()
      }
      if cancelled { throw Cancelled() }
      if start > 0 && start == buffer.count {
        buffer.removeAll(keepingCapacity: true)
        start = 0
      } else if start > capacity {
        buffer.removeFirst(start)
        start = 0
      }
      buffer.append(contentsOf: chunk)
      condition.broadcast()
    }
  }

  /// Copies the next bytes into `into`; 0 at the end of the range. Blocks until some arrive.
  public func read(into destination: UnsafeMutableRawBufferPointer) throws -> Int {
    try condition.withLock {
      while start == buffer.count && !finished { condition.wait() }
      if start == buffer.count {
        if let failure { throw failure }
        return 0
      }
      let count = min(destination.count, buffer.count - start)
      buffer.withUnsafeBytes { source in
        destination.baseAddress!.copyMemory(from: source.baseAddress! + start, byteCount: count)
      }
      start += count
      condition.broadcast()
      return count
    }
  }

  /// Stops the download and waits for its thread.
  public func close() {
    condition.withLock {
      cancelled = true
      condition.broadcast()
      while !threadDone { condition.wait() }
    }
  }
}

/// Writes one object from a stream of bytes: kept in memory and sent with one PUT when it ends
/// within the first part, else as a multipart upload whose parts go out on a thread of their
/// own while the next part fills (so at most two parts are in memory). Nothing is visible
/// under the key until `finish()` completes; `abort()` (or releasing it unfinished) abandons
/// the upload and deletes its parts.
public final class S3StreamingUpload: @unchecked Sendable {
  private let client: S3Client
  private let bucket: String
  private let key: String
  private let partSize: Int
  private var current: [UInt8] = []
  private var uploadID: String?
  private let condition = Monitor()
  /// The part waiting for the sender thread, and what it reported.
  private var queued: (number: Int, bytes: [UInt8])?
  private var etags: [Int: String] = [:]
  private var failure: Error?
  private var senderRunning = false
  private var partsStarted = 0
  private var done = false
  public private(set) var size: Int64 = 0

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
    if let failure = condition.withLock({ failure }) { throw failure }
  }

  /// Hands the full part to the sender (starting the multipart upload on the first).
  private func sendPart() throws {
    if uploadID == nil { uploadID = try client.startMultipart(bucket, key) }
    partsStarted += 1
    let part = (number: partsStarted, bytes: current)
    current = []
    current.reserveCapacity(partSize)
    try condition.withLock {
      while queued != nil && failure == nil { condition.wait() }
      if let failure { throw failure }
      queued = part
      condition.broadcast()
      if !senderRunning {
        senderRunning = true
        let thread = Thread { [self] in self.sendQueuedParts() }
        thread.name = "appbox-s3-upload"
        thread.start()
      }
    }
  }

  private func sendQueuedParts() {
    while true {
      let part: (number: Int, bytes: [UInt8])? = condition.withLock {
        while queued == nil && !done && failure == nil { condition.wait() }
        return failure == nil ? queued : nil
      }
      guard let part, let uploadID else {
        condition.withLock {
          senderRunning = false
          condition.broadcast()
        }
        return
      }
      do {
        let etag = try client.uploadPart(
          bucket, key, uploadID: uploadID, number: part.number, bytes: part.bytes)
        condition.withLock {
          etags[part.number] = etag
          queued = nil
          condition.broadcast()
        }
        CrashPoint.hit("s3.part-sent")
      } catch {
        condition.withLock {
          failure = error
          queued = nil
          senderRunning = false
          condition.broadcast()
        }
        return
      }
    }
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
    try condition.withLock {
      while (queued != nil || etags.count < partsStarted) && failure == nil { condition.wait() }
      if let failure { throw failure }
      done = true
      condition.broadcast()
      while senderRunning { condition.wait() }
    }
    let ordered = (1...partsStarted).map { etags[$0]! }
    try client.completeMultipart(bucket, key, uploadID: uploadID!, etags: ordered)
    return size
  }

  /// Abandons the upload: parts already sent are deleted (best effort).
  public func abort() {
    condition.withLock {
      done = true
      if failure == nil { failure = CancellationError() }
      condition.broadcast()
      while senderRunning { condition.wait() }
    }
    if let uploadID { try? client.abortMultipart(bucket, key, uploadID: uploadID) }
    current = []
  }
}
