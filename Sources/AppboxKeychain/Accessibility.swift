// Keychain data protection: when an item can be read.
//
// Every item has an accessibility class (SecItem's kSecAttrAccessible). Its secret is sealed
// under a key derived from the device key AND a class secret: 32 random bytes in
// `Keychains/classes/<secret>.key`. Once the device has a passcode, the file protection layer
// (AppboxContainer) keeps those files encrypted by the kernel under its file protection class
// keys:
//
//     when-unlocked.key        complete            (when-unlocked, when-unlocked-this-device-only)
//     after-first-unlock.key   until-first-unlock  (after-first-unlock, ...-this-device-only)
//     when-passcode-set.key    complete, and only while a passcode is set
//                                                 (when-passcode-set-this-device-only)
//
// So "the device is locked" reaches the keychain as the kernel's ENOKEY when it reads a class
// secret: the item cannot be opened, by appbox or anyone, and the request fails as
// `.interactionNotAllowed` (exit 69). Nothing here knows about passcodes or fscrypt.
//
// Rows written before accessibility existed (key version 0) are sealed under the device key
// alone and count as when-unlocked; setting a passcode re-seals them (`resealLegacyItems`).
// Clearing the passcode deletes the when-passcode-set items and their secret.
// The identifiers of the class secrets (one-way hashes) are kept in `class_secrets`, so an
// export can say which secret sealed each item and a restore can skip items sealed under a
// secret the device no longer has (a when-passcode-set secret from before a passcode change).

import AppboxCore
import AppboxCrypto
import Glibc

/// When a keychain item can be read (SecItem's `kSecAttrAccessible`).
public enum KeychainAccessibility: String, Sendable, CaseIterable {
  /// While the device is unlocked (the default).
  case whenUnlocked = "when-unlocked"
  /// From the first unlock after a restart until the next restart.
  case afterFirstUnlock = "after-first-unlock"
  /// While unlocked, and only while a passcode is set: clearing the passcode deletes it.
  case whenPasscodeSetThisDeviceOnly = "when-passcode-set-this-device-only"
  case whenUnlockedThisDeviceOnly = "when-unlocked-this-device-only"
  case afterFirstUnlockThisDeviceOnly = "after-first-unlock-this-device-only"

  /// Whether the item may never be restored to another device.
  public var isThisDeviceOnly: Bool { rawValue.hasSuffix("-this-device-only") }

  /// The class secret that seals items of this class.
  public var classSecret: KeychainClassSecret {
    switch self {
    case .whenUnlocked, .whenUnlockedThisDeviceOnly: return .whenUnlocked
    case .afterFirstUnlock, .afterFirstUnlockThisDeviceOnly: return .afterFirstUnlock
    case .whenPasscodeSetThisDeviceOnly: return .whenPasscodeSet
    }
  }

  /// The platform's name for it.
  public var platformName: String {
    switch self {
    case .whenUnlocked: return "kSecAttrAccessibleWhenUnlocked"
    case .afterFirstUnlock: return "kSecAttrAccessibleAfterFirstUnlock"
    case .whenPasscodeSetThisDeviceOnly: return "kSecAttrAccessibleWhenPasscodeSetThisDeviceOnly"
    case .whenUnlockedThisDeviceOnly: return "kSecAttrAccessibleWhenUnlockedThisDeviceOnly"
    case .afterFirstUnlockThisDeviceOnly: return "kSecAttrAccessibleAfterFirstUnlockThisDeviceOnly"
    }
  }
}

/// The random secrets, one per protection level, that item keys are derived from.
public enum KeychainClassSecret: String, Sendable, CaseIterable {
  case whenUnlocked = "when-unlocked"
  case afterFirstUnlock = "after-first-unlock"
  case whenPasscodeSet = "when-passcode-set"

  /// The file in `Keychains/classes/`.
  public var fileName: String { rawValue + ".key" }

  /// The secrets every keychain has from the start (the passcode one exists only while a
  /// passcode is set, made by `Keychain.createPasscodeSecret`).
  static let permanent: [KeychainClassSecret] = [.whenUnlocked, .afterFirstUnlock]
}

extension Keychain {
  /// The directory of the class secrets, inside the keychain directory.
  public static let classSecretsDirectoryName = "classes"
  /// Bytes in a class secret.
  public static let classSecretByteCount = 32

