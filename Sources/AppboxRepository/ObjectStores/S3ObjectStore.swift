// A repository in an S3 bucket, under a key prefix: object `archives/x.tar` is the key
// `<prefix>archives/x.tar`. Archives stream up as multipart uploads (S3StreamingUpload) and
// are read with ranged GETs that run ahead of the reader (S3ObjectStream); a read that jumps
// far ahead starts a new ranged GET, a short jump reads through.

import AppboxCore
import AppboxS3
import Foundation

package final class S3ObjectStore: ObjectStore {
  let client: S3Client
  let bucket: String
  /// "" or "some/prefix/".
  let prefix: String
  package var location: String { "s3://\(bucket)/\(prefix)" }
  package var isShared: Bool { true }
  package var now: Date { client.storeTime }

  init(client: S3Client, bucket: String, prefix: String) {
    self.client = client
    self.bucket = bucket
    self.prefix = prefix.isEmpty || prefix.hasSuffix("/") ? prefix : prefix + "/"
  }

  func key(_ name: String) -> String { prefix + name }

  package func create() throws { try client.createBucket(bucket) }
  package func exists() throws -> Bool { try client.bucketExists(bucket) }

  package func list(_ directory: String) throws -> [StoredObject] {
    let start = key(directory + "/")
    return try client.list(bucket, prefix: start).compactMap { object in
      let name = String(object.key.dropFirst(start.count))
      guard !name.isEmpty, !name.contains("/") else { return nil }
      return StoredObject(name: name, size: object.size, modified: object.lastModified)
    }
  }

  package func get(_ name: String) throws -> [UInt8]? {
    do {
      return try client.get(bucket, key(name))
    } catch let error as S3Error where error.kind == .notFound {
      // No such key, or no such bucket: either way the object is not there.
      return nil
    }
  }

  package func put(_ name: String, _ bytes: [UInt8]) throws { try client.put(bucket, key(name), bytes) }

  package func delete(_ names: [String]) throws {
    if names.count == 1 {
      try client.delete(bucket, key(names[0]))
    } else if !names.isEmpty {
      try client.delete(bucket, keys: names.map(key))
    }
  }

  package func size(of name: String) throws -> Int64? { try client.head(bucket, key(name))?.size }

  package func upload(_ name: String) throws -> ObjectUpload {
    S3Upload(S3StreamingUpload(client: client, bucket: bucket, key: key(name)))
  }

  package func reader(_ name: String, size: Int64) throws -> ObjectReader {
    S3Reader(client: client, bucket: bucket, key: key(name), size: size)
  }

  /// Uploads abandoned under `archives/` (a killed writer's) that started before `cutoff`.
  func abandonedUploads(before cutoff: Date) throws -> [(key: String, uploadID: String)] {
    try client.listMultipartUploads(bucket, prefix: key("archives/")).filter { $0.initiated < cutoff }.map {
      ($0.key, $0.uploadID)
    }
  }

  func abortUpload(key: String, uploadID: String) throws {
    try client.abortMultipart(bucket, key, uploadID: uploadID)
  }
}

final class S3Upload: ObjectUpload {
  let upload: S3StreamingUpload
  init(_ upload: S3StreamingUpload) { self.upload = upload }
  func write(_ bytes: UnsafeRawBufferPointer) throws { try upload.write(bytes) }
  @discardableResult func commit(beforeVisible: () -> Void) throws -> Int64 {
    beforeVisible()
    return try upload.finish()
  }
  func abort() { upload.abort() }
}

/// Positional reads over a ranged GET that runs ahead; reads that move backwards or jump more
/// than 4 MiB ahead start a new request at the new offset.
final class S3Reader: ObjectReader {
  let client: S3Client
  let bucket: String
  let key: String
  let size: Int64
  private var stream: S3ObjectStream?
  private var position: Int64 = 0

  init(client: S3Client, bucket: String, key: String, size: Int64) {
    self.client = client
    self.bucket = bucket
    self.key = key
    self.size = size
  }

  deinit { stream?.close() }

  func read(at offset: Int64, into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
    guard offset < size, buffer.count > 0 else { return 0 }
    if let current = stream, offset > position, offset - position <= 4 << 20 {
      // A short jump: read through what the stream has fetched anyway.
      let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 << 10, alignment: 16)
      defer { scratch.deallocate() }
      while position < offset {
        let want = Int(min(Int64(scratch.count), offset - position))
        let count = try current.read(into: UnsafeMutableRawBufferPointer(rebasing: scratch[0..<want]))
        guard count > 0 else { break }
        position += Int64(count)
      }
    }
    if stream == nil || offset != position {
      stream?.close()
      stream = S3ObjectStream(client: client, bucket: bucket, key: key, offset: offset, length: size - offset)
      position = offset
    }
    let count = try stream!.read(into: buffer)
    position += Int64(count)
    return count
  }
}
