// The device passcode and lock, on the kernel's fscrypt.
//
// State lives in two places, and the kernel is the truth for "locked":
// - on disk, `Keychains/keybag.plist` holds the class keys wrapped under the passcode (see
//   Keybag.swift), and `Keychains/unlock-attempts.plist` the failed attempts;
// - in the file system's keyring, the class keys that are present right now. The device is
//   locked when a passcode is set and the `complete` key is not present; until-first-unlock
//   data is available when its key is present. A real restart or unmount empties the keyring,
//   which is a reboot as far as appbox is concerned.
//
// Operations (each under the root's lock):
// - passcode set: new random keys (or, after a clear, the old ones), into the keyring, wrapped
//   under the passcode; then `ensureSetup`: a staging directory per class in
//   `.appbox/protection/<class>/` carrying that class's v2 policy, the keychain's class secrets
//   protected (when-unlocked → complete, after-first-unlock → until-first-unlock, a fresh
//   when-passcode-set secret → complete), legacy keychain rows re-sealed. A marker file
//   `.appbox/protection/setup-pending` covers the steps after the keybag is written: whoever
//   finds it (recovery, the next unlock) runs `ensureSetup` again; every step is idempotent.
// - passcode change: unwrap with the old passcode, re-wrap under the new one. No file changes.
// - passcode clear: re-wrap under the empty passcode (protected files stay encrypted and are
//   always available); delete when-passcode-set keychain items and their secret.
// - lock: remove the complete and complete-unless-open keys. Files still open keep working
//   (the kernel reports them busy and leaves the key "incompletely removed"; the removal is
//   retried, and so finished, by later appbox commands once they are closed).
// - unlock: honour the delay, unwrap (a wrong passcode counts a failure: exit 77), add every
//   key, reset the failures.
// - reboot: remove every key (refused while an app runs: a restart ends every app).

import AppboxCore
import AppboxCrypto
import AppboxKeychain
import Foundation
import Glibc

/// Where the device's data protection stands.
public struct ProtectionStatus: Sendable, Equatable {
  /// Whether the device root's file system can hold encrypted files.
  public var support: FscryptSupport
  public var isPasscodeSet: Bool
  /// Whether the device has class keys at all (a passcode was set once).
  public var hasClassKeys: Bool
  /// The classes whose files can be opened right now (`none` always can).
  public var availableClasses: Set<ProtectionClass>
  /// Classes whose key was removed while files of theirs were open: those stay usable.
  public var incompletelyRemovedClasses: Set<ProtectionClass>
  public var failedAttempts: Int
  /// No unlock attempt is allowed before this time.
  public var unlockAllowedAfter: Date?

  /// A passcode is set and the complete class key is gone.
  public var isLocked: Bool { isPasscodeSet && !availableClasses.contains(.complete) }
  /// What the platform calls `isProtectedDataAvailable`: complete files can be read.
  public var isProtectedDataAvailable: Bool { !isLocked }
  public var isFileProtectionSupported: Bool { support == .supported }
}

/// What `lock` did.
public struct LockReport: Sendable, Equatable {
  /// Classes with files still open: those files stay usable until closed.
  public var busyClasses: [ProtectionClass]
}

/// The device's passcode, lock and class keys. Mutating calls need the root's lock.
public final class DeviceProtection {
  public let root: DeviceRoot

  public init(root: DeviceRoot) { self.root = root }

  var keychainDirectory: String { root.keychains }
  /// `.appbox/protection`: the per-class staging directories and the setup marker.
  var protectionDirectory: String { root.stateDirectory + "/protection" }
  var setupMarker: String { protectionDirectory + "/setup-pending" }

  // MARK: Status

  /// The file system's support for encryption, where the device root lives.
  public func support() -> FscryptSupport {
    guard let fd = try? FileDescriptor.open(root.path, O_RDONLY | O_DIRECTORY) else {
      return .unsupportedFileSystem
    }
    return fd.closeAfter { $0.encryptionSupport() }
  }

