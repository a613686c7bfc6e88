import AppboxCore
import Testing

@testable import AppboxCrypto

@Suite struct ScryptTests {
  @Test func rfc7914EmptyPasswordAndSalt() throws {
    let key = try Scrypt.derive(password: [], salt: [], parameters: .init(n: 16, r: 1, p: 1), length: 64)
    #expect(
      key
        == hexBytes(
          """
          77d6576238657b203b19ca42c18a0497f16b4844e3074ae8dfdffa3fede21442
          fcd0069ded0948f8326a753a0fc81f17e8d3e0fb2e0d3628cf35e20c38d18906
          """))
  }

  @Test func rfc7914PasswordNaCl() throws {
    let key = try Scrypt.derive(
      password: Array("password".utf8), salt: Array("NaCl".utf8), parameters: .init(n: 1024, r: 8, p: 16),
      length: 64)
    #expect(
      key
        == hexBytes(
          """
          fdbabe1c9d3472007856e7190d01e9fe7c6ad7cbc8237830e77376634b373162
          2eaf30d92e22a3886ff109279d9830dac727afb94a83ee6d8360cbdfa2cc0640
          """))
  }

  @Test func theInteractiveParametersNeedMoreThanOpenSSLsDefaultMemoryLimit() throws {
    // 2^15 · 8 · 128 bytes is exactly OpenSSL's default limit of 32 MiB, which it refuses.
    let a = try Scrypt.derive(
      password: Array("1234".utf8), salt: [1, 2], parameters: .interactive, length: 32)
    let b = try Scrypt.derive(
      password: Array("1235".utf8), salt: [1, 2], parameters: .interactive, length: 32)
    #expect(a.count == 32 && a != b)
  }

  @Test func badParametersAreInvalidArguments() {
    for parameters in [
      Scrypt.Parameters(n: 1000, r: 8, p: 1), .init(n: 1 << 15, r: 0, p: 1), .init(n: 1, r: 1, p: 1),
    ] {
      #expect {
        try Scrypt.derive(password: [1], salt: [], parameters: parameters, length: 32)
      } throws: { ($0 as? CryptoError)?.kind == .invalidArgument }
    }
    #expect(throws: CryptoError.self) {
      try Scrypt.derive(password: [1], salt: [], parameters: .init(n: 16, r: 1, p: 1), length: 0)
    }
  }
}
