// The facts `why` reports that other parts of appbox provide, each behind one small function:
// - file protection: a file's data-protection class (from its fscrypt policy);
// - unreadable entries: what a backup does with an entry it cannot read, and whether a
//   snapshot recorded one as unreadable.

import AppboxContainer
import AppboxCore

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
