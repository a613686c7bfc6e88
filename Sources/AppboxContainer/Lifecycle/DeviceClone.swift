// `device clone DEST [--same-device|--new-device]`: a copy of the whole device root, for CI
// templates (the same device) or a second device made from the first.
//
// Algorithm (the root lock held exclusively, so no other appbox changes the device, and every
// app's exclusive running lock, so no app writes into its home; 75 otherwise):
// 1. refuse a DEST that exists (73), one inside the device (64), a device with file
//    protection keys (69: its encrypted files cannot be copied without the kernel's keys);
// 2. delete what a killed clone to the same DEST left (`.<NAME>.appbox-clone-*` beside it);
// 3. copy the root into `.<NAME>.appbox-clone-<UUID>` beside DEST (TreeCopy.swift: reflinks,
//    else in-kernel copies, holes kept), leaving out the locks and run records (they belong
//    to processes of this device) and SQLite's -shm files (each database rebuilds its
//    wal-index from its -wal on the next open);
// 4. --new-device: a new UDID in the copy's device.plist, and its keychain carried over to a
//    new device key (Keychain+Transfer.swift: items re-sealed, this-device-only ones dropped);
// 5. syncfs, then rename the copy to DEST (RENAME_NOREPLACE) and sync the parent.
// Until the rename, DEST does not exist; after it, DEST is complete: a SIGKILL at any moment
// leaves DEST complete or absent, never partial. A failure removes the copy.

import AppboxCore
import AppboxKeychain
import Foundation
import Glibc

/// What a clone made.
public struct CloneReport: Sendable {
  public var source: DeviceIdentity
  /// The copy's identity: the source's (--same-device) or a new UDID (--new-device).
  public var identity: DeviceIdentity
  public var destination: String
  public var newDevice: Bool
  public var files: Int
  public var bytes: Int64
  /// Files that share their extents with the source's (FICLONE).
  public var reflinked: Int
  /// --new-device: keychain items re-sealed and dropped.
  public var keychain: KeychainTransfer?
}

extension DeviceSession {
  /// Clones the device to `destination` (see the header).
  /// `name`: the copy's device name (`simctl clone`), else the source's.
  public func clone(to destination: String, newDevice: Bool, name newName: String? = nil) throws
    -> CloneReport
  {
    let target = DeviceRoot.absolute(destination)
    let (parent, name) = splitPath(target)
    guard !name.isEmpty, name != ".", name != ".." else {
      throw ContainerError(.invalidRequest, "'\(destination)' names no directory to create")
    }
    let canonicalParent = DeviceRoot.canonical(parent)
    if (canonicalParent + "/").hasPrefix(DeviceRoot.canonical(root.path) + "/") {
      throw ContainerError(.invalidRequest, "Cannot clone \(root.path) into itself ('\(destination)')")
    }
    try lockDeviceExclusively()
    let running = try ensureNoAppRuns()
    defer { withExtendedLifetime(running) {} }
    let protection = try self.protection.status()
    if protection.isPasscodeSet || protection.hasClassKeys {
      throw ContainerError(
        .unavailable,
        "Cannot clone \(root.path): it has file protection keys (its protected files are encrypted under keys only "
          + "the kernel holds); clear the passcode first ('appbox device passcode clear')")
    }
    let parentDirectory: OwnedFileDescriptor
    do {
      parentDirectory = try OwnedFileDescriptor.open(parent, O_RDONLY | O_DIRECTORY)
    } catch {
      throw ContainerError(
        .fileNotFound, "Cannot clone to '\(destination)': its parent directory \(parent) is missing")
    }
    let directory = parentDirectory.borrowed
    if try directory.statusIfPresent(of: name) != nil {
      throw ContainerError(.alreadyExists, "Cannot clone to '\(destination)': it exists already")
    }
    let prefix = "." + name + ".appbox-clone-"
    for stale in ((try? FileManager.default.contentsOfDirectory(atPath: parent)) ?? [])
    where stale.hasPrefix(prefix) {
      try FileTree.remove(stale, in: directory)
    }
    let staging = prefix + UUID().uuidString
    try directory.makeDirectory(staging, mode: 0o700)
    do {
      let report = try fillClone(staging, in: directory, parent: parent, newDevice: newDevice, name: newName)
      CrashPoint.hit("clone.prepared")
      try directory.rename(staging, to: name, flags: .noReplace)
      try directory.sync()
      CrashPoint.hit("clone.renamed")
      return CloneReport(
        source: identity, identity: report.identity, destination: target, newDevice: newDevice,
        files: report.files,
        bytes: report.bytes, reflinked: report.reflinked, keychain: report.keychain)
    } catch {
      try? FileTree.remove(staging, in: directory)
      throw error
    }
  }

  /// Steps 3-5 before the rename: the copy in `staging`, synced.
  private func fillClone(
    _ staging: String, in directory: FileDescriptor, parent: String, newDevice: Bool, name newName: String?
  ) throws
    -> (identity: DeviceIdentity, files: Int, bytes: Int64, reflinked: Int, keychain: KeychainTransfer?)
  {
    let source = try OwnedFileDescriptor.open(root.path, O_RDONLY | O_DIRECTORY)
    let copy = try directory.openOwned(staging, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    let excluded: Set<String> = [".appbox/lock", ".appbox/locks", ".appbox/running", ".appbox/runs"]
    var tree = TreeCopy { path in
      excluded.contains(String(decoding: path, as: UTF8.self)) || path.ends(with: Array("-shm".utf8))
        || path.starts(with: Array(".appbox/discard-".utf8))
    }
    try tree.copy(source.borrowed, into: copy.borrowed)
    CrashPoint.hit("clone.copied")
    var identity = self.identity
    var keychain: KeychainTransfer?
    let cloneRoot = DeviceRoot(path: parent + "/" + staging)
    if let newName { identity.name = newName }
    if newDevice { identity = DeviceIdentity(name: identity.name, capabilities: identity.capabilities) }
    if newDevice || newName != nil { try cloneRoot.saveIdentity(identity) }
    if newDevice {
      if FileManager.default.fileExists(atPath: cloneRoot.keychains + "/device.key") {
        keychain = try Keychain.transferToNewDevice(directory: cloneRoot.keychains)
      }
    }
    try copy.borrowed.syncFileSystem()
    return (identity, tree.files, tree.bytes, tree.reflinked, keychain)
  }
}

extension Array where Element == UInt8 {
  fileprivate func ends(with suffix: [UInt8]) -> Bool {
    count >= suffix.count && Array(self[(count - suffix.count)...]) == suffix
  }
}
