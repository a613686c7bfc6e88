import AppboxCore
import Testing

@testable import AppboxCrypto

@Suite struct SecureRandomTests {
  @Test func returnsTheRequestedCountOfFreshBytes() throws {
    let first = try SecureRandom.bytes(32)
    let second = try SecureRandom.bytes(32)
    #expect(first.count == 32)
    #expect(first != second)  // a collision has probability 2^-256
    #expect(try SecureRandom.bytes(0) == [])
    // 4 KiB of output is not all one byte value (probability of failure: 256 * 256^-4096).
    #expect(Set(try SecureRandom.bytes(4096)).count > 1)
  }

  @Test func aNegativeCountIsRefused() {
    let error = #expect(throws: CryptoError.self) { try SecureRandom.bytes(-1) }
    #expect(error?.kind == .invalidArgument)
  }
}
