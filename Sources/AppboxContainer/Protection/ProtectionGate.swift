// Whether appbox may read an app's protected file now: decided from the file's class and the
// lock state, never from whether an open happens to succeed.
//
// The kernel keeps an inode's key while the inode is in use: when the device locks while an
// app holds a `complete` file open or mapped, the class key is only "incompletely removed",
// and a new open of that same file still reads its plaintext (from the page cache and the
// inode's key). So host-side readers (`files pull`, `export`, `backup`) cannot rely on ENOKEY:
// they open the file, read its fscrypt policy (the class key's identifier, which the keybag
// names), and refuse (69) a file whose class is not available now (`status.availableClasses`
// lists only keys that are fully present). A file that does not open at all (ENOKEY) is
// unavailable too. A policy of a key the keybag does not know (not a class) is not appbox's
// to judge: the file is read if it opens. The app itself may go on using what it holds open
// (accepted by design: a new open of a file that is still mapped after a lock).

import AppboxCore
import Glibc

/// The lock state, as readers of protected files need it.
public struct ProtectionGate: Sendable {
  /// The class of each class key, by kernel identifier.
  let classes: [FscryptKeyIdentifier: ProtectionClass]
  /// The classes whose keys are fully present now.
  let available: Set<ProtectionClass>

  /// Whether every class is available (or the device has no class keys): nothing to refuse.
  public var isOpen: Bool { classes.isEmpty || available.isSuperset(of: ProtectionClass.allCases) }

  init(protection: DeviceProtection) throws {
    let status = try protection.status()
    available = status.availableClasses
    classes =
      status.hasClassKeys
      ? Dictionary(
        try protection.keyIdentifiers().map { ($0.value, $0.key) }, uniquingKeysWith: { first, _ in first })
      : [:]
  }

  /// The class of the open regular file `fd` when it must not be read now, else nil.
  /// Uses `FS_IOC_GET_ENCRYPTION_POLICY_EX`.
  public func lockedClass(of fd: FileDescriptor) throws -> ProtectionClass? {
    guard !isOpen, let identifier = try fd.encryptionPolicy(), let protectionClass = classes[identifier]
    else {
      return nil
    }
    return available.contains(protectionClass) ? nil : protectionClass
  }

  /// Whether regular file `name` of `directory` must not be read now: its class is not
  /// available, or it does not even open (ENOKEY). Opens only encrypted entries.
  func mustNotRead(_ name: [UInt8], in directory: FileDescriptor) throws -> Bool {
    guard !isOpen, try directory.isEncrypted(rawName: name) else { return false }
    let fd: FileDescriptor
    do {
      fd = try directory.open(rawName: name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK)
    } catch let error as SystemError where error.errno == .keyNotAvailable {
      return true
    }
    return try fd.closeAfter { try lockedClass(of: $0) != nil }
  }
}

extension DeviceSession {
  /// The device's lock state for readers of protected files.
  public func protectionGate() throws -> ProtectionGate { try ProtectionGate(protection: protection) }
}
