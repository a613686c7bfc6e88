import AppboxCore
import Testing

@testable import AppboxCrypto

/// PBKDF2, SHA-1, AES key wrap and AES-256-CBC, against the published test vectors.
@Suite struct DeviceBackupCryptoTests {
  @Test func pbkdf2MatchesRFC6070AndItsSHA256Counterpart() throws {
    let sha1 = try PBKDF2.derive(
      password: Array("password".utf8), salt: Array("salt".utf8), iterations: 4096, hash: .sha1, length: 20)
    #expect(sha1 == hexBytes("4b007901b765489abead49d926f721d065a429c1"))
    let sha256 = try PBKDF2.derive(
      password: Array("password".utf8), salt: Array("salt".utf8), iterations: 1, hash: .sha256, length: 32)
    #expect(sha256 == hexBytes("120fb6cffcf8b32c43e7225256c4f837a86548c92ccc35480805987cb70be17b"))
    // An empty password and salt still derive (a backup password may be empty).
    #expect(try PBKDF2.derive(password: [], salt: [], iterations: 1, hash: .sha1, length: 32).count == 32)
  }

  @Test func pbkdf2RefusesUnboundedWork() {
    let error = #expect(throws: CryptoError.self) {
      try PBKDF2.derive(
        password: [1], salt: [2], iterations: PBKDF2.maximumIterations + 1, hash: .sha256, length: 32)
    }
    #expect(error?.kind == .invalidArgument)
    #expect(throws: CryptoError.self) {
      try PBKDF2.derive(password: [1], salt: [2], iterations: 0, hash: .sha1, length: 32)
    }
  }

  @Test func sha1MatchesFIPS180() throws {
    #expect(try SHA1.hash(Array("abc".utf8)) == hexBytes("a9993e364706816aba3e25717850c26c9cd0d89d"))
    #expect(try SHA1.hash([]) == hexBytes("da39a3ee5e6b4b0d3255bfef95601890afd80709"))
  }

  @Test func keyWrapMatchesRFC3394AndRefusesTheWrongKey() throws {
    let kek = hexBytes("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f")
    let key = hexBytes("00112233445566778899aabbccddeeff000102030405060708090a0b0c0d0e0f")
    let wrapped = try AESKeyWrap.wrap(key, with: kek)
    #expect(
      wrapped == hexBytes("28c9f404c4b810f4cbccb35cfb87f8263f5786e2d80ed326cbc7f0e71a99f43bfb988b9b7a02dd21"))
    #expect(try AESKeyWrap.unwrap(wrapped, with: kek) == key)
    var otherKEK = kek
    otherKEK[0] ^= 1
    #expect(try AESKeyWrap.unwrap(wrapped, with: otherKEK) == nil)
    var damaged = wrapped
    damaged[20] ^= 0x80
    #expect(try AESKeyWrap.unwrap(damaged, with: kek) == nil)
    #expect(throws: CryptoError.self) { try AESKeyWrap.unwrap(Array(wrapped.dropLast()), with: kek) }
  }

  @Test func cbcMatchesSP800_38AAndPadsAsPKCS7() throws {
    let key = hexBytes("603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4")
    let iv = hexBytes("000102030405060708090a0b0c0d0e0f")
    let stream = try AESCBCStream(key: key, iv: iv, encrypting: true)
    var out = [UInt8](repeating: 0, count: 64)
    let plain = hexBytes("6bc1bee22e409f96e93d7e117393172a")
    let count = try plain.withUnsafeBytes { input in
      try out.withUnsafeMutableBytes { buffer in
        let first = try stream.update(input, into: buffer)
        return first + (try stream.finish(into: UnsafeMutableRawBufferPointer(rebasing: buffer[first...])))
      }
    }
    #expect(count == 32)  // one block of data, one of padding
    #expect(Array(out[0..<16]) == hexBytes("f58c4c04d6e5f1ba779eabfb5f7bfbd6"))

    for length in [0, 1, 15, 16, 17, 100_000] {
      let data = randomBytes(length)
      let sealed = try AESCBCStream.process(data, key: key, encrypting: true)
      #expect(sealed.count == (length / 16 + 1) * 16)
      #expect(try AESCBCStream.process(sealed, key: key, encrypting: false) == data)
    }
  }

  @Test func cbcStreamsInPiecesAndRefusesBadPadding() throws {
    let key = randomBytes(32)
    let data = randomBytes(10_000)
    let sealed = try AESCBCStream.process(data, key: key, encrypting: true)
    let stream = try AESCBCStream(key: key, encrypting: false)
    var result: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096 + 16)
    var offset = 0
    while offset < sealed.count {
      let piece = Array(sealed[offset..<min(sealed.count, offset + 333)])
      let n = try piece.withUnsafeBytes { input in
        try buffer.withUnsafeMutableBytes { try stream.update(input, into: $0) }
      }
      result += buffer[..<n]
      offset += piece.count
    }
    let n = try buffer.withUnsafeMutableBytes { try stream.finish(into: $0) }
    result += buffer[..<n]
    #expect(result == data)

    // A stream cut after a block whose last byte is 0: no valid PKCS#7 padding.
    let block = randomBytes(15) + [0]
    let cut = Array(try AESCBCStream.process(block, key: key, encrypting: true).prefix(16))
    let error = #expect(throws: CryptoError.self) {
      _ = try AESCBCStream.process(cut, key: key, encrypting: false)
    }
    #expect(error?.kind == .badData)
  }
}