  /// Fails with exit 69, naming what is needed, when the file system cannot encrypt.
  func requireSupport(for what: String) throws {
    let support = self.support()
    guard support != .supported else { return }
    let why =
      support == .featureDisabled
      ? "its file system has encryption support turned off"
      : "its file system has no encryption support (fscrypt needs ext4 or f2fs)"
    throw ContainerError(
      .unavailable,
      "Cannot \(what): the device root '\(root.path)' is on a file system without file encryption (\(why)); "
        + "put the root on a file system made with 'mkfs.ext4 -O encrypt', or enable it on an unmounted ext4 "
        + "with 'tune2fs -O encrypt'")
  }

  /// The state of the passcode, the lock and the keys. A device whose passcode was cleared
  /// has its keys put back here if a restart dropped them: without a passcode, protected
  /// data is always available.
  public func status() throws -> ProtectionStatus {
    let attempts = try UnlockAttempts.load(in: keychainDirectory)
    var status = ProtectionStatus(
      support: support(), isPasscodeSet: false, hasClassKeys: false, availableClasses: [.none],
      incompletelyRemovedClasses: [], failedAttempts: attempts.failures,
      unlockAllowedAfter: attempts.notBefore)
    guard let keybag = try Keybag.load(in: keychainDirectory) else { return status }
    status.isPasscodeSet = keybag.passcodeSet
    status.hasClassKeys = true
    var keys = keyStatuses(keybag)
    if !keybag.passcodeSet && keys.values.contains(where: { $0 != .present }) {
      if let unwrapped = try keybag.unwrap(passcode: [], device: try deviceBinding()) {
        try addKeys(unwrapped)
        keys = keyStatuses(keybag)
      }
    }
    for (protectionClass, key) in keys {
      if key == .present { status.availableClasses.insert(protectionClass) }
      if key == .incompletelyRemoved { status.incompletelyRemovedClasses.insert(protectionClass) }
    }
    return status
  }

  /// Whether files of `protectionClass` can be opened now.
  public func isAvailable(_ protectionClass: ProtectionClass) throws -> Bool {
    try status().availableClasses.contains(protectionClass)
  }

  private func keyStatuses(_ keybag: Keybag) -> [ProtectionClass: FscryptKeyStatus] {
    guard let fd = try? FileDescriptor.open(root.path, O_RDONLY | O_DIRECTORY) else { return [:] }
    defer { fd.close() }
    var result: [ProtectionClass: FscryptKeyStatus] = [:]
    for (protectionClass, wrapped) in keybag.keys {
      result[protectionClass] = (try? fd.encryptionKeyStatus(wrapped.identifier)) ?? .absent
    }
    return result
  }

  /// The kernel identifier of each class key, per the keybag (empty: no class keys yet).
  public func keyIdentifiers() throws -> [ProtectionClass: FscryptKeyIdentifier] {
    guard let keybag = try Keybag.load(in: keychainDirectory) else { return [:] }
    return keybag.keys.mapValues(\.identifier)
  }

  // MARK: Passcode

  /// Sets the first passcode (one set already: exit 73; no encryption support: exit 69).
  public func setPasscode(_ passcode: [UInt8]) throws {
    try Self.checkPasscode(passcode)
    try requireSupport(for: "set a passcode")
    let existing = try Keybag.load(in: keychainDirectory)
    if existing?.passcodeSet == true {
      throw ContainerError(
        .alreadyExists, "The device already has a passcode; use 'appbox device passcode change' to change it")
    }
    let device = try deviceBinding()
    var keys: [ProtectionClass: [UInt8]] = [:]
    if let existing {
      guard let unwrapped = try existing.unwrap(passcode: [], device: device) else {
        throw ContainerError(.invalidDevice, "The keybag's class keys do not open on this device")
      }
      keys = unwrapped
    } else {
      for protectionClass in ProtectionClass.keyed {
        keys[protectionClass] = try SecureRandom.bytes(fscryptKeyByteCount)
      }
    }
    let identifiers = try addKeys(keys)
    try markSetupPending()
    try Keybag.wrapping(pairs(keys, identifiers), passcode: passcode, passcodeSet: true, device: device)
      .save(in: keychainDirectory)
    try UnlockAttempts(failures: 0, notBefore: nil).save(in: keychainDirectory)
    try ensureSetup()
  }