  /// The path of `secret`'s file for the keychain in `directory`.
  public static func classSecretPath(_ secret: KeychainClassSecret, keychainDirectory directory: String)
    -> String
  {
    directory + "/" + classSecretsDirectoryName + "/" + secret.fileName
  }

  /// A one-way name for a class secret's bytes.
  static func identifier(ofClassSecret bytes: [UInt8]) throws -> [UInt8] {
    try HKDF.derive(key: bytes, salt: [], info: Array("appbox keychain class secret id v1".utf8), length: 16)
  }

  /// Opens (creating, 0700, when it is missing) the class secrets directory, with `O_NOFOLLOW`.
  /// Opened first and created only on ENOENT: the broker opens it for every request.
  func openClassSecretsDirectory() throws -> FileDescriptor {
    let path = directory + "/" + Self.classSecretsDirectoryName
    func open() throws -> FileDescriptor {
      try FileDescriptor.open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    }
    do {
      do {
        return try open()
      } catch let error as SystemError where error.errno == .noEntry {
        if Glibc.mkdir(path, 0o700) != 0, Errno.current != .exists {
          throw SystemError("create directory", path: path)
        }
        return try open()
      }
    } catch let error as SystemError where error.errno == .tooManyLinks || error.errno == .notDirectory {
      throw KeychainError(.corrupt, "The keychain's class secrets directory is not a directory", path: path)
    }
  }

  /// Creates the permanent class secrets that are missing, as plain 0600 files (the file
  /// protection layer encrypts them once a passcode is set). A missing secret that items
  /// were sealed under is `.corrupt`: a new one must not hide their loss.
  func preparePermanentClassSecrets() throws {
    let classes = try openClassSecretsDirectory()
    defer { classes.close() }
    for secret in KeychainClassSecret.permanent where try classes.statusIfPresent(of: secret.fileName) == nil
    {
      let used = try database.scalar(
        "SELECT count(*) FROM items WHERE key_version = 1 AND accessible IN (\(Self.sqlList(secret)))")
      guard used == .integer(0) else {
        throw KeychainError(
          .corrupt,
          "The keychain's \(secret.rawValue) class secret is missing but items were sealed under it",
          path: Self.classSecretPath(secret, keychainDirectory: directory))
      }
      let bytes = try SecureRandom.bytes(Self.classSecretByteCount)
      try AtomicFile.write(bytes, to: secret.fileName, in: classes, mode: 0o600)
      try recordIdentifier(of: secret, bytes: bytes)
    }
  }

  /// Makes a fresh when-passcode-set secret (deleting the items sealed under any older one)
  /// and hands its bytes to `store`, which must write them durably, encrypted, to
  /// `classSecretPath(.whenPasscodeSet, ...)`. Called when a passcode is set.
  public func createPasscodeSecret(_ store: ([UInt8]) throws -> Void) throws {
    let bytes = try SecureRandom.bytes(Self.classSecretByteCount)
    try database.inTransaction(.immediate) {
      try deleteItems(sealedUnder: .whenPasscodeSet)
      try store(bytes)
      try recordIdentifier(of: .whenPasscodeSet, bytes: bytes)
    }
    classSecrets[.whenPasscodeSet] = nil
  }

  /// Deletes every when-passcode-set item and forgets that secret's identifier; returns how
  /// many items went. The caller then removes the secret's file. Called when the passcode is
  /// cleared.
  @discardableResult
  public func forgetPasscodeSecret() throws -> Int {
    let count = try database.inTransaction(.immediate) { () throws -> Int in
      let count = try deleteItems(sealedUnder: .whenPasscodeSet)
      try database.execute(
        "DELETE FROM class_secrets WHERE name = ?1", .text(KeychainClassSecret.whenPasscodeSet.rawValue))
      return count
    }
    classSecrets[.whenPasscodeSet] = nil
    return count
  }

