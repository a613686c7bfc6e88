import AppboxCore
import AppboxCrypto
import Foundation
import Glibc

/// The device key: 32 random bytes in `Keychains/device.key` (mode 0600, directory 0700),
/// made once per device and never rotated. Nothing uses it directly: HKDF-SHA256 derives one
/// key per purpose from it, so the item key, the export key and the public key identifier
/// are independent of each other.
struct DeviceKey {
  static let fileName = "device.key"
  static let byteCount = 32

  /// Encrypts the rows of `keychain.db`.
  let itemKey: [UInt8]
  /// Seals exports made for backups.
  let exportKey: [UInt8]
  /// Names the key in exports, so an import can tell "made on another device" from "corrupt"
  /// without trying to decrypt. One-way: it reveals nothing about the key.
  let identifier: [UInt8]
  /// Mixed into the key that wraps the device's file protection class keys, so that the
  /// passcode alone, without this device's key, unwraps nothing.
  let keybagKey: [UInt8]

  init(bytes: [UInt8]) throws {
    itemKey = try HKDF.derive(key: bytes, salt: [], info: Array("appbox keychain v1".utf8), length: 32)
    exportKey = try HKDF.derive(
      key: bytes, salt: [], info: Array("appbox keychain export v1".utf8), length: 32)
    identifier = try HKDF.derive(
      key: bytes, salt: [], info: Array("appbox keychain key id v1".utf8), length: 16)
    keybagKey = try HKDF.derive(key: bytes, salt: [], info: Array("appbox keybag v1".utf8), length: 32)
  }

  /// The key that seals items of a class: the item key and the class secret, through HKDF.
  func itemKey(classSecret: [UInt8]) throws -> [UInt8] {
    try HKDF.derive(
      key: itemKey + classSecret, salt: [], info: Array("appbox keychain item v2".utf8), length: 32)
  }

  /// Reads the key in `directory`, or returns nil when there is none yet. A key file that is
  /// not a regular file of exactly 32 bytes is `.corrupt`. Uses `openat(2)` with `O_NOFOLLOW`.
  static func load(in directory: FileDescriptor, displayPath: String) throws -> DeviceKey? {
    let fd: FileDescriptor
    do {
      fd = try directory.open(fileName, O_RDONLY | O_NOFOLLOW, displayPath: displayPath)
    } catch let error as SystemError where error.errno == .noEntry {
      return nil
    } catch let error as SystemError where error.errno == .tooManyLinks {
      throw KeychainError(.corrupt, "The device key is a symbolic link", path: displayPath)
    }
    let bytes = try fd.closeAfter { fd -> [UInt8] in
      let status = try fd.status()
      guard status.type == .regular else {
        throw KeychainError(.corrupt, "The device key is not a regular file", path: displayPath)
      }
      guard status.size == Int64(byteCount) else {
        throw KeychainError(
          .corrupt, "The device key is \(status.size) bytes instead of \(byteCount)", path: displayPath)
      }
      return try fd.readAll(limit: byteCount)
    }
    guard bytes.count == byteCount else {
      throw KeychainError(.corrupt, "The device key changed while it was read", path: displayPath)
    }
    return try DeviceKey(bytes: bytes)
  }

  /// Creates the key unless one exists, and returns the device's key either way. The bytes go
  /// to an `O_EXCL` temp file (0600) that is synced, then renamed into place with
  /// `RENAME_NOREPLACE`: a reader never sees a partial key, and when two processes race the
  /// first rename wins and the other adopts its key. Uses `openat(2)`, `fsync(2)` and
  /// `renameat2(2)`.
  static func loadOrCreate(in directory: FileDescriptor, displayPath: String) throws -> DeviceKey {
    if let key = try load(in: directory, displayPath: displayPath) { return key }
    let bytes = try SecureRandom.bytes(byteCount)
    let temp = ".\(fileName).tmp-\(UInt32.random(in: 0...UInt32.max))"
    var created = false
    do {
      let fd = try directory.open(
        temp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode: 0o600, displayPath: displayPath)
      created = true
      try fd.closeAfter { fd in
        try fd.writeAll(bytes)
        try fd.setPermissions(0o600)
        try fd.sync()
      }
      try directory.rename(temp, to: fileName, flags: .noReplace)
    } catch {
      if created { try? directory.remove(temp) }
      // Another process published its key first: that one is the device's key.
      if let error = error as? SystemError, error.errno == .exists,
        let key = try load(in: directory, displayPath: displayPath)
      {
        return key
      }
      throw error
    }
    try directory.sync()
    return try DeviceKey(bytes: bytes)
  }
}

/// The keychain directory, opened without following a symlink and held private (0700).
enum KeychainDirectory {
  /// Creates `path` (0700) if missing, tightens its mode if it is wider, and opens it.
  /// The parent must exist. Uses `mkdir(2)`, `openat(2)` with `O_NOFOLLOW` and `fchmod(2)`.
  static func open(_ path: String) throws -> FileDescriptor {
    if Glibc.mkdir(path, 0o700) != 0, Errno.current != .exists {
      throw SystemError("create directory", path: path)
    }
    let directory: FileDescriptor
    do {
      directory = try FileDescriptor.open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    } catch let error as SystemError where error.errno == .tooManyLinks || error.errno == .notDirectory {
      throw KeychainError(.corrupt, "The keychain directory is not a directory", path: path)
    }
    do {
      if try directory.status().permissions != 0o700 { try directory.setPermissions(0o700) }
    } catch {
      directory.close()
      throw error
    }
    return directory
  }
}
