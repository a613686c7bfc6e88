// The keybag of an encrypted iOS device backup (Manifest.plist's BackupKeyBag), and the key
// derivation from the backup password.
//
// Format: a sequence of TLV records (4-byte ASCII tag, 4-byte big-endian length, value).
// The keybag's own records come first (VERS, TYPE, UUID, HMCK, WRAP, SALT, ITER, and since
// iOS 10.2 DPWT, DPIC, DPSL); then one group per protection class, each opened by a UUID:
// CLAS (the class number), WRAP (2: wrapped with the password key), KTYP, WPKY (the class
// key, AES-wrapped: 40 bytes), optionally PBKY.
//
// Unlocking: key = PBKDF2-SHA256(password, DPSL, DPIC, 32) when DPSL is there, then
// key = PBKDF2-SHA1(key, SALT, ITER, 32); each class key whose WRAP has bit 2 is the RFC 3394
// unwrap of its WPKY under that key. A failed integrity check of the unwrap is a wrong
// password (exit 77), never bad data.
//
// Invariants (the keybag is untrusted): records stay inside the bytes; at most 64 KiB, 64
// class groups, one group per class; salts 1-64 bytes; the iteration counts are capped
// (`maximumRounds`), so a keybag cannot ask for unbounded work; anything else malformed is a
// `.refusedArchive` error naming what is wrong (exit 65), which the caller prefixes with
// the file.

import AppboxCore
import AppboxCrypto
import AppboxRepository
import Foundation

struct DeviceBackupKeybag: Equatable {
  struct ClassKey: Equatable {
    var protectionClass: UInt32
    var wrap: UInt32
    var keyType: UInt32
    var uuid: [UInt8]
    var wrappedKey: [UInt8]
  }

  var version: UInt32 = 4
  var type: UInt32 = 1
  var uuid: [UInt8] = []
  var hmck: [UInt8] = []
  var wrap: UInt32 = 0
  var salt: [UInt8] = []
  var iterations: UInt32 = 0
  var passwordSalt: [UInt8]?
  var passwordIterations: UInt32?
  var classKeys: [ClassKey] = []

  /// The most rounds each PBKDF2 step may ask for (iOS writes 10,000,000 and 10,000).
  static let maximumRounds: (first: UInt32, second: UInt32) = (20_000_000, 10_000_000)
  /// iOS's rounds, which an export writes unless told otherwise.
  static let deviceRounds: (first: UInt32, second: UInt32) = (10_000_000, 10_000)
  private static let passcodeWrap: UInt32 = 2

  static func failure(_ what: String) -> BackupError { BackupError(.refusedArchive, "the keybag \(what)") }

  /// Parses a keybag's bytes.
  static func parse(_ bytes: [UInt8]) throws -> DeviceBackupKeybag {
    guard bytes.count <= 64 << 10 else { throw failure("is larger than 64 KiB") }
    var keybag = DeviceBackupKeybag()
    var sawUUID = false
    var sawWrap = false
    var current: ClassKey?
    var seenClasses: Set<UInt32> = []
    func finishClass() throws {
      guard let key = current else { return }
      guard key.wrappedKey.count == 40 || key.wrap & passcodeWrap == 0 else {
        throw failure("holds a class key of \(key.wrappedKey.count) bytes (40 expected)")
      }
      guard seenClasses.insert(key.protectionClass).inserted else {
        throw failure("holds class \(key.protectionClass) twice")
      }
      keybag.classKeys.append(key)
      guard keybag.classKeys.count <= 64 else { throw failure("holds more than 64 classes") }
      current = nil
    }
    var position = 0
    while position < bytes.count {
      guard bytes.count - position >= 8 else { throw failure("ends inside a record header") }
      let tag = String(decoding: bytes[position..<position + 4], as: UTF8.self)
      let length = bytes[position + 4..<position + 8].reduce(0) { $0 << 8 | Int($1) }
      guard length <= bytes.count - position - 8 else {
        throw failure("has a record '\(tag)' longer than the keybag")
      }
      let value = Array(bytes[position + 8..<position + 8 + length])
      position += 8 + length
      func number() throws -> UInt32 {
        guard value.count == 4 else { throw failure("has a '\(tag)' of \(value.count) bytes (4 expected)") }
        return value.reduce(0) { $0 << 8 | UInt32($1) }
      }
      if tag == "UUID" {
        if !sawUUID {
          sawUUID = true
          keybag.uuid = value
        } else {
          try finishClass()
          current = ClassKey(protectionClass: 0, wrap: 0, keyType: 0, uuid: value, wrappedKey: [])
        }
        continue
      }
      if current != nil {
        switch tag {
        case "CLAS": current!.protectionClass = try number()
        case "WRAP": current!.wrap = try number()
        case "KTYP": current!.keyType = try number()
        case "WPKY": current!.wrappedKey = value
        default: break  // PBKY (a public key) and anything newer: not needed to unlock
        }
        continue
      }
      switch tag {
      case "VERS": keybag.version = try number()
      case "TYPE": keybag.type = try number()
      case "HMCK": keybag.hmck = value
      case "WRAP" where !sawWrap:
        sawWrap = true
        keybag.wrap = try number()
      case "SALT": keybag.salt = value
      case "ITER": keybag.iterations = try number()
      case "DPSL": keybag.passwordSalt = value
      case "DPIC": keybag.passwordIterations = try number()
      default: break
      }
    }
    try finishClass()
    guard (1...64).contains(keybag.salt.count) else { throw failure("has no usable SALT") }
    guard (1...maximumRounds.second).contains(keybag.iterations) else {
      throw failure(
        "asks for \(keybag.iterations) PBKDF2-SHA1 rounds (1 to \(maximumRounds.second) accepted)")
    }
    if let salt = keybag.passwordSalt {
      guard (1...64).contains(salt.count) else { throw failure("has no usable DPSL") }
      guard let rounds = keybag.passwordIterations, (1...maximumRounds.first).contains(rounds) else {
        throw failure(
          "asks for \(keybag.passwordIterations ?? 0) PBKDF2-SHA256 rounds (1 to \(maximumRounds.first) accepted)"
        )
      }
    }
    guard keybag.classKeys.contains(where: { $0.wrap & passcodeWrap != 0 }) else {
      throw failure("holds no class key wrapped with the password")
    }
    return keybag
  }