  /// Replaces the passcode: the class keys are re-wrapped, no file is rewritten.
  public func changePasscode(from old: [UInt8], to new: [UInt8]) throws {
    try Self.checkPasscode(new)
    let (keybag, keys) = try verify(old, for: "change the passcode")
    try Keybag.wrapping(
      pairs(keys, keybag.keys.mapValues(\.identifier)), passcode: new, passcodeSet: true,
      device: deviceBinding()
    )
    .save(in: keychainDirectory)
  }

  /// Removes the passcode. Protected files stay encrypted and become always available;
  /// when-passcode-set keychain items are deleted. Returns how many items went.
  @discardableResult
  public func clearPasscode(_ old: [UInt8]) throws -> Int {
    let (keybag, keys) = try verify(old, for: "clear the passcode")
    try addKeys(keys)
    try markSetupPending()
    try Keybag.wrapping(
      pairs(keys, keybag.keys.mapValues(\.identifier)), passcode: [], passcodeSet: false,
      device: deviceBinding()
    )
    .save(in: keychainDirectory)
    return try ensureSetup()
  }

  // MARK: Lock

  /// Drops the complete and complete-unless-open keys. No passcode: exit 69.
  public func lock() throws -> LockReport {
    guard let keybag = try Keybag.load(in: keychainDirectory), keybag.passcodeSet else {
      throw ContainerError(
        .unavailable,
        "The device has no passcode, so it cannot lock; set one with 'appbox device passcode set'")
    }
    return LockReport(busyClasses: try removeKeys(keybag, classes: [.complete, .completeUnlessOpen]))
  }

  /// Unlocks with `passcode` (wrong: exit 77 and a failure counted; during the delay after
  /// repeated failures: exit 75). Without a passcode there is nothing to unlock.
  public func unlock(_ passcode: [UInt8]) throws {
    guard let keybag = try Keybag.load(in: keychainDirectory), keybag.passcodeSet else {
      _ = try status()  // puts the keys back if a restart dropped them
      return
    }
    let (_, keys) = try verify(passcode, for: "unlock the device", keybag: keybag)
    try addKeys(keys)
    if FileManager.default.fileExists(atPath: setupMarker) { try ensureSetup() }
  }

  /// A simulated restart: every class key is dropped, so even until-first-unlock data waits
  /// for the next unlock. Refused while an app runs (exit 75): a restart ends every app.
  public func reboot(apps: [AppRecord], session: DeviceSession) throws {
    var held: [FileLock] = []
    for app in apps { held.append(try session.ensureNotRunning(app)) }
    defer { withExtendedLifetime(held) {} }
    guard let keybag = try Keybag.load(in: keychainDirectory) else { return }
    _ = try removeKeys(keybag, classes: ProtectionClass.keyed)
    if !keybag.passcodeSet { _ = try status() }
  }

  /// Finishes removing keys that a lock left "incompletely removed" because files were open:
  /// once they are closed, the removal goes through. Best effort; run and launch call it
  /// when the app ends.
  public func finishPendingLock() {
    guard let keybag = try? Keybag.load(in: keychainDirectory), keybag.passcodeSet else { return }
    let pending = keyStatuses(keybag).filter { $0.value == .incompletelyRemoved }.map(\.key)
    if !pending.isEmpty { _ = try? removeKeys(keybag, classes: pending) }
  }

  // MARK: Helpers

  static func checkPasscode(_ passcode: [UInt8]) throws {
    guard !passcode.isEmpty else { throw ContainerError(.invalidRequest, "The passcode must not be empty") }
    guard passcode.count <= 1024, !passcode.contains(0) else {
      throw ContainerError(.invalidRequest, "The passcode must be at most 1024 bytes without NUL")
    }
  }

