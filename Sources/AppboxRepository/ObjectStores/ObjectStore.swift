// Where a repository's objects live: a local directory or an S3 bucket, behind one small
// protocol. Objects are named by relative paths (`archives/1a2b3c4d.tar`, `snapshots/1a2b3c4d`)
// and are written once: small ones whole (`put`), archives as a staged stream (`upload`) that
// becomes visible only when committed. Nothing here knows about catalogs or encryption; the
// repository layers those on top (Repository.swift, SealedObjects.swift).

import AppboxArchive
import AppboxCore
import Foundation

/// One object as a listing shows it.
package struct StoredObject: Sendable, Equatable {
  /// The name below its directory (`1a2b3c4d.tar` in `archives/`).
  var name: String
  var size: Int64
  /// When it was last written, by the store's clock.
  var modified: Date
}

/// A repository's storage. Sendable: the prune lock's refresher writes from a thread of its own.
package protocol ObjectStore: AnyObject, Sendable {
  /// For messages: the directory's path, or `s3://bucket/prefix`.
  var location: String { get }
  /// Whether writers on other machines can reach the same objects without a shared file
  /// system lock (S3): then `forget` marks garbage and deletes it only after a grace period.
  var isShared: Bool { get }
  /// The store's clock now (the local clock for a directory).
  var now: Date { get }
  /// The objects directly in `directory` ("archives"), temp files excepted.
  func list(_ directory: String) throws -> [StoredObject]
  /// The names `list` would give, in the same order, without their sizes and times (a local
  /// directory answers from one read of the directory, no stat per object).
  func names(_ directory: String) throws -> [String]
  /// A whole (small) object, or nil when it does not exist.
  func get(_ name: String) throws -> [UInt8]?
  /// Writes a small object whole, atomically and durably (replacing one of that name).
  func put(_ name: String, _ bytes: [UInt8]) throws
  /// Writes several small objects, each atomically, in order (each visible no earlier than the
  /// ones before it), all durable when it returns.
  func putAll(_ objects: [(name: String, bytes: [UInt8])]) throws
  /// Deletes objects; missing ones are not an error.
  func delete(_ names: [String]) throws
  /// The object's size, or nil when it does not exist.
  func size(of name: String) throws -> Int64?
  /// Starts writing `name` as a stream; nothing is visible under the name before `commit`.
  func upload(_ name: String) throws -> ObjectUpload
  /// Random access to the bytes of `name` (whose size is `size`).
  func reader(_ name: String, size: Int64) throws -> ObjectReader
  /// Makes sure the store (directory or bucket) exists.
  func create() throws
  /// Whether the store (directory or bucket) exists.
  func exists() throws -> Bool
}

extension ObjectStore {
  package func names(_ directory: String) throws -> [String] { try list(directory).map(\.name) }
}

/// A stream being written to one object.
package protocol ObjectUpload: AnyObject {
  func write(_ bytes: UnsafeRawBufferPointer) throws
  /// Makes the object durable and visible under its name (running `beforeVisible` just before
  /// it becomes visible: a named crash point); returns its size.
  @discardableResult func commit(beforeVisible: () -> Void) throws -> Int64
  /// Gives up: nothing becomes visible, what was staged is removed (best effort).
  func abort()
}

extension ObjectStore {
  package func putAll(_ objects: [(name: String, bytes: [UInt8])]) throws {
    for object in objects { try put(object.name, object.bytes) }
  }
}

extension ObjectUpload {
  @discardableResult func commit() throws -> Int64 { try commit(beforeVisible: {}) }
}

/// Positional reads of one object.
package protocol ObjectReader: AnyObject {
  var size: Int64 { get }
  /// Reads up to `buffer.count` bytes at `offset`; fewer only at the end of the object.
  func read(at offset: Int64, into buffer: UnsafeMutableRawBufferPointer) throws -> Int
}

extension ObjectReader {
  /// Fills `buffer` from `offset`, or throws when the object ends first.
  func readFully(at offset: Int64, into buffer: UnsafeMutableRawBufferPointer, object: String) throws {
    var done = 0
    while done < buffer.count {
      let count = try read(
        at: offset + Int64(done), into: UnsafeMutableRawBufferPointer(rebasing: buffer[done...]))
      guard count > 0 else {
        throw RepositoryError(.corruptArchive, "'\(object)' ends before byte \(offset + Int64(buffer.count))")
      }
      done += count
    }
  }

  /// Hands every byte from `offset` to the end to `body`, in chunks.
  func forEachChunk(from offset: Int64 = 0, _ body: (UnsafeRawBufferPointer) throws -> Void) throws {
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 64)
    defer { buffer.deallocate() }
    var position = offset
    while position < size {
      let count = try read(at: position, into: buffer)
      if count == 0 { break }
      try body(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
      position += Int64(count)
    }
  }
}

/// An upload that also computes the size and CRC-32C of the bytes it stores (for the
/// catalog's archive record and `check`).
final class ChecksummingUpload: ObjectUpload {
  let inner: ObjectUpload
  private(set) var checksum = CRC32C()
  private(set) var size: Int64 = 0

  init(_ inner: ObjectUpload) { self.inner = inner }

  func write(_ bytes: UnsafeRawBufferPointer) throws {
    checksum.update(bytes)
    size += Int64(bytes.count)
    try inner.write(bytes)
  }

  @discardableResult func commit(beforeVisible: () -> Void) throws -> Int64 {
    try inner.commit(beforeVisible: beforeVisible)
  }
  func abort() { inner.abort() }
}

/// libarchive's input over an object's positional reads, from a given byte on; skipping
/// just moves the position (an S3 reader decides whether that means a new request).
final class ObjectArchiveInput: ArchiveInput {
  let reader: ObjectReader
  private(set) var position: Int64

  init(_ reader: ObjectReader, from position: Int64) {
    self.reader = reader
    self.position = position
  }

  func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
    let count = try reader.read(at: position, into: buffer)
    position += Int64(count)
    return count
  }

  func skip(_ count: Int64) throws -> Bool {
    // Past the end is left to read(), which then finds the end (libarchive reports truncation).
    guard count <= reader.size - position else { return false }
    position += count
    return true
  }
}

/// An archive writer's output into an upload.
final class UploadArchiveOutput: ArchiveOutput {
  let upload: ObjectUpload
  init(_ upload: ObjectUpload) { self.upload = upload }
  func write(_ bytes: UnsafeRawBufferPointer) throws { try upload.write(bytes) }
}
