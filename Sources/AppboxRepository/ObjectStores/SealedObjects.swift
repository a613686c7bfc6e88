// Encrypted objects: every object of an encrypted repository (archives, manifests, snapshot
// records, keychain items inside archives) is sealed in authenticated segments, a STREAM-like
// construction (Hoang, Reyhanitabar, Rogaway, Vizár, 2015) over AES-256-GCM:
//
//   header  "APBXSEG1" (8 bytes) · seed (24 random bytes)
//   segment i = AES-256-GCM(object key, nonce_i, plaintext_i, associated data = header) · tag
//   object key = HKDF-SHA256(repository object key, salt = seed, info = "appbox object " + name)
//   nonce_i    = i as 8 bytes big-endian · 3 zero bytes · 1 if i is the last segment else 0
//
// Every segment holds `segmentSize` bytes of plaintext (64 KiB) except the last, which holds
// 0 to segmentSize: so the plaintext offset p lies in segment p / segmentSize, at a known
// position in the object, and a restore that seeks decrypts only the segments it reads.
// What this detects, and how:
// - a changed bit anywhere: that segment's tag fails;
// - reordered segments: each nonce carries its position;
// - truncation or extension: the number of segments follows from the object's size, and the
//   segment read as the last must have been sealed as the last (its nonce says so);
// - a segment or a whole object moved from elsewhere: every object has its own key, derived
//   from its own random seed and its name, so nothing verifies under another object's key or
//   another name.
// The per-object key also means counters restart at 0 safely in every object.

import AppboxCore
import AppboxCrypto
import Foundation

package enum ObjectSealing {
  static let magic = Array("APBXSEG1".utf8)
  static let seedCount = 24
  static let headerCount = 32
  static let tagCount = GCMCipher.tagByteCount

  static func objectKey(_ key: RepositoryKey, name: String, seed: [UInt8]) throws -> [UInt8] {
    try HKDF.derive(key: key.objectKey, salt: seed, info: Array("appbox object \(name)".utf8), length: 32)
  }

  static func nonce(_ index: Int64, last: Bool) -> [UInt8] {
    var nonce = [UInt8](repeating: 0, count: 12)
    for byte in 0..<8 { nonce[byte] = UInt8(truncatingIfNeeded: index >> (56 - 8 * byte)) }
    nonce[11] = last ? 1 : 0
    return nonce
  }

  /// The plaintext size of a sealed object of `sealedSize` bytes, or nil when no sealing
  /// makes that size (a truncated header or a partial tag).
  static func plaintextSize(sealedSize: Int64, segmentSize: Int) -> Int64? {
    let body = sealedSize - Int64(headerCount)
    let stride = Int64(segmentSize + tagCount)
    guard body >= Int64(tagCount) else { return nil }
    let segments = (body + stride - 1) / stride
    let last = body - (segments - 1) * stride - Int64(tagCount)
    guard last >= 0 else { return nil }
    return (segments - 1) * Int64(segmentSize) + last
  }

  /// Seals a small object whole.
  static func seal(_ plaintext: [UInt8], name: String, key: RepositoryKey) throws -> [UInt8] {
    let sink = MemoryUpload()
    let upload = try SealingUpload(sink, name: name, key: key)
    try plaintext.withUnsafeBytes { try upload.write($0) }
    try upload.commit()
    return sink.bytes
  }

  /// Opens a small object sealed whole; `.corruptArchive` when it does not authenticate.
  static func open(_ sealed: [UInt8], name: String, key: RepositoryKey, location: String) throws -> [UInt8] {
    let reader = try OpeningReader(MemoryReader(sealed), name: name, key: key, location: location)
    var plaintext = [UInt8](repeating: 0, count: Int(reader.size))
    try plaintext.withUnsafeMutableBytes { try reader.readFully(at: 0, into: $0, object: name) }
    return plaintext
  }
}