  /// Re-seals the rows written before accessibility classes existed under their class key
  /// (when-unlocked); returns how many. Setting a passcode calls it, while the device is
  /// still unlocked, so that no row is readable through the device key alone afterwards.
  @discardableResult
  public func resealLegacyItems() throws -> Int {
    try database.inTransaction(.immediate) {
      let statement = try database.prepare("SELECT \(Row.columns) FROM items WHERE key_version = 0")
      let rows = try statement.rows { try Row($0, path: database.path) }
      for row in rows {
        let secret = try SealedSecret.open(
          row.sealed, key: key.itemKey, associatedData: row.associatedData,
          item: row.item(includingData: false).summary)
        let sealed = try secret.seal(
          key: try itemKey(for: row.accessibility), associatedData: row.currentAssociatedData)
        try database.execute(
          "UPDATE items SET sealed = ?1, key_version = 1, sealed_group = NULL WHERE id = ?2", .blob(sealed),
          .integer(row.id))
      }
      return rows.count
    }
  }

  @discardableResult
  func deleteItems(sealedUnder secret: KeychainClassSecret) throws -> Int {
    try database.execute("DELETE FROM items WHERE accessible IN (\(Self.sqlList(secret)))")
    return database.changes
  }

  /// The accessibility classes sealed under `secret`, as an SQL list of literals (the values
  /// are this enum's constants, never input).
  static func sqlList(_ secret: KeychainClassSecret) -> String {
    KeychainAccessibility.allCases.filter { $0.classSecret == secret }.map { "'\($0.rawValue)'" }
      .joined(separator: ", ")
  }

  func recordIdentifier(of secret: KeychainClassSecret, bytes: [UInt8]) throws {
    try database.execute(
      "INSERT OR REPLACE INTO class_secrets(name, identifier) VALUES (?1, ?2)", .text(secret.rawValue),
      .blob(try Self.identifier(ofClassSecret: bytes)))
  }

  /// The recorded identifier of `secret`, or nil when this keychain has none.
  func recordedIdentifier(of secret: KeychainClassSecret) throws -> [UInt8]? {
    if case .blob(let bytes) = try database.scalar(
      "SELECT identifier FROM class_secrets WHERE name = ?1", .text(secret.rawValue))
    {
      return bytes
    }
    return nil
  }

  /// Forgets the class secrets read so far, so the next call reads them again: a long-lived
  /// keychain (the broker serving a running app) calls it before each request, so that a
  /// device locked meanwhile makes its items unavailable (the kernel refuses the read).
  public func forgetClassSecrets() {
    classSecrets.removeAll()
  }

  /// The key that seals items of `accessibility`: HKDF of the device's item key and the
  /// class secret. Reading the secret fails as `.interactionNotAllowed` while the device is
  /// locked (the kernel answers ENOKEY), and as `.passcodeRequired` for the passcode class
  /// when no passcode is set.
  func itemKey(for accessibility: KeychainAccessibility) throws -> [UInt8] {
    let secret = try classSecret(accessibility.classSecret, for: accessibility)
    return try key.itemKey(classSecret: secret)
  }

  private func classSecret(_ secret: KeychainClassSecret, for accessibility: KeychainAccessibility) throws
    -> [UInt8]
  {
    if let cached = classSecrets[secret] { return cached }
    let path = Self.classSecretPath(secret, keychainDirectory: directory)
    let classes = try openClassSecretsDirectory()
    defer { classes.close() }
    let fd: FileDescriptor
    do {
      fd = try classes.open(secret.fileName, O_RDONLY | O_NOFOLLOW, displayPath: path)
    } catch let error as SystemError where error.errno == .keyNotAvailable {
      throw KeychainError(
        .interactionNotAllowed,
        "Keychain items that are \(accessibility.rawValue) cannot be read or written while the device is "
          + "locked; unlock it first")
    } catch let error as SystemError where error.errno == .noEntry && secret == .whenPasscodeSet {
      throw KeychainError(
        .passcodeRequired,
        "Keychain items that are \(accessibility.rawValue) need a device passcode; set one with "
          + "'appbox device passcode set'")
    }
    let bytes = try fd.closeAfter { fd -> [UInt8] in
      guard try fd.status().type == .regular else {
        throw KeychainError(.corrupt, "A keychain class secret is not a regular file", path: path)
      }
      return try fd.readAll(limit: Self.classSecretByteCount)
    }
    guard bytes.count == Self.classSecretByteCount else {
      throw KeychainError(
        .corrupt, "A keychain class secret is \(bytes.count) bytes instead of \(Self.classSecretByteCount)",
        path: path)
    }
    if try recordedIdentifier(of: secret) == nil { try recordIdentifier(of: secret, bytes: bytes) }
    classSecrets[secret] = bytes
    return bytes
  }
}
