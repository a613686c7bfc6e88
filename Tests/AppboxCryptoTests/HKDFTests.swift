import AppboxCore
import Testing

@testable import AppboxCrypto

@Suite struct HKDFTests {
  @Test func rfc5869TestCase1() throws {
    let okm = try HKDF.derive(
      key: [UInt8](repeating: 0x0B, count: 22), salt: hexBytes("000102030405060708090a0b0c"),
      info: hexBytes("f0f1f2f3f4f5f6f7f8f9"), length: 42)
    #expect(
      okm
        == hexBytes(
          "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865"))
  }

  @Test func rfc5869TestCase3EmptySaltAndInfo() throws {
    let okm = try HKDF.derive(key: [UInt8](repeating: 0x0B, count: 22), salt: [], info: [], length: 42)
    #expect(
      okm
        == hexBytes(
          "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8"))
  }

  @Test func differentInfoGivesUnrelatedKeys() throws {
    let secret = randomBytes(32)
    let a = try HKDF.derive(key: secret, salt: [1], info: Array("keychain".utf8), length: 32)
    let b = try HKDF.derive(key: secret, salt: [1], info: Array("backup".utf8), length: 32)
    #expect(a.count == 32)
    #expect(a != b)
    #expect(try HKDF.derive(key: secret, salt: [1], info: Array("keychain".utf8), length: 32) == a)
  }

  @Test(arguments: [0, -1, 255 * 32 + 1])
  func lengthsOutsideTheRFCLimitAreRefused(length: Int) {
    let error = #expect(throws: CryptoError.self) {
      try HKDF.derive(key: [1], salt: [], info: [], length: length)
    }
    #expect(error?.kind == .invalidArgument)
  }

  @Test func theLongestOutputIsAllowedAndAnEmptyKeyIsNot() throws {
    #expect(try HKDF.derive(key: [1], salt: [], info: [], length: HKDF.maximumLength).count == 8160)
    let error = #expect(throws: CryptoError.self) { try HKDF.derive(key: [], salt: [], info: [], length: 32) }
    #expect(error?.kind == .invalidArgument)
  }
}