/// Seals what is written into segments and hands them to another upload.
final class SealingUpload: ObjectUpload {
  private let inner: ObjectUpload
  private let cipher: GCMCipher
  private let header: [UInt8]
  private let segmentSize: Int
  private var pending: [UInt8] = []
  /// Sealed segments waiting to be written: about 1 MiB at a time, not one write per segment.
  private var sealed: [UInt8]
  private var sealedCount = 0
  private var index: Int64 = 0

  init(_ inner: ObjectUpload, name: String, key: RepositoryKey) throws {
    self.inner = inner
    segmentSize = key.segmentSize
    let seed = try SecureRandom.bytes(ObjectSealing.seedCount)
    header = ObjectSealing.magic + seed
    cipher = try GCMCipher(key: try ObjectSealing.objectKey(key, name: name, seed: seed))
    pending.reserveCapacity(segmentSize)
    let segmentsPerWrite = max(1, (1 << 20) / segmentSize)
    sealed = [UInt8](repeating: 0, count: segmentsPerWrite * (segmentSize + ObjectSealing.tagCount))
    sealed.replaceSubrange(0..<header.count, with: header)
    sealedCount = header.count
  }

  func write(_ bytes: UnsafeRawBufferPointer) throws {
    var rest = bytes
    while !rest.isEmpty {
      // A full segment is sealed only once more bytes follow: the last one is marked last.
      if pending.count == segmentSize { try flush(last: false) }
      if pending.isEmpty && rest.count > segmentSize {
        // A whole segment straight from the caller's bytes (more follow): no copy.
        try seal(UnsafeRawBufferPointer(rebasing: rest[..<segmentSize]), last: false)
        rest = UnsafeRawBufferPointer(rebasing: rest[segmentSize...])
        continue
      }
      let taken = min(segmentSize - pending.count, rest.count)
      pending.append(contentsOf: rest[..<taken])
      rest = UnsafeRawBufferPointer(rebasing: rest[taken...])
    }
  }

  private func flush(last: Bool) throws {
    try pending.withUnsafeBytes { try seal($0, last: last) }
    pending.removeAll(keepingCapacity: true)
  }

  private func seal(_ plain: UnsafeRawBufferPointer, last: Bool) throws {
    let count = plain.count + ObjectSealing.tagCount
    if sealedCount + count > sealed.count { try writeSealed() }
    let start = sealedCount
    try header.withUnsafeBytes { associated in
      try sealed.withUnsafeMutableBytes { out in
        try cipher.seal(
          plain, nonce: ObjectSealing.nonce(index, last: last), associatedData: associated,
          into: UnsafeMutableRawBufferPointer(rebasing: out[start..<(start + count)]))
      }
    }
    sealedCount += count
    index += 1
  }

  private func writeSealed() throws {
    guard sealedCount > 0 else { return }
    try sealed.withUnsafeBytes { try inner.write(UnsafeRawBufferPointer(rebasing: $0[0..<sealedCount])) }
    sealedCount = 0
  }

  @discardableResult func commit(beforeVisible: () -> Void) throws -> Int64 {
    try flush(last: true)
    try writeSealed()
    return try inner.commit(beforeVisible: beforeVisible)
  }

  func abort() { inner.abort() }
}

