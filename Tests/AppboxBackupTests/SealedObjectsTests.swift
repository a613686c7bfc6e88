import AppboxCore
import AppboxCrypto
import Foundation
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

/// The sealed-object format (Repository/SealedObjects.swift) with 4 KiB segments: round trips,
/// random access, and every kind of tampering the format promises to catch.
struct SealedObjectsTests {
  let key = try! RepositoryKey(master: [UInt8](repeating: 7, count: 32), segmentSize: 4096)

  func sealed(_ plaintext: [UInt8], name: String = "archives/x.tar") throws -> [UInt8] {
    try ObjectSealing.seal(plaintext, name: name, key: key)
  }

  func open(_ bytes: [UInt8], name: String = "archives/x.tar") throws -> [UInt8] {
    try ObjectSealing.open(bytes, name: name, key: key, location: name)
  }

  func randomBytes(_ count: Int) throws -> [UInt8] {
    var bytes = [UInt8](repeating: 0, count: count)
    try bytes.withUnsafeMutableBytes { try SecureRandom.fill($0) }
    return bytes
  }

  @Test(arguments: [0, 1, 4095, 4096, 4097, 12288, 12289])
  func roundTripsAndSizes(_ count: Int) throws {
    let plaintext = try randomBytes(count)
    let object = try sealed(plaintext)
    let segments = max(1, (count + 4095) / 4096)
    #expect(object.count == 32 + count + 16 * segments)
    #expect(ObjectSealing.plaintextSize(sealedSize: Int64(object.count), segmentSize: 4096) == Int64(count))
    #expect(try open(object) == plaintext)
    #expect(!contains(object, Array(plaintext.prefix(64))) || count < 16)
  }

  @Test func readsAtAnyOffsetDecryptOnlyWhatTheyNeed() throws {
    let plaintext = try randomBytes(20000)
    let reader = try OpeningReader(
      MemoryReader(try sealed(plaintext)), name: "archives/x.tar", key: key, location: "x")
    for offset in [0, 1, 4095, 4096, 9000, 19999] {
      var buffer = [UInt8](repeating: 0, count: 5000)
      let count = try buffer.withUnsafeMutableBytes { try reader.read(at: Int64(offset), into: $0) }
      #expect(count > 0 && Array(buffer[0..<count]) == Array(plaintext[offset..<(offset + count)]))
    }
  }

  @Test func everyKindOfTamperingIsDetected() throws {
    let plaintext = try randomBytes(3 * 4096 + 100)
    let object = try sealed(plaintext)
    let stride = 4096 + 16
    func rejected(_ bytes: [UInt8], name: String = "archives/x.tar") -> Bool {
      (try? open(bytes, name: name)) == nil
    }
    // A flipped bit in the header, in a segment's ciphertext, in a tag.
    for position in [3, 20, 32 + 100, 32 + stride + 5, 32 + stride - 1, object.count - 1] {
      var flipped = object
      flipped[position] ^= 0x10
      #expect(rejected(flipped), "bit at \(position)")
    }
    // Truncated: by a whole segment (the new last one was not sealed as last), inside one.
    #expect(rejected(Array(object.prefix(32 + 3 * stride))))
    #expect(rejected(Array(object.prefix(32 + 2 * stride))))
    #expect(rejected(Array(object.prefix(object.count - 7))))
    #expect(rejected(Array(object.prefix(31))))
    // Extended: a copy of a segment appended.
    #expect(rejected(object + Array(object[32..<(32 + stride)])))
    // Reordered: two segments swapped.
    var swapped = object
    swapped.replaceSubrange(32..<(32 + stride), with: object[(32 + stride)..<(32 + 2 * stride)])
    swapped.replaceSubrange((32 + stride)..<(32 + 2 * stride), with: object[32..<(32 + stride)])
    #expect(rejected(swapped))
    // A segment from another object at the same position, and the whole object under another name.
    let other = try sealed(try randomBytes(3 * 4096 + 100))
    var mixed = object
    mixed.replaceSubrange((32 + stride)..<(32 + 2 * stride), with: other[(32 + stride)..<(32 + 2 * stride)])
    #expect(rejected(mixed))
    #expect(rejected(object, name: "archives/y.tar"))
    // Another repository's key.
    let stranger = try RepositoryKey(master: [UInt8](repeating: 8, count: 32), segmentSize: 4096)
    #expect((try? ObjectSealing.open(object, name: "archives/x.tar", key: stranger, location: "x")) == nil)
    #expect(try open(object) == plaintext)
  }

