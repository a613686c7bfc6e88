import AppboxCore
import AppboxPlist
import AppboxSecItem
import CSecItem
import Foundation
import Testing

/// The C library: its binary property-list codec against appbox's Swift codec (both ways, and
/// on hostile bytes), and its SecItem calls against a real broker.
@Suite(.serialized)
struct CSecItemTests {
  /// A value of every type, Unicode beyond the BMP included, as the C library builds it.
  static func cValue() -> OpaquePointer {
    let root = appbox_dictionary_new()!
    appbox_dictionary_set_string(root, "ascii", "plain")
    appbox_dictionary_set_string(root, "unicode", "café ☕ 𝄞 日本")
    appbox_dictionary_set_data(root, "data", [UInt8]([0, 1, 2, 255]), 4)
    appbox_dictionary_set_data(root, "empty", nil, 0)
    appbox_dictionary_set_integer(root, "small", 7)
    appbox_dictionary_set_integer(root, "large", 1 << 40)
    appbox_dictionary_set_integer(root, "negative", -5)
    appbox_dictionary_set_bool(root, "yes", 1)
    appbox_dictionary_set(root, "date", appbox_date_new(700_000_000.5))
    let array = appbox_array_new()!
    for index in 0..<20 { appbox_array_append(array, appbox_integer_new(Int64(index))) }
    appbox_dictionary_set(root, "array", array)
    let long = String(repeating: "x", count: 300)
    appbox_dictionary_set_string(root, long, long)
    return root
  }

  static let swiftValue = PropertyList.dictionary([
    "ascii": .string("plain"), "unicode": .string("café ☕ 𝄞 日本"), "data": .data(Data([0, 1, 2, 255])),
    "empty": .data(Data()), "small": .integer(7), "large": .integer(1 << 40), "negative": .integer(-5),
    "yes": .bool(true), "date": .date(Date(timeIntervalSinceReferenceDate: 700_000_000.5)),
    "array": .array((0..<20).map { .integer(Int64($0)) }),
    String(repeating: "x", count: 300): .string(String(repeating: "x", count: 300)),
  ])

  @Test func theCEncoderWritesWhatTheSwiftCodecReads() throws {
    let value = Self.cValue()
    defer { appbox_value_free(value) }
    var bytes: UnsafeMutablePointer<UInt8>?
    var length = 0
    #expect(appbox_plist_encode(value, &bytes, &length) == 0)
    defer { free(bytes) }
    let decoded = try PropertyList.decode(Data(bytes: bytes!, count: length))
    for (key, value) in Self.swiftValue.dictionary! {
      #expect(decoded[key] == value, "\(key)")
    }
    #expect(decoded.dictionary?.count == Self.swiftValue.dictionary?.count)
  }

  @Test func theCDecoderReadsWhatTheSwiftCodecWrites() throws {
    let bytes = Array(Self.swiftValue.binaryData())
    let value = try #require(appbox_plist_decode(bytes, bytes.count))
    defer { appbox_value_free(value) }
    #expect(String(cString: appbox_value_string(appbox_dictionary_get(value, "unicode"))) == "café ☕ 𝄞 日本")
    var length = 0
    let data = appbox_value_data(appbox_dictionary_get(value, "data"), &length)
    #expect(Array(UnsafeBufferPointer(start: data, count: length)) == [0, 1, 2, 255])
    #expect(appbox_value_integer(appbox_dictionary_get(value, "large")) == 1 << 40)
    #expect(appbox_value_integer(appbox_dictionary_get(value, "negative")) == -5)
    #expect(appbox_value_bool(appbox_dictionary_get(value, "yes")) == 1)
    #expect(appbox_value_double(appbox_dictionary_get(value, "date")) == 700_000_000.5)
    let array = appbox_dictionary_get(value, "array")
    #expect(appbox_value_count(array) == 20 && appbox_value_integer(appbox_array_get(array, 19)) == 19)
    // Re-encoded by C, it decodes to the same value in Swift.
    var again: UnsafeMutablePointer<UInt8>?
    var againLength = 0
    #expect(appbox_plist_encode(value, &again, &againLength) == 0)
    defer { free(again) }
    #expect(try PropertyList.decode(Data(bytes: again!, count: againLength)) == Self.swiftValue)
  }

