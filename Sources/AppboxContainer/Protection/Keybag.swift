// The keybag: the device's file protection class keys, wrapped, in `Keychains/keybag.plist`.
//
// Each keyed class (complete, complete-unless-open, until-first-unlock) has a random 64-byte
// fscrypt master key. The keybag stores each one sealed with AES-256-GCM under the key
// encryption key
//
//     KEK = HKDF-SHA256(scrypt(passcode, salt, N, r, p) ‖ device keybag key,
//                       info "appbox keybag kek v1" ‖ UDID)
//
// where the device keybag key is derived from `Keychains/device.key` (the hardware UID's
// analogue: a copied keybag plus the passcode opens nothing without it). The associated data
// binds each sealed key to its class and its kernel identifier, so sealed keys cannot be
// swapped between classes. A wrong passcode fails authentication: that is the only check.
// Changing the passcode re-wraps the same keys under a new salt; clearing it wraps them under
// the empty passcode (files stay encrypted, and always available). No key is ever written
// unwrapped. The unlock attempts (failures and the time before which no attempt is allowed)
// are kept beside it in `unlock-attempts.plist`, written durably after every failure.

import AppboxCore
import AppboxCrypto
import AppboxPlist
import Foundation

/// The keybag file's content.
struct Keybag: Equatable {
  static let fileName = "keybag.plist"
  static let version: Int64 = 1

  struct WrappedKey: Equatable {
    var identifier: FscryptKeyIdentifier
    var sealed: [UInt8]
  }

  var passcodeSet: Bool
  var salt: [UInt8]
  var parameters: Scrypt.Parameters
  var keys: [ProtectionClass: WrappedKey]

  /// Wraps `keys` (each 64 bytes, with its kernel identifier) under `passcode`.
  static func wrapping(
    _ keys: [ProtectionClass: (key: [UInt8], identifier: FscryptKeyIdentifier)], passcode: [UInt8],
    passcodeSet: Bool, device: DeviceBinding, parameters: Scrypt.Parameters = .interactive
  ) throws -> Keybag {
    let salt = try SecureRandom.bytes(16)
    let kek = try keyEncryptionKey(passcode: passcode, salt: salt, parameters: parameters, device: device)
    var wrapped: [ProtectionClass: WrappedKey] = [:]
    for (protectionClass, entry) in keys {
      wrapped[protectionClass] = WrappedKey(
        identifier: entry.identifier,
        sealed: try AESGCM.seal(
          entry.key, key: kek, associatedData: associatedData(protectionClass, entry.identifier)))
    }
    return Keybag(passcodeSet: passcodeSet, salt: salt, parameters: parameters, keys: wrapped)
  }

  /// The class keys, or nil when `passcode` is wrong.
  func unwrap(passcode: [UInt8], device: DeviceBinding) throws -> [ProtectionClass: [UInt8]]? {
    let kek = try Self.keyEncryptionKey(
      passcode: passcode, salt: salt, parameters: parameters, device: device)
    var result: [ProtectionClass: [UInt8]] = [:]
    for (protectionClass, wrapped) in keys {
      do {
        result[protectionClass] = try AESGCM.open(
          wrapped.sealed, key: kek, associatedData: Self.associatedData(protectionClass, wrapped.identifier))
      } catch let error as CryptoError where error.kind == .badData {
        return nil
      }
    }
    return result
  }

  /// What binds the KEK to this device: its keybag key and UDID.
  struct DeviceBinding {
    var keybagKey: [UInt8]
    var udid: String
  }

  static func keyEncryptionKey(
    passcode: [UInt8], salt: [UInt8], parameters: Scrypt.Parameters, device: DeviceBinding
  ) throws -> [UInt8] {
    let stretched = try Scrypt.derive(password: passcode, salt: salt, parameters: parameters, length: 32)
    return try HKDF.derive(
      key: stretched + device.keybagKey, salt: [],
      info: Array("appbox keybag kek v1".utf8) + Array(device.udid.utf8),
      length: 32)
  }

  static func associatedData(_ protectionClass: ProtectionClass, _ identifier: FscryptKeyIdentifier)
    -> [UInt8]
  {
    Array("appbox class key v1 \(protectionClass.rawValue) ".utf8) + identifier.bytes
  }

  // MARK: File

