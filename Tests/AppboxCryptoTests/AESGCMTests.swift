import AppboxCore
import Testing

@testable import AppboxCrypto

@Suite struct AESGCMTests {
  private let key = hexBytes("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f")
  private let aad = Array("app=com.example.notes".utf8)

  @Test(arguments: [0, 1, 15, 16, 17, 1000, 70_000])
  func sealThenOpenRoundTrips(count: Int) throws {
    let plaintext = randomBytes(count)
    let sealed = try AESGCM.seal(plaintext, key: key, associatedData: aad)
    #expect(sealed.count == 12 + count + 16)
    if count >= 16 {
      #expect(Array(sealed[12..<12 + count]) != plaintext)
    }
    #expect(try AESGCM.open(sealed, key: key, associatedData: aad) == plaintext)
  }

  @Test func theGCMSpecVectorOpens() throws {
    // McGrew & Viega, "The Galois/Counter Mode of Operation", test case 16 (AES-256, with AAD).
    let specKey = hexBytes("feffe9928665731c6d6a8f9467308308 feffe9928665731c6d6a8f9467308308")
    let nonce = hexBytes("cafebabefacedbaddecaf888")
    let plaintext = hexBytes(
      """
      d9313225f88406e5a55909c5aff5269a 86a7a9531534f7da2e4c303d8a318a72
      1c3c0c95956809532fcf0e2449a6b525 b16aedf5aa0de657ba637b39
      """)
    let associatedData = hexBytes("feedfacedeadbeeffeedfacedeadbeef abaddad2")
    let ciphertext = hexBytes(
      """
      522dc1f099567d07f47f37a32a84427d 643a8cdcbfe5c0c97598a2bd2555d1aa
      8cb08e48590dbb3da7b08b1056828838 c5f61e6393ba7a0abcc9f662
      """)
    let tag = hexBytes("76fc6ece0f4e1768cddf8853bb2d551b")
    let opened = try AESGCM.open(nonce + ciphertext + tag, key: specKey, associatedData: associatedData)
    #expect(opened == plaintext)
  }

  @Test func twoSealsOfTheSameMessageDiffer() throws {
    let plaintext = Array("same message".utf8)
    let first = try AESGCM.seal(plaintext, key: key, associatedData: aad)
    let second = try AESGCM.seal(plaintext, key: key, associatedData: aad)
    #expect(first[..<12] != second[..<12])
    #expect(first != second)
  }

  @Test(arguments: [0, 11, 12, 20, 12 + 64 - 1, 12 + 64, 12 + 64 + 15])
  func aFlippedBitAnywhereFailsAuthentication(position: Int) throws {
    // Positions cover the nonce (0...11), the ciphertext (12..<76) and the tag (76..<92).
    var sealed = try AESGCM.seal(randomBytes(64), key: key, associatedData: aad)
    sealed[position] ^= 0x01
    let error = #expect(throws: CryptoError.self) { try AESGCM.open(sealed, key: key, associatedData: aad) }
    #expect(error?.kind == .badData)
    #expect(error?.reason == "authentication failed")
  }

  @Test func wrongAssociatedDataOrKeyFailsAuthentication() throws {
    let sealed = try AESGCM.seal(Array("secret".utf8), key: key, associatedData: aad)
    let wrongData = #expect(throws: CryptoError.self) {
      try AESGCM.open(sealed, key: key, associatedData: Array("app=com.example.other".utf8))
    }
    #expect(wrongData?.kind == .badData)
    let missingData = #expect(throws: CryptoError.self) { try AESGCM.open(sealed, key: key) }
    #expect(missingData?.kind == .badData)
    var otherKey = key
    otherKey[31] ^= 0x80
    let wrongKey = #expect(throws: CryptoError.self) {
      try AESGCM.open(sealed, key: otherKey, associatedData: aad)
    }
    #expect(wrongKey?.kind == .badData)
    #expect(wrongKey?.description == "Unable to open AES-256-GCM sealed message: authentication failed")
  }

  @Test func truncatedMessagesAreBadData() throws {
    let sealed = try AESGCM.seal([], key: key, associatedData: [])
    #expect(sealed.count == 28)
    #expect(try AESGCM.open(sealed, key: key) == [])
    let error = #expect(throws: CryptoError.self) { try AESGCM.open(Array(sealed.dropLast()), key: key) }
    #expect(error?.kind == .badData)
  }

  @Test(arguments: [0, 16, 31, 33])
  func keysMustBe32Bytes(count: Int) {
    let badKey = [UInt8](repeating: 7, count: count)
    let sealError = #expect(throws: CryptoError.self) {
      try AESGCM.seal([1], key: badKey, associatedData: [])
    }
    #expect(sealError?.kind == .invalidArgument)
    let openError = #expect(throws: CryptoError.self) {
      try AESGCM.open([UInt8](repeating: 0, count: 40), key: badKey, associatedData: [])
    }
    #expect(openError?.kind == .invalidArgument)
  }
}
