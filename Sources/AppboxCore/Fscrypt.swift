// The kernel's per-file encryption (fscrypt, ext4 and f2fs), reached through ioctls.
//
// A master key (64 random bytes) goes into the file system's own keyring with
// FS_IOC_ADD_ENCRYPTION_KEY, which answers with the key's identifier (a hash of the key). An
// empty directory given a v2 policy naming that identifier encrypts every file created in it
// (contents AES-256-XTS, names AES-256-CTS); a file keeps its encryption wherever it is later
// renamed. After FS_IOC_REMOVE_ENCRYPTION_KEY, opening such a file fails with ENOKEY for every
// process; its name and size stay visible. Files still open when the key is removed stay
// usable: the kernel reports "files busy" and leaves the key "incompletely removed" until
// they close and a later removal finishes the job.

import CSystem
import Glibc

/// The identifier the kernel gives a master key: 16 bytes, derived from the key (one-way).
public struct FscryptKeyIdentifier: Hashable, Sendable, CustomStringConvertible {
  public let bytes: [UInt8]

  public init?(bytes: [UInt8]) {
    guard bytes.count == Int(APPBOX_FSCRYPT_IDENTIFIER_SIZE) else { return nil }
    self.bytes = bytes
  }

  public var description: String { bytes.map { String(format: "%02x", $0) }.joined() }
}

/// Where a master key stands in the file system's keyring.
public enum FscryptKeyStatus: Sendable, Equatable {
  case absent
  case present
  /// Removed, but files that were open then still use it; new opens fail.
  case incompletelyRemoved
}

/// What removing a key achieved.
public struct FscryptKeyRemoval: Sendable, Equatable {
  /// Some files were still open: they keep working until closed; the key is "incompletely
  /// removed" and a later removal finishes it.
  public var filesBusy: Bool
}

/// Whether a file system can hold encrypted files, and if not, why.
public enum FscryptSupport: Sendable, Equatable {
  case supported
  /// The file system has fscrypt but its `encrypt` feature is off (ext4 made without it).
  case featureDisabled
  /// The file system has no fscrypt at all (tmpfs, overlayfs, xfs, ...).
  case unsupportedFileSystem
}

/// The master key size fscrypt takes (AES-256-XTS needs 64 bytes).
public let fscryptKeyByteCount = Int(APPBOX_FSCRYPT_KEY_SIZE)

extension FileDescriptor {
  /// Whether the file system holding this descriptor supports fscrypt. Uses
  /// `ioctl(FS_IOC_GET_ENCRYPTION_POLICY_EX)`, which answers ENODATA for an unencrypted
  /// directory on a supporting file system, EOPNOTSUPP when the feature is off, and ENOTTY
  /// where the file system has no fscrypt.
  public func encryptionSupport() -> FscryptSupport {
    var identifier = [UInt8](repeating: 0, count: Int(APPBOX_FSCRYPT_IDENTIFIER_SIZE))
    if appbox_fscrypt_get_policy(rawValue, &identifier) >= 0 { return .supported }
    switch Errno.current {
    case .notSupported: return .featureDisabled
    case .invalidArgument: return .supported  // a v1 policy: encryption works here
    default: return .unsupportedFileSystem
    }
  }

  /// Adds a 64-byte master key to the file system's keyring and returns its identifier.
  /// Adding a key that is present (or incompletely removed) again is fine: it is revived.
  /// Uses `ioctl(FS_IOC_ADD_ENCRYPTION_KEY)`.
  public func addEncryptionKey(_ key: [UInt8]) throws -> FscryptKeyIdentifier {
    precondition(key.count == fscryptKeyByteCount, "fscrypt master keys are 64 bytes")
    var identifier = [UInt8](repeating: 0, count: Int(APPBOX_FSCRYPT_IDENTIFIER_SIZE))
    guard appbox_fscrypt_add_key(rawValue, key, &identifier) == 0 else {
      throw SystemError("add an encryption key to the file system")
    }
    return FscryptKeyIdentifier(bytes: identifier)!
  }