  /// Every truncation and thousands of seeded byte flips of a valid list: the decoder returns
  /// a value or NULL, and never reads outside the buffer (the tests run under the debug
  /// allocator's guard; a crash fails the run). Deep nesting and shared-reference expansion
  /// are refused.
  @Test func theCDecoderSurvivesHostileBytes() throws {
    let valid = Array(Self.swiftValue.binaryData())
    for count in 0..<valid.count {
      let prefix = Array(valid.prefix(count))
      appbox_value_free(prefix.withUnsafeBufferPointer { appbox_plist_decode($0.baseAddress, count) })
    }
    var generator = SeededBytes(seed: 0x5EC1_7E4)
    for _ in 0..<5000 {
      var mutated = valid
      for _ in 0..<Int(generator.next() % 4 + 1) {
        mutated[Int(generator.next() % UInt64(mutated.count))] = UInt8(truncatingIfNeeded: generator.next())
      }
      appbox_value_free(appbox_plist_decode(mutated, mutated.count))
    }
    var deep = PropertyList.bool(true)
    for _ in 0..<40 { deep = .array([deep]) }
    let deepBytes = Array(deep.binaryData())
    #expect(appbox_plist_decode(deepBytes, deepBytes.count) == nil)
    // Nested arrays of 16 references to the next level: 16^12 values in a few hundred bytes.
    let bombBytes = sharedReferenceBomb(levels: 12, width: 16)
    #expect(bombBytes.count < 500)
    #expect(appbox_plist_decode(bombBytes, bombBytes.count) == nil)
    #expect(appbox_string_new("\u{FF}") != nil)
    #expect(
      [UInt8]([0xC3, 0x28, 0]).withUnsafeBufferPointer {
        appbox_string_new($0.baseAddress.map { UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self) })
      } == nil)
  }

  /// Keys Swift considers equal but the bytes do not (NFC and NFD "é"), as the C encoder
  /// writes them: refused as unknown, never a trap in the broker.
  @Test func keysThatDifferOnlyInNormalizationAreRefusedNotATrap() throws {
    let request = appbox_dictionary_new()!
    defer { appbox_value_free(request) }
    appbox_dictionary_set_string(request, "operation", "SecItemCopyMatching")
    let query = appbox_dictionary_new()!
    appbox_dictionary_set_string(query, "class", "genp")
    appbox_dictionary_set_bool(query, "caf\u{e9}", 1)
    appbox_dictionary_set_bool(query, "cafe\u{301}", 1)
    #expect(appbox_value_count(query) == 3)
    appbox_dictionary_set(request, "query", query)
    var bytes: UnsafeMutablePointer<UInt8>?
    var length = 0
    #expect(appbox_plist_encode(request, &bytes, &length) == 0)
    defer { free(bytes) }
    let fixture = Fixture()
    let reply = try Reply(fixture.service().answer(Array(UnsafeBufferPointer(start: bytes, count: length))))
    // A codec that keeps both keys leaves them to the unknown-key check; one that refuses
    // duplicate keys refuses the list. Either way: errSecParam.
    let message = reply.message ?? ""
    #expect(reply.status == AppboxSecItem.errSecParam, "\(message)")
    #expect(
      message.contains("Unknown key 'caf") || message.contains("not a valid property list"), "\(message)")
  }

  @Test func theCClientMakesTheFourCallsThroughABroker() throws {
    let fixture = Fixture()
    let broker = try fixture.broker()
    defer {
      appbox_secitem_use_descriptor(-1)
      broker.stop()
    }
    // A copy of the app's end: stopping the broker closes its own.
    let door = try #require(broker.appDescriptor).duplicate()
    defer { door.close() }
    appbox_secitem_use_descriptor(door.rawValue)
    let item = appbox_dictionary_new()!
    defer { appbox_value_free(item) }
    appbox_dictionary_set_string(item, AppboxSecItem.kSecClass, AppboxSecItem.kSecClassGenericPassword)
    appbox_dictionary_set_string(item, AppboxSecItem.kSecAttrService, "svc")
    appbox_dictionary_set_string(item, AppboxSecItem.kSecAttrAccount, "acct")
    let query = appbox_dictionary_new()!
    defer { appbox_value_free(query) }
    for key in [AppboxSecItem.kSecClass, AppboxSecItem.kSecAttrService, AppboxSecItem.kSecAttrAccount] {
      appbox_dictionary_set_string(query, key, appbox_value_string(appbox_dictionary_get(item, key)))
    }
    appbox_dictionary_set_data(item, AppboxSecItem.kSecValueData, "secret", 6)
    #expect(appbox_secitem_add(item, nil) == AppboxSecItem.errSecSuccess)
    #expect(appbox_secitem_add(item, nil) == AppboxSecItem.errSecDuplicateItem)
    #expect(String(cString: appbox_secitem_message()).contains("already holds"))
    appbox_dictionary_set_bool(query, AppboxSecItem.kSecReturnData, 1)
    var result: OpaquePointer?
    #expect(appbox_secitem_copy_matching(query, &result) == AppboxSecItem.errSecSuccess)
    var length = 0
    let bytes = appbox_value_data(result, &length)
    #expect(String(decoding: UnsafeBufferPointer(start: bytes, count: length), as: UTF8.self) == "secret")
    appbox_value_free(result)
    let changes = appbox_dictionary_new()!
    defer { appbox_value_free(changes) }
    appbox_dictionary_set_string(changes, AppboxSecItem.kSecAttrLabel, "Label")
    let match = appbox_dictionary_new()!
    defer { appbox_value_free(match) }
    appbox_dictionary_set_string(match, AppboxSecItem.kSecClass, AppboxSecItem.kSecClassGenericPassword)
    appbox_dictionary_set_string(match, AppboxSecItem.kSecAttrService, "svc")
    #expect(appbox_secitem_update(match, changes) == AppboxSecItem.errSecSuccess)
    #expect(String(cString: appbox_secitem_message()).isEmpty)
    #expect(appbox_secitem_delete(match) == AppboxSecItem.errSecSuccess)
    #expect(appbox_secitem_delete(match) == AppboxSecItem.errSecItemNotFound)
    #expect(
      String(cString: appbox_secitem_status_name(AppboxSecItem.errSecItemNotFound)) == "errSecItemNotFound")
    // Once the broker is gone, calls fail as I/O errors instead of hanging.
    broker.stop()
    #expect(appbox_secitem_copy_matching(query, nil) == AppboxSecItem.errSecIO)
  }
}

