import AppboxCore
import Testing

struct CRC32CTests {
  func crc(_ bytes: [UInt8]) -> UInt32 {
    var c = CRC32C()
    c.update(bytes)
    return c.value
  }

  @Test func knownVectors() {
    // RFC 3720 (iSCSI) B.4 and the common check value.
    #expect(crc(Array("123456789".utf8)) == 0xE306_9283)
    #expect(crc([UInt8](repeating: 0, count: 32)) == 0x8A91_36AA)
    #expect(crc([UInt8](repeating: 0xFF, count: 32)) == 0x62A8_AB43)
    #expect(crc(Array(0..<32)) == 0x46DD_794E)
    #expect(crc([]) == 0)
  }

  @Test func hardwareMatchesTableAcrossLaneBoundariesAndSplits() {
    var generator = SystemRandomNumberGenerator()
    for size in [1, 7, 8, 9, 24_575, 24_576, 24_577, 49_152 + 13, 300_001] {
      let bytes = (0..<size).map { _ in UInt8.random(in: 0...255, using: &generator) }
      #expect(crc(bytes) == CRC32C.softwareValue(of: bytes), "size \(size)")
      var split = CRC32C()
      let cut = size / 3
      split.update(Array(bytes[0..<cut]))
      split.update(Array(bytes[cut...]))
      #expect(split.value == crc(bytes), "split \(size)")
    }
  }
}