  @Test func aWrongPasswordDoesNotOpenTheKeyAndTheRightOneDoes() throws {
    let wrapped = try key.wrapped(password: Array("right".utf8), repositoryID: "r1")
    #expect(throws: BackupError.self) {
      try RepositoryKey.unlock(
        [("k", wrapped)], password: Array("wrong".utf8), repositoryID: "r1", segmentSize: 4096,
        location: "here")
    }
    do {
      _ = try RepositoryKey.unlock(
        [("k", wrapped)], password: Array("wrong".utf8), repositoryID: "r1", segmentSize: 4096,
        location: "here")
    } catch let error as BackupError {
      #expect(error.kind == .denied)
    }
    // Bound to its repository: the right password, another repository's id.
    #expect(
      (try? RepositoryKey.unlock(
        [("k", wrapped)], password: Array("right".utf8), repositoryID: "r2", segmentSize: 4096,
        location: "here")) == nil)
    let opened = try RepositoryKey.unlock(
      [("k", wrapped)], password: Array("right".utf8), repositoryID: "r1", segmentSize: 4096, location: "here"
    )
    #expect(opened.key.master == key.master)
  }
}

/// Whether `needle` occurs in `haystack`.
func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
  guard !needle.isEmpty, haystack.count >= needle.count else { return false }
  for index in 0...(haystack.count - needle.count) where haystack[index] == needle[0] {
    if haystack[index..<(index + needle.count)].elementsEqual(needle) { return true }
  }
  return false
}

/// The hand-over to the sealing thread: everything arrives in order, and a failure of the
/// upload behind it reaches the writer.
struct PipelinedUploadTests {
  final class Recording: ObjectUpload, @unchecked Sendable {
    var bytes: [UInt8] = []
    var failAfter: Int?
    var committed = false
    var aborted = false
    func write(_ chunk: UnsafeRawBufferPointer) throws {
      if let failAfter, bytes.count >= failAfter {
        throw BackupError(.unreadable(.io), "the disk is full")
      }
      bytes.append(contentsOf: chunk)
    }
    func commit(beforeVisible: () -> Void) throws -> Int64 {
      committed = true
      return Int64(bytes.count)
    }
    func abort() { aborted = true }
  }

  @Test func bytesArriveInOrderAndTheCommitWaitsForThem() throws {
    let inner = Recording()
    let upload = PipelinedUpload(inner)
    var expected: [UInt8] = []
    for round in 0..<300 {
      let chunk = [UInt8](repeating: UInt8(round % 251), count: 10_000 + round * 37)
      expected += chunk
      try chunk.withUnsafeBytes { try upload.write($0) }
    }
    try upload.commit()
    #expect(inner.committed && inner.bytes == expected)
  }

  @Test func aFailureBehindIsWhatTheWriterGets() throws {
    let inner = Recording()
    inner.failAfter = 3 << 20
    let upload = PipelinedUpload(inner)
    let chunk = [UInt8](repeating: 1, count: 100_000)
    #expect {
      for _ in 0..<200 { try chunk.withUnsafeBytes { try upload.write($0) } }
      try upload.commit()
    } throws: { ($0 as? BackupError)?.message == "the disk is full" }
    upload.abort()
    #expect(inner.aborted && !inner.committed)
  }
}
