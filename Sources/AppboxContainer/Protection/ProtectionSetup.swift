// What depends on the class keys, kept in line with the keybag, and what a confined app is
// told about them.

import AppboxCore
import AppboxKeychain
import Foundation
import Glibc

extension DeviceProtection {
  /// Brings everything that depends on the keys in line with the keybag; each step is
  /// idempotent, and the marker goes only when all are done. Needs the keys present.
  /// Returns how many when-passcode-set keychain items a cleared passcode deleted.
  @discardableResult
  func ensureSetup() throws -> Int {
    guard let keybag = try Keybag.load(in: keychainDirectory) else {
      _ = unlink(setupMarker)
      return 0
    }
    let writer = try ProtectedFileWriter(protection: self)
    defer { writer.close() }
    let keychain = try Keychain(directory: keychainDirectory)
    let classes = try FileDescriptor.open(
      keychainDirectory + "/" + Keychain.classSecretsDirectoryName, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    defer { classes.close() }
    for (secret, protectionClass) in [
      (KeychainClassSecret.whenUnlocked, ProtectionClass.complete), (.afterFirstUnlock, .untilFirstUnlock),
    ] {
      _ = try writer.raise(
        rawName: Array(secret.fileName.utf8), in: classes, to: protectionClass,
        displayPath: "Keychains/classes/\(secret.fileName)")
    }
    var deleted = 0
    let passcodeSecret = Array(KeychainClassSecret.whenPasscodeSet.fileName.utf8)
    if keybag.passcodeSet {
      if try classes.status(ofRawName: passcodeSecret) == nil {
        try keychain.createPasscodeSecret { bytes in
          let fd = try writer.createFile(rawName: passcodeSecret, in: classes, class: .complete, mode: 0o600)
          try fd.closeAfter { fd in
            try fd.writeAll(bytes)
            try fd.sync()
          }
          try classes.sync()
        }
      }
      try keychain.resealLegacyItems()
    } else {
      deleted = try keychain.forgetPasscodeSecret()
      if try classes.status(ofRawName: passcodeSecret) != nil {
        try classes.remove(rawName: passcodeSecret)
        try classes.sync()
      }
    }
    guard unlink(setupMarker) == 0 || Errno.current == .noEntry else {
      throw SystemError("remove", path: setupMarker)
    }
    return deleted
  }
}

extension Sandbox {
  /// The variable that tells a confined app whether protected data is available as it
  /// starts (the platform's `isProtectedDataAvailable`): `APPBOX_PROTECTED_DATA_AVAILABLE`
  /// is `1`, or `0` while the device is locked. It is a snapshot: the device may lock while
  /// the app runs, after which opening a protected file fails with ENOKEY.
  public static func protectionEnvironment(for home: Home) -> [String: String] {
    let available = (try? DeviceProtection(root: home.root).status().isProtectedDataAvailable) ?? true
    return [protectedDataVariable: available ? "1" : "0"]
  }

  public static let protectedDataVariable = "APPBOX_PROTECTED_DATA_AVAILABLE"
  /// Set to `1` for a prewarmed launch, as the platform sets it.
  public static let prewarmVariable = "ActivePrewarm"
}