  /// The key the password derives (PBKDF2-SHA256 then PBKDF2-SHA1, or the second alone).
  func passwordKey(_ password: [UInt8]) throws -> [UInt8] {
    var key = password
    if let salt = passwordSalt, let rounds = passwordIterations {
      key = try PBKDF2.derive(password: password, salt: salt, iterations: rounds, hash: .sha256, length: 32)
    }
    return try PBKDF2.derive(password: key, salt: salt, iterations: iterations, hash: .sha1, length: 32)
  }

  /// The class keys by class number; nil when the password is wrong.
  func unlock(password: [UInt8]) throws -> [UInt32: [UInt8]]? {
    let key = try passwordKey(password)
    var keys: [UInt32: [UInt8]] = [:]
    for classKey in classKeys where classKey.wrap & Self.passcodeWrap != 0 {
      guard let unwrapped = try AESKeyWrap.unwrap(classKey.wrappedKey, with: key), unwrapped.count == 32
      else {
        return nil
      }
      keys[classKey.protectionClass] = unwrapped
    }
    return keys
  }

  /// A new backup keybag for `password` with a fresh random key for each class 1-11, and
  /// those keys by class.
  static func make(password: [UInt8], rounds: (first: UInt32, second: UInt32)) throws -> (
    keybag: DeviceBackupKeybag, keys: [UInt32: [UInt8]]
  ) {
    var keybag = DeviceBackupKeybag()
    keybag.uuid = try SecureRandom.bytes(16)
    keybag.hmck = try SecureRandom.bytes(40)
    keybag.salt = try SecureRandom.bytes(20)
    keybag.iterations = rounds.second
    keybag.passwordSalt = try SecureRandom.bytes(20)
    keybag.passwordIterations = rounds.first
    let key = try keybag.passwordKey(password)
    var keys: [UInt32: [UInt8]] = [:]
    for protectionClass in UInt32(1)...11 {
      let classKey = try SecureRandom.bytes(32)
      keys[protectionClass] = classKey
      keybag.classKeys.append(
        ClassKey(
          protectionClass: protectionClass, wrap: passcodeWrap, keyType: 0, uuid: try SecureRandom.bytes(16),
          wrappedKey: try AESKeyWrap.wrap(classKey, with: key)))
    }
    return (keybag, keys)
  }

  /// The TLV bytes, in the order iOS writes them (readers count on each class group being
  /// exactly UUID, CLAS, WRAP, KTYP, WPKY).
  func encoded() -> [UInt8] {
    var out: [UInt8] = []
    func record(_ tag: String, _ value: [UInt8]) {
      out += Array(tag.utf8)
      out += [24, 16, 8, 0].map { UInt8(truncatingIfNeeded: value.count >> $0) }
      out += value
    }
    func number(_ value: UInt32) -> [UInt8] {
      [24, 16, 8, 0].map { UInt8(truncatingIfNeeded: value >> UInt32($0)) }
    }
    record("VERS", number(version))
    record("TYPE", number(type))
    record("UUID", uuid)
    record("HMCK", hmck)
    record("WRAP", number(wrap))
    record("SALT", salt)
    record("ITER", number(iterations))
    if let passwordSalt, let passwordIterations {
      record("DPWT", number(1))
      record("DPIC", number(passwordIterations))
      record("DPSL", passwordSalt)
    }
    for key in classKeys {
      record("UUID", key.uuid)
      record("CLAS", number(key.protectionClass))
      record("WRAP", number(key.wrap))
      record("KTYP", number(key.keyType))
      record("WPKY", key.wrappedKey)
    }
    return out
  }
}
