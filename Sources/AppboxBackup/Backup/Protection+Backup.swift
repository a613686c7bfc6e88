// File protection classes in backups (where the backup engine meets AppboxContainer's
// protection layer).
//
// A protected file's class travels as one more extended attribute record of its archive
// member, `SCHILY.xattr.user.appbox.protection-class=<class>` (and so in its tree entry):
// GNU tar and bsdtar list it, and with --xattrs set it as a harmless user attribute. The
// content is stored as plain data, as for every file: a backup reads protected files through
// their key, so it needs the device unlocked for them (BackupRun checks first, exit 69).
// The record is derived from the file's fscrypt policy when the file is read; an attribute
// of that name that the app set itself is dropped, so an app cannot make a backup claim a
// class. A restore creates each recorded file directly under its class (ProtectedFileWriter:
// never a plaintext block on disk) when the device has class keys; a device without them
// gets the files unprotected, with a warning. Files from a snapshot taken before protection
// was added have no record and come back unprotected, as the platform says.

import AppboxContainer
import AppboxCore
import AppboxRepository

extension DeviceSession {
  /// The device's class keys by kernel identifier, for recording classes in archives.
  func protectionClassesByKey() throws -> [FscryptKeyIdentifier: ProtectionClass] {
    Dictionary(
      try protection.keyIdentifiers().map { ($0.value, $0.key) }, uniquingKeysWith: { first, _ in first })
  }
}

/// The attributes a backup records for the open regular file `fd`: its `user.*` attributes
/// (any the app named like the protection record left out), plus the protection record
/// when the file is encrypted under one of `classes`; sorted by name.
func backupAttributes(of fd: FileDescriptor, classes: [FscryptKeyIdentifier: ProtectionClass]) throws
  -> [ExtendedAttribute]
{
  var attributes = try fd.userExtendedAttributes().filter { $0.name != protectionClassAttribute }.map {
    ExtendedAttribute(name: $0.name, value: $0.value)
  }
  if !classes.isEmpty, let identifier = try fd.encryptionPolicy(), let protectionClass = classes[identifier] {
    attributes.append(
      ExtendedAttribute(name: protectionClassAttribute, value: Array(protectionClass.rawValue.utf8)))
    attributes.sort { $0.name < $1.name }
  }
  return attributes
}

/// Separates the protection record from the attributes to set. An unknown class name counts
/// as `complete` (the strongest: a record is never a reason to protect less).
func splitProtectionRecord(_ attributes: [ExtendedAttribute]) -> ([ExtendedAttribute], ProtectionClass) {
  guard let index = attributes.firstIndex(where: { $0.name == protectionClassAttribute }) else {
    return (attributes, .none)
  }
  var rest = attributes
  let record = rest.remove(at: index)
  let protectionClass = ProtectionClass(rawValue: String(decoding: record.value, as: UTF8.self)) ?? .complete
  return (rest, protectionClass)
}

/// The writer that re-creates the protected files of `plan` (a batch of a restore) under their
/// classes on `session`'s device: `existing` when an earlier batch made one, else a new one;
/// or nil, with the count of the batch's protected files that are restored unprotected, when
/// there is no session or the device has no class keys (the caller warns once, with the
/// total). A class whose key is unavailable (a locked device) fails with exit 69 before the
/// batch is written.
func protectedFileWriter(for plan: RestorePlan, session: DeviceSession?, writer existing: ProtectedFileWriter?)
  throws -> (writer: ProtectedFileWriter?, unprotected: Int)
{
  let classes = Set(plan.files.map(\.protectionClass)).subtracting([.none])
  guard !classes.isEmpty else { return (existing, 0) }
  guard let session else { return (nil, 0) }
  let status = try session.protection.status()
  guard status.hasClassKeys, status.isFileProtectionSupported else {
    return (nil, plan.files.filter { $0.protectionClass != .none }.count)
  }
  for protectionClass in classes.sorted(by: >) where !status.availableClasses.contains(protectionClass) {
    throw ContainerError(
      .unavailable,
      "Cannot restore while the device is locked: the snapshot holds \(protectionClass.rawValue) files, "
        + "which can be created only with their key; unlock the device first")
  }
  return (try existing ?? ProtectedFileWriter(protection: session.protection), 0)
}