  /// Removes a master key from the file system's keyring. A key that is absent already is
  /// not an error. When another user also added the key, their claims are removed too if
  /// this process may (root). Uses `ioctl(FS_IOC_REMOVE_ENCRYPTION_KEY)` and
  /// `ioctl(FS_IOC_REMOVE_ENCRYPTION_KEY_ALL_USERS)`.
  @discardableResult
  public func removeEncryptionKey(_ identifier: FscryptKeyIdentifier) throws -> FscryptKeyRemoval {
    var flags: UInt32 = 0
    if appbox_fscrypt_remove_key(rawValue, identifier.bytes, 0, &flags) != 0 {
      // ENOKEY: this user holds no claim on the key (it is absent, or only another user's).
      guard Errno.current == .keyNotAvailable else { throw SystemError("remove an encryption key") }
      if try encryptionKeyStatus(identifier) == .absent { return FscryptKeyRemoval(filesBusy: false) }
      flags = APPBOX_FSCRYPT_REMOVAL_OTHER_USERS
    }
    if flags & APPBOX_FSCRYPT_REMOVAL_OTHER_USERS != 0 {
      guard appbox_fscrypt_remove_key(rawValue, identifier.bytes, 1, &flags) == 0 else {
        throw SystemError("remove an encryption key added by another user")
      }
    }
    return FscryptKeyRemoval(filesBusy: flags & APPBOX_FSCRYPT_REMOVAL_FILES_BUSY != 0)
  }

  /// The key's status in the file system's keyring. Uses
  /// `ioctl(FS_IOC_GET_ENCRYPTION_KEY_STATUS)`.
  public func encryptionKeyStatus(_ identifier: FscryptKeyIdentifier) throws -> FscryptKeyStatus {
    var status: UInt32 = 0
    guard appbox_fscrypt_key_status(rawValue, identifier.bytes, &status) == 0 else {
      throw SystemError("read an encryption key's status")
    }
    switch Int32(status) {
    case APPBOX_FSCRYPT_KEY_PRESENT: return .present
    case APPBOX_FSCRYPT_KEY_INCOMPLETELY_REMOVED: return .incompletelyRemoved
    default: return .absent
    }
  }

  /// Gives this empty directory a v2 policy (AES-256-XTS contents, AES-256-CTS names) under
  /// the key `identifier`, which must be present. Uses `ioctl(FS_IOC_SET_ENCRYPTION_POLICY)`.
  public func setEncryptionPolicy(_ identifier: FscryptKeyIdentifier) throws {
    guard appbox_fscrypt_set_policy(rawValue, identifier.bytes) == 0 else {
      throw SystemError("set an encryption policy")
    }
  }

  /// The key identifier of this file's v2 policy, or nil when it is not encrypted. A regular
  /// file can be opened (and so asked) only while its key is present. Uses
  /// `ioctl(FS_IOC_GET_ENCRYPTION_POLICY_EX)`.
  public func encryptionPolicy() throws -> FscryptKeyIdentifier? {
    var identifier = [UInt8](repeating: 0, count: Int(APPBOX_FSCRYPT_IDENTIFIER_SIZE))
    switch appbox_fscrypt_get_policy(rawValue, &identifier) {
    case 1: return FscryptKeyIdentifier(bytes: identifier)
    case 0: return nil
    default:
      let errno = Errno.current
      if errno == .notSupported || errno == .notTTY { return nil }
      throw SystemError("read the encryption policy", errno: errno)
    }
  }

  /// Whether entry `name` of this directory is encrypted, without opening it (so it works
  /// while the key is absent) or following a symlink. Uses `statx(2)`.
  public func isEncrypted(rawName name: [UInt8]) throws -> Bool {
    let result = withCName(name) { appbox_is_encrypted(rawValue, $0) }
    guard result >= 0 else { throw SystemError("stat", path: String(decoding: name, as: UTF8.self)) }
    return result == 1
  }

  /// The ranges of this file that hold data (holes left out), up to `size`. Uses `lseek(2)`
  /// with SEEK_DATA and SEEK_HOLE; a file system without them reports one range.
  public func dataRanges(size: Int64) throws -> [Range<Int64>] {
    var ranges: [Range<Int64>] = []
    var offset: Int64 = 0
    while offset < size {
      let start = appbox_seek_data(rawValue, offset)
      if start < 0 {
        if Errno.current == .noDeviceOrAddress { break }  // only a hole remains
        if Errno.current == .invalidArgument { return [0..<size] }
        throw SystemError("find the data of a file")
      }
      if start >= size { break }
      var end = appbox_seek_hole(rawValue, start)
      if end < 0 { end = size }
      ranges.append(start..<min(end, size))
      offset = end
    }
    return ranges
  }
}
