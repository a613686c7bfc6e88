import Testing

@testable import AppboxCrypto

@Suite struct DigestTests {
  private let abcHex = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"

  @Test func hexRoundTrips() throws {
    let digest = try #require(Digest(hex: abcHex))
    #expect(digest.hex == abcHex)
    #expect(digest.description == abcHex)
    #expect(digest.bytes == hexBytes(abcHex))
    #expect(Digest(hex: abcHex.uppercased()) == digest)
  }

  @Test(arguments: [
    "",
    "ba7816bf",
    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015a",  // 63 digits
    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad0",  // 65 digits
    "ga7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",  // 'g'
    " a7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",  // space
    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015aé",  // non-ASCII
  ])
  func invalidHexIsRejected(text: String) {
    #expect(Digest(hex: text) == nil)
  }

  @Test func bytesRoundTripThroughEveryInitializer() {
    let bytes = randomBytes(32)
    let digest = Digest(bytes: bytes)
    #expect(digest.bytes == bytes)
    #expect(Digest(bytes: bytes[...]) == digest)
    #expect(Digest(bytes: AnyCollection(bytes)) == digest)  // not contiguous: the slow path
    #expect(Digest(validating: bytes) == digest)
    #expect(digest.withUnsafeBytes { Array($0) } == bytes)
    #expect(Digest(hex: digest.hex) == digest)
  }

  @Test func wrongLengthsAreNotDigests() {
    #expect(Digest(validating: [UInt8](repeating: 1, count: 31)) == nil)
    #expect(Digest(validating: [UInt8](repeating: 1, count: 33)) == nil)
    #expect(Digest(validating: [UInt8]()) == nil)
  }

  @Test func orderingFollowsTheBytes() {
    let digests = (0..<200).map { _ in Digest(bytes: randomBytes(32)) }
    let byDigest = digests.sorted().map(\.bytes)
    let byBytes = digests.map(\.bytes).sorted { $0.lexicographicallyPrecedes($1) }
    #expect(byDigest == byBytes)
    // Differ only in the last byte, and only in the first: both orders must agree.
    var low = [UInt8](repeating: 0x80, count: 32)
    var high = low
    high[31] = 0x81
    #expect(Digest(bytes: low) < Digest(bytes: high))
    low[0] = 0x7F
    #expect(Digest(bytes: low) < Digest(bytes: high))
    #expect(!(Digest(bytes: high) < Digest(bytes: high)))
  }

  @Test func equalDigestsHashEquallyAndDistinctOnesStayApart() {
    let bytes = randomBytes(32)
    var other = bytes
    other[17] ^= 1
    let set: Set<Digest> = [Digest(bytes: bytes), Digest(bytes: bytes), Digest(bytes: other)]
    #expect(set.count == 2)
    #expect(set.contains(Digest(bytes: other)))
  }
}
