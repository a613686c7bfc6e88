// The facts `why` reports that other parts of appbox provide, each behind one small function:
// - file protection: a file's data-protection class (from its fscrypt policy);
// - unreadable entries: what a backup does with an entry it cannot read, and whether a
//   snapshot recorded one as unreadable;
// - a locked device: whether the backup would refuse to start (69), by the backup's own check.

import AppboxContainer
import AppboxCore
import AppboxRepository

/// The data-protection class of the open file `file` ("complete", "complete-unless-open",
/// "until-first-unlock"): the class whose key encrypts it, among the device's `classes`;
/// nil for a file that is not encrypted or whose key this device does not know.
func protectionClass(of file: FileDescriptor, classes: [FscryptKeyIdentifier: ProtectionClass]) -> String? {
  guard !classes.isEmpty, let identifier = try? file.encryptionPolicy() else { return nil }
  return classes[identifier]?.rawValue
}

/// What the next backup does with an entry it cannot read (`reason`: the errno's text).
func unreadableConsequence(_ reason: String) -> String {
  "the next backup cannot read it (\(reason)): it leaves it out and marks the snapshot incomplete "
    + "(exit 0, or 74 with --strict)"
}

/// Whether `snapshot` recorded `path`, or a folder above it, as unreadable. Snapshots keep
/// the first few unreadable paths (shortened when long), so a path past those limits is
/// not found here.
func wasUnreadable(_ path: [UInt8], in snapshot: Snapshot) -> Bool {
  guard snapshot.isIncomplete else { return false }
  return snapshot.unreadablePaths.contains { recorded in
    recorded == path || (path.count > recorded.count && path.starts(with: recorded + [UInt8(ascii: "/")]))
  }
}

/// Why the next backup of `app` refuses to start, if it does: the check the backup itself runs
/// first (`requireProtectedDataAvailable`: the device is locked and the home holds protected
/// data whose key is gone), with its message, lower-cased to continue a sentence.
func lockedRefusal(_ session: DeviceSession, _ app: AppRecord) -> String? {
  do {
    try session.requireProtectedDataAvailable(of: app, for: "back up")
    return nil
  } catch let error as ContainerError where error.kind == .unavailable {
    return error.message.prefix(1).lowercased() + error.message.dropFirst()
  } catch {
    return nil
  }
}