/// The plaintext of a sealed object, by positional reads: each read decrypts (and checks) the
/// segment it falls in, keeping the last one.
package final class OpeningReader: ObjectReader {
  private let inner: ObjectReader
  private let cipher: GCMCipher
  private let header: [UInt8]
  private let segmentSize: Int
  private let segments: Int64
  private let name: String
  private let location: String
  package let size: Int64
  private var current: Int64 = -1
  private var plain: [UInt8]
  private var plainCount = 0
  private var sealed: [UInt8]

  init(_ inner: ObjectReader, name: String, key: RepositoryKey, location: String) throws {
    self.inner = inner
    self.name = name
    self.location = location
    segmentSize = key.segmentSize
    guard let size = ObjectSealing.plaintextSize(sealedSize: inner.size, segmentSize: segmentSize) else {
      throw RepositoryError(
        .corruptArchive, "'\(location)' is damaged: \(inner.size) bytes is not the size of a sealed object")
    }
    self.size = size
    var header = [UInt8](repeating: 0, count: ObjectSealing.headerCount)
    try header.withUnsafeMutableBytes { try inner.readFully(at: 0, into: $0, object: location) }
    guard header.starts(with: ObjectSealing.magic) else {
      throw RepositoryError(.corruptArchive, "'\(location)' is not a sealed appbox object")
    }
    self.header = header
    cipher = try GCMCipher(
      key: try ObjectSealing.objectKey(key, name: name, seed: Array(header[ObjectSealing.magic.count...])))
    let stride = Int64(segmentSize + ObjectSealing.tagCount)
    segments = (inner.size - Int64(ObjectSealing.headerCount) + stride - 1) / stride
    plain = [UInt8](repeating: 0, count: segmentSize)
    sealed = [UInt8](repeating: 0, count: segmentSize + ObjectSealing.tagCount)
  }

  package func read(at offset: Int64, into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
    guard offset < size, buffer.count > 0 else { return 0 }
    let segment = offset / Int64(segmentSize)
    if segment != current { try load(segment) }
    let within = Int(offset - segment * Int64(segmentSize))
    let count = min(buffer.count, plainCount - within)
    plain.withUnsafeBytes { buffer.baseAddress!.copyMemory(from: $0.baseAddress! + within, byteCount: count) }
    return count
  }

  private func load(_ segment: Int64) throws {
    let last = segment == segments - 1
    let stride = Int64(segmentSize + ObjectSealing.tagCount)
    let start = Int64(ObjectSealing.headerCount) + segment * stride
    let sealedCount = Int(min(stride, inner.size - start))
    try sealed.withUnsafeMutableBytes {
      try inner.readFully(
        at: start, into: UnsafeMutableRawBufferPointer(rebasing: $0[0..<sealedCount]), object: location)
    }
    current = -1
    plainCount = sealedCount - ObjectSealing.tagCount
    do {
      try sealed.withUnsafeBytes { input in
        try header.withUnsafeBytes { associated in
          try plain.withUnsafeMutableBytes { out in
            try cipher.open(
              UnsafeRawBufferPointer(rebasing: input[0..<sealedCount]),
              nonce: ObjectSealing.nonce(segment, last: last),
              associatedData: associated, into: UnsafeMutableRawBufferPointer(rebasing: out[0..<plainCount]))
          }
        }
      }
    } catch let error as CryptoError where error.kind == .badData {
      throw RepositoryError(
        .corruptArchive,
        "'\(location)' is damaged: segment \(segment + 1) of \(segments) does not authenticate "
          + "(changed, truncated, reordered or taken from another object)")
    }
    current = segment
  }
}

/// An upload into memory (sealing small objects).
final class MemoryUpload: ObjectUpload {
  private(set) var bytes: [UInt8] = []
  func write(_ chunk: UnsafeRawBufferPointer) throws { bytes.append(contentsOf: chunk) }
  @discardableResult func commit(beforeVisible: () -> Void) throws -> Int64 { Int64(bytes.count) }
  func abort() { bytes = [] }
}

/// Positional reads of bytes in memory.
package final class MemoryReader: ObjectReader {
  let bytes: [UInt8]
  init(_ bytes: [UInt8]) { self.bytes = bytes }
  package var size: Int64 { Int64(bytes.count) }
  package func read(at offset: Int64, into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
    guard offset < size else { return 0 }
    let count = min(buffer.count, bytes.count - Int(offset))
    bytes.withUnsafeBytes {
      buffer.baseAddress!.copyMemory(from: $0.baseAddress! + Int(offset), byteCount: count)
    }
    return count
  }
}
