// The stores the conformance suite runs against, and what the tests share: each test gets a
// fresh, empty store of one kind (a temp directory, a new in-memory store, or a bucket of its
// own on the test run's shared Swift cluster, under a key prefix so the prefix mapping is
// exercised too).

import AppboxCore
import AppboxCrypto
import AppboxTestSupport
import Foundation
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

/// The implementations of `ObjectStore` that must behave alike.
enum StoreKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
  case local, memory, s3
  var testDescription: String { rawValue }
}

/// A fresh store of one kind, and what keeps it alive (its temp directory): keep this object,
/// not only its `store`, for as long as the test uses the store. Released at once, it removed
/// a local store's directory, which the store's next write then made again, left behind in
/// /tmp by every test run (12 directories, 24 MB each).
final class StoreUnderTest {
  let kind: StoreKind
  let store: ObjectStore
  private let directory: TemporaryDirectory?
  private let bucket: String?

  /// A new store of `kind`; created (`create()`) unless `create` is false.
  init(_ kind: StoreKind, create: Bool = true) throws {
    self.kind = kind
    switch kind {
    case .local:
      let directory = TemporaryDirectory("conformance")
      self.directory = directory
      bucket = nil
      store = LocalObjectStore(root: directory.url("repo"))
    case .memory:
      directory = nil
      bucket = nil
      store = MemoryObjectStore()
    case .s3:
      directory = nil
      let bucket = SwiftCluster.uniqueBucket("conf")
      self.bucket = bucket
      store = try Self.s3Store(bucket: bucket, prefix: "repo")
    }
    if create { try store.create() }
  }

  /// Another store beside this one whose name differs only by a suffix: a sibling directory
  /// (`repo-2`), or the same bucket under the prefix `repo-2`. The memory store has no
  /// neighbours, so its sibling is simply another store.
  func sibling() throws -> ObjectStore {
    let other: ObjectStore
    switch kind {
    case .local: other = LocalObjectStore(root: directory!.url("repo-2"))
    case .memory: other = MemoryObjectStore()
    case .s3: other = try Self.s3Store(bucket: bucket!, prefix: "repo-2")
    }
    try other.create()
    return other
  }

  /// An S3 store on the shared cluster, made the way `--repo s3://BUCKET/PREFIX` makes one.
  static func s3Store(bucket: String, prefix: String) throws -> ObjectStore {
    let cluster = try SwiftCluster.shared()
    let location = try RepositoryLocation.parse(
      "s3://\(bucket)/\(prefix)", defaultDirectory: "/nonexistent", environment: cluster.environment)
    return try Repository.makeStore(location)
  }
}

/// Deterministic bytes that differ at every offset (xorshift64), fast enough for many MiB.
func patternBytes(_ count: Int, seed: UInt64) -> [UInt8] {
  var bytes = [UInt8](repeating: 0, count: count)
  var state = seed | 1
  bytes.withUnsafeMutableBytes { raw in
    var offset = 0
    while offset < count {
      state ^= state << 13
      state ^= state >> 7
      state ^= state << 17
      withUnsafeBytes(of: state.littleEndian) { word in
        let n = min(8, count - offset)
        (raw.baseAddress! + offset).copyMemory(from: word.baseAddress!, byteCount: n)
      }
      offset += 8
    }
  }
  return bytes
}

/// A short name for large byte arrays in expectations (their SHA-256, and their size).
func fingerprint(_ bytes: [UInt8]?) -> String {
  guard let bytes else { return "nil" }
  return "\(bytes.count):\(SHA256.hash(bytes).hex.prefix(16))"
}

/// Everything `reader` holds from `offset` on, read with `forEachChunk`.
func readAll(_ reader: ObjectReader, from offset: Int64 = 0) throws -> [UInt8] {
  var bytes: [UInt8] = []
  try reader.forEachChunk(from: offset) { bytes.append(contentsOf: $0) }
  return bytes
}

/// One positional read of up to `count` bytes at `offset`.
func readOnce(_ reader: ObjectReader, at offset: Int64, count: Int) throws -> [UInt8] {
  var buffer = [UInt8](repeating: 0, count: count)
  let got = try buffer.withUnsafeMutableBytes { try reader.read(at: offset, into: $0) }
  return Array(buffer[0..<got])
}

/// Writes `bytes` through `upload` in pieces of `piece` bytes, then commits.
@discardableResult
func uploadInPieces(_ upload: ObjectUpload, _ bytes: [UInt8], piece: Int) throws -> Int64 {
  try bytes.withUnsafeBytes { raw in
    var offset = 0
    while offset < raw.count {
      let end = min(raw.count, offset + piece)
      try upload.write(UnsafeRawBufferPointer(rebasing: raw[offset..<end]))
      offset = end
    }
  }
  return try upload.commit()
}
