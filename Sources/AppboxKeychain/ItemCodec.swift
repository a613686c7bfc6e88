import AppboxCrypto
import Foundation

// How an item is sealed in a row.
//
// The row keeps the identifying attributes (class, service, account, access group) in plain
// columns, because SQLite must enforce their uniqueness and select by them; they name an
// item, they are not secrets. The secret (`data`) and the descriptive attributes (label,
// comment) are one AES-256-GCM message under the keychain key, with a fresh nonce per write.
// Label and comment are sealed too because apps put hints in them ("PIN for the bank card");
// queries by label or comment therefore decrypt the app's candidate rows, which are few.
// The identifying attributes are the associated data, so a sealed value copied into another
// row (another account, another app's group) fails authentication instead of being served.

/// Appends length-prefixed fields; the inverse of `ByteReader`.
struct ByteWriter {
  private(set) var bytes: [UInt8] = []

  mutating func append(raw: some Sequence<UInt8>) { bytes.append(contentsOf: raw) }

  mutating func append(_ value: UInt8) { bytes.append(value) }

  mutating func append(_ value: UInt32) {
    withUnsafeBytes(of: value.bigEndian) { bytes.append(contentsOf: $0) }
  }

  mutating func append(_ value: Int64) {
    withUnsafeBytes(of: value.bigEndian) { bytes.append(contentsOf: $0) }
  }

  /// A 32-bit big-endian length, then the bytes.
  mutating func append(field: [UInt8]) {
    append(UInt32(field.count))
    bytes.append(contentsOf: field)
  }

  mutating func append(_ text: String) { append(field: Array(text.utf8)) }

  /// A presence byte (0 or 1), then the text when present.
  mutating func append(optional text: String?) {
    guard let text else { return append(UInt8(0)) }
    append(UInt8(1))
    append(text)
  }

  /// Milliseconds since 1970.
  mutating func append(_ date: Date) { append(Int64((date.timeIntervalSince1970 * 1000).rounded())) }
}

/// Reads what `ByteWriter` wrote; any truncation or impossible length is `.corrupt`.
struct ByteReader {
  private let bytes: [UInt8]
  private var offset = 0
  /// What is being read, for the error message ("keychain export").
  private let what: String

  init(_ bytes: [UInt8], what: String) {
    self.bytes = bytes
    self.what = what
  }

  var isAtEnd: Bool { offset == bytes.count }

  func corrupt(_ reason: String) -> KeychainError {
    KeychainError(.corrupt, "The \(what) is corrupt: \(reason)")
  }

  mutating func raw(_ count: Int) throws -> [UInt8] {
    guard count >= 0, bytes.count - offset >= count else { throw corrupt("it ends early") }
    defer { offset += count }
    return Array(bytes[offset..<offset + count])
  }

  mutating func uint8() throws -> UInt8 { try raw(1)[0] }

  mutating func uint32() throws -> UInt32 {
    try raw(4).reduce(0) { $0 << 8 | UInt32($1) }
  }

  mutating func int64() throws -> Int64 {
    Int64(bitPattern: try raw(8).reduce(0) { $0 << 8 | UInt64($1) })
  }

  mutating func field() throws -> [UInt8] { try raw(Int(try uint32())) }

  mutating func string() throws -> String {
    let bytes = try field()
    guard let text = String(validating: bytes, as: UTF8.self) else {
      throw corrupt("a text field is not UTF-8")
    }
    return text
  }

  mutating func optionalString() throws -> String? {
    switch try uint8() {
    case 0: return nil
    case 1: return try string()
    default: throw corrupt("a presence flag is neither 0 nor 1")
    }
  }

  mutating func date() throws -> Date { Date(timeIntervalSince1970: Double(try int64()) / 1000) }

  func expectEnd() throws {
    guard isAtEnd else { throw corrupt("\(bytes.count - offset) unexpected bytes at the end") }
  }
}

/// The sealed part of a row.
struct SealedSecret: Equatable {
  var data: [UInt8]
  var label: String?
  var comment: String?

  private static let version: UInt8 = 1

  /// The associated data binding a sealed value to its row's identity.
  static func associatedData(
    itemClass: KeychainItemClass, service: String, account: String, accessGroup: String
  ) -> [UInt8] {
    var writer = ByteWriter()
    writer.append(raw: Array("appbox keychain item v1".utf8))
    writer.append(itemClass.rawValue)
    writer.append(service)
    writer.append(account)
    writer.append(accessGroup)
    return writer.bytes
  }

  func seal(key: [UInt8], associatedData: [UInt8]) throws -> [UInt8] {
    var writer = ByteWriter()
    writer.append(Self.version)
    writer.append(field: data)
    writer.append(optional: label)
    writer.append(optional: comment)
    return try AESGCM.seal(writer.bytes, key: key, associatedData: associatedData)
  }

  /// Opens a row's sealed value; a wrong key or a value moved from another row is `.corrupt`.
  static func open(_ sealed: [UInt8], key: [UInt8], associatedData: [UInt8], item: String) throws
    -> SealedSecret
  {
    let plaintext: [UInt8]
    do {
      plaintext = try AESGCM.open(sealed, key: key, associatedData: associatedData)
    } catch let error as CryptoError where error.kind == .badData {
      throw KeychainError(
        .corrupt,
        "Cannot decrypt the keychain's \(item): \(error.reason) (the row was altered or the device key "
          + "is not the one it was written with)")
    }
    var reader = ByteReader(plaintext, what: "keychain's \(item)")
    guard try reader.uint8() == version else { throw reader.corrupt("unknown item format") }
    let secret = SealedSecret(
      data: try reader.field(), label: try reader.optionalString(), comment: try reader.optionalString())
    try reader.expectEnd()
    return secret
  }
}