  /// Unwraps the keys with `passcode`, honouring and updating the failed attempts.
  private func verify(_ passcode: [UInt8], for what: String, keybag given: Keybag? = nil) throws -> (
    Keybag, [ProtectionClass: [UInt8]]
  ) {
    guard let keybag = try given ?? Keybag.load(in: keychainDirectory), keybag.passcodeSet else {
      throw ContainerError(.unavailable, "Cannot \(what): the device has no passcode")
    }
    var attempts = try UnlockAttempts.load(in: keychainDirectory)
    let now = Date()
    if let notBefore = attempts.notBefore, notBefore > now {
      let seconds = Int((notBefore.timeIntervalSince(now)).rounded(.up))
      throw ContainerError(
        .tryLater,
        "Cannot \(what): after \(attempts.failures) failed attempts, the next attempt is allowed in \(seconds) "
          + "second\(seconds == 1 ? "" : "s")")
    }
    guard let keys = try keybag.unwrap(passcode: passcode, device: deviceBinding()) else {
      attempts.failures += 1
      let delay = UnlockAttempts.delay(afterFailures: attempts.failures)
      attempts.notBefore = delay > 0 ? now.addingTimeInterval(delay) : nil
      try attempts.save(in: keychainDirectory)
      let wait = delay > 0 ? "; the next attempt is allowed in \(Int(delay)) seconds" : ""
      throw ContainerError(
        .wrongPasscode,
        "Cannot \(what): wrong passcode (\(attempts.failures) failed attempt\(attempts.failures == 1 ? "" : "s")\(wait))"
      )
    }
    if attempts.failures != 0 || attempts.notBefore != nil {
      try UnlockAttempts(failures: 0, notBefore: nil).save(in: keychainDirectory)
    }
    return (keybag, keys)
  }

  private func pairs(
    _ keys: [ProtectionClass: [UInt8]], _ identifiers: [ProtectionClass: FscryptKeyIdentifier]
  )
    -> [ProtectionClass: (key: [UInt8], identifier: FscryptKeyIdentifier)]
  {
    keys.reduce(into: [:]) { result, entry in result[entry.key] = (entry.value, identifiers[entry.key]!) }
  }

  @discardableResult
  private func addKeys(_ keys: [ProtectionClass: [UInt8]]) throws -> [ProtectionClass: FscryptKeyIdentifier] {
    let fd = try FileDescriptor.open(root.path, O_RDONLY | O_DIRECTORY)
    defer { fd.close() }
    var identifiers: [ProtectionClass: FscryptKeyIdentifier] = [:]
    for (protectionClass, key) in keys { identifiers[protectionClass] = try fd.addEncryptionKey(key) }
    return identifiers
  }

  /// Removes the keys of `classes`; returns those with files still open. A removal that finds
  /// files in use is tried again a few times over half a second: an inode a reader has just
  /// let go of (or one still under writeback) is in use for a moment, and a lock should not
  /// leave its files readable for that (seen under load). Files an app holds open stay busy.
  private func removeKeys(_ keybag: Keybag, classes: [ProtectionClass]) throws -> [ProtectionClass] {
    let fd = try FileDescriptor.open(root.path, O_RDONLY | O_DIRECTORY)
    defer { fd.close() }
    var busy: [ProtectionClass] = []
    for protectionClass in classes {
      guard let wrapped = keybag.keys[protectionClass] else { continue }
      var stillBusy = try fd.removeEncryptionKey(wrapped.identifier).filesBusy
      for _ in 0..<10 where stillBusy {
        usleep(50_000)
        stillBusy = try fd.removeEncryptionKey(wrapped.identifier).filesBusy
      }
      if stillBusy { busy.append(protectionClass) }
    }
    return busy
  }

  func deviceBinding() throws -> Keybag.DeviceBinding {
    guard let identity = try root.identityIfPresent() else {
      throw ContainerError(.invalidDevice, "The device root '\(root.path)' has no identity")
    }
    return Keybag.DeviceBinding(
      keybagKey: try Keychain(directory: keychainDirectory).deviceKeybagKey, udid: identity.udid)
  }

  func openProtectionDirectory() throws -> FileDescriptor {
    if mkdir(protectionDirectory, 0o700) != 0, Errno.current != .exists {
      throw SystemError("create directory", path: protectionDirectory)
    }
    return try FileDescriptor.open(protectionDirectory, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
  }

  private func markSetupPending() throws {
    let directory = try openProtectionDirectory()
    defer { directory.close() }
    try AtomicFile.write([UInt8](), to: "setup-pending", in: directory, mode: 0o600)
  }
}

extension DeviceSession {
  /// The device's passcode, lock and class keys.
  public var protection: DeviceProtection { DeviceProtection(root: root) }
}
