import AppboxCore
import Foundation
import Glibc
import Testing

@testable import AppboxCrypto

@Suite struct SHA256Tests {
  @Test(arguments: [
    ("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
    ("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
    (
      "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
      "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
    ),
    (
      "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
      "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"
    ),
  ])
  func knownVectors(message: String, expected: String) {
    let bytes = Array(message.utf8)
    #expect(SHA256.hash(bytes).hex == expected)
    #expect(SHA256.hash(Data(bytes)).hex == expected)
    let hasher = SHA256Hasher()
    hasher.update(bytes)
    #expect(hasher.finalize().hex == expected)
  }

  @Test func aMillionAsThroughManyUpdates() {
    let hasher = SHA256Hasher()
    let chunk = [UInt8](repeating: UInt8(ascii: "a"), count: 1000)
    for _ in 0..<1000 {
      hasher.update(chunk)
    }
    #expect(hasher.finalize().hex == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
  }

  @Test func incrementalEqualsOneShotForAnySplit() {
    let message = randomBytes(200_003)
    let expected = SHA256.hash(message)
    let hasher = SHA256Hasher()
    for cuts in [[0], [1], [63, 64, 65], [65_536, 131_072], [199_999]] {
      var start = 0
      for cut in cuts + [message.count] {
        message[start..<cut].withUnsafeBytes { hasher.update($0) }
        start = cut
      }
      #expect(hasher.finalize() == expected, "cuts \(cuts)")
    }
    let hasherFromData = SHA256Hasher()
    hasherFromData.update(Data(message))
    #expect(hasherFromData.finalize() == expected)
  }

  @Test func aFinalizedHasherStartsOver() {
    let hasher = SHA256Hasher()
    hasher.update(Array("abc".utf8))
    #expect(hasher.finalize().hex == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    #expect(hasher.finalize().hex == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    hasher.update(UnsafeRawBufferPointer(start: nil, count: 0))
    hasher.update(Array("abc".utf8))
    #expect(hasher.finalize().hex == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
  }

  @Test func oneShotAcceptsSlicesAndRawBuffers() {
    let message = randomBytes(1000)
    let expected = SHA256.hash(message)
    #expect(SHA256.hash(message[...]) == expected)
    #expect(message.withUnsafeBytes { SHA256.hash($0) } == expected)
    #expect(SHA256.hash(message[1...]) != expected)
  }

  @Test func hashingAFileDescriptorEqualsHashingItsBytes() throws {
    let url = FileManager.default.temporaryDirectory
      .appendingPathComponent("appbox-crypto-\(UUID().uuidString).bin")
    defer { try? FileManager.default.removeItem(at: url) }
    let contents = randomBytes(1_048_576 + 7)  // crosses the read buffer size several times
    try Data(contents).write(to: url)
    let descriptor = open(url.path, O_RDONLY | O_CLOEXEC)
    try #require(descriptor >= 0)
    defer { close(descriptor) }
    #expect(try SHA256.hash(fileDescriptor: descriptor) == SHA256.hash(contents))
    // Reading starts at the current offset.
    #expect(lseek(descriptor, 10, SEEK_SET) == 10)
    let hasher = SHA256Hasher()
    #expect(try hasher.update(readingFrom: descriptor) == contents.count - 10)
    #expect(hasher.finalize() == SHA256.hash(contents[10...]))
  }

  @Test func aBadDescriptorIsAnIOError() {
    let error = #expect(throws: CryptoError.self) { try SHA256.hash(fileDescriptor: -1) }
    #expect(error?.kind == .io)
    #expect(error?.systemErrno == EBADF)
    #expect(error?.description.contains("file descriptor -1") == true)
  }
}