/// A small deterministic generator (xorshift), so a failure reproduces.
struct SeededBytes {
  var state: UInt64
  init(seed: UInt64) { state = seed }
  mutating func next() -> UInt64 {
    state ^= state << 13
    state ^= state >> 7
    state ^= state << 17
    return state
  }
}

/// A binary plist of `levels` arrays, each holding `width` references to the next one (written
/// by hand: a writer would expand it).
func sharedReferenceBomb(levels: Int, width: Int) -> [UInt8] {
  var bytes = Array("bplist00".utf8)
  var offsets: [Int] = []
  for level in 0..<levels {
    offsets.append(bytes.count)
    bytes += [0xAF, 0x10, UInt8(width)] + Array(repeating: UInt8(level + 1), count: width)
  }
  offsets.append(bytes.count)
  bytes.append(0x09)
  let table = bytes.count
  for offset in offsets { bytes += [UInt8(offset >> 8), UInt8(offset & 0xFF)] }
  bytes += [0, 0, 0, 0, 0, 0, 2, 1]
  bytes += [0, 0, 0, 0, 0, 0, 0, UInt8(levels + 1)]
  bytes += [0, 0, 0, 0, 0, 0, 0, 0]
  bytes += [0, 0, 0, 0, 0, 0, UInt8(table >> 8), UInt8(table & 0xFF)]
  return bytes
}