  var propertyList: PropertyList {
    .dictionary([
      "Version": .integer(Self.version),
      "PasscodeSet": .bool(passcodeSet),
      "Salt": .data(Data(salt)),
      "ScryptN": .integer(Int64(parameters.n)), "ScryptR": .integer(Int64(parameters.r)),
      "ScryptP": .integer(Int64(parameters.p)),
      "Classes": .dictionary(
        Dictionary(
          uniqueKeysWithValues: keys.map { protectionClass, wrapped in
            (
              protectionClass.rawValue,
              PropertyList.dictionary([
                "Identifier": .data(Data(wrapped.identifier.bytes)),
                "WrappedKey": .data(Data(wrapped.sealed)),
              ])
            )
          })),
    ])
  }

  init(passcodeSet: Bool, salt: [UInt8], parameters: Scrypt.Parameters, keys: [ProtectionClass: WrappedKey]) {
    self.passcodeSet = passcodeSet
    self.salt = salt
    self.parameters = parameters
    self.keys = keys
  }

  init(propertyList plist: PropertyList, path: String) throws {
    func damaged(_ what: String) -> ContainerError {
      ContainerError(.invalidDevice, "The keybag '\(path)' is damaged: \(what)")
    }
    guard plist["Version"]?.integer == Self.version else { throw damaged("unknown version") }
    guard let passcodeSet = plist["PasscodeSet"]?.bool, let salt = plist["Salt"]?.data,
      let n = plist["ScryptN"]?.integer, let r = plist["ScryptR"]?.integer, let p = plist["ScryptP"]?.integer,
      n > 0, r > 0, p > 0, let classes = plist["Classes"]?.dictionary
    else { throw damaged("a field is missing") }
    var keys: [ProtectionClass: WrappedKey] = [:]
    for protectionClass in ProtectionClass.keyed {
      guard let entry = classes[protectionClass.rawValue], let identifier = entry["Identifier"]?.data,
        let id = FscryptKeyIdentifier(bytes: Array(identifier)), let sealed = entry["WrappedKey"]?.data
      else { throw damaged("the \(protectionClass.rawValue) key is missing") }
      keys[protectionClass] = WrappedKey(identifier: id, sealed: Array(sealed))
    }
    self.init(
      passcodeSet: passcodeSet, salt: Array(salt),
      parameters: Scrypt.Parameters(n: UInt64(n), r: UInt64(r), p: UInt64(p)), keys: keys)
  }

  /// The keybag in `directory` (the keychain directory), or nil when the device has none yet.
  static func load(in directory: String) throws -> Keybag? {
    let path = directory + "/" + fileName
    guard let bytes = FileManager.default.contents(atPath: path) else {
      if FileManager.default.fileExists(atPath: path) { throw SystemError("read", path: path) }
      return nil
    }
    let plist: PropertyList
    do {
      plist = try PropertyList.decode(bytes)
    } catch {
      throw ContainerError(.invalidDevice, "The keybag '\(path)' is not a valid property list: \(error)")
    }
    return try Keybag(propertyList: plist, path: path)
  }

  /// Writes the keybag durably (temp file, fsync, rename, fsync of the directory), 0600.
  func save(in directory: String) throws {
    try AtomicFile.write(propertyList.binaryData(), toPath: directory + "/" + Self.fileName, mode: 0o600)
  }
}

/// Failed unlock attempts and the delay they impose, kept on disk as the platform keeps them.
struct UnlockAttempts: Equatable {
  static let fileName = "unlock-attempts.plist"

  var failures: Int
  /// No attempt is allowed before this time.
  var notBefore: Date?

  /// The platform's schedule: the first four failures cost nothing, then a minute, five
  /// minutes, fifteen (twice), and an hour for every further one.
  static func delay(afterFailures failures: Int) -> TimeInterval {
    switch failures {
    case ..<5: return 0
    case 5: return 60
    case 6: return 5 * 60
    case 7, 8: return 15 * 60
    default: return 60 * 60
    }
  }

  static func load(in directory: String) throws -> UnlockAttempts {
    let path = directory + "/" + fileName
    guard let bytes = FileManager.default.contents(atPath: path) else {
      return UnlockAttempts(failures: 0, notBefore: nil)
    }
    guard let plist = try? PropertyList.decode(bytes), let failures = plist["Failures"]?.integer,
      failures >= 0
    else {
      throw ContainerError(.invalidDevice, "The unlock attempts file '\(path)' is damaged")
    }
    return UnlockAttempts(failures: Int(failures), notBefore: plist["NotBefore"]?.date)
  }

  func save(in directory: String) throws {
    var fields: [String: PropertyList] = ["Failures": .integer(Int64(failures))]
    if let notBefore { fields["NotBefore"] = .date(notBefore) }
    try AtomicFile.write(
      PropertyList.dictionary(fields).binaryData(), toPath: directory + "/" + Self.fileName, mode: 0o600)
  }
}
