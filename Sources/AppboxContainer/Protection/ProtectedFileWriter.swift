// Files under a protection class, one file at a time, without changing any path.
//
// fscrypt encrypts what is created inside a directory carrying a policy, and a file keeps its
// encryption wherever it is renamed. So each keyed class has a staging directory,
// `.appbox/protection/<class>/`, on the device root's file system, created empty and given
// that class's v2 policy; it is empty whenever no appbox command is using it.
//
// Creating a protected file: create it in the staging directory under a temp name, then
// rename it to its place with RENAME_NOREPLACE (exactly what O_EXCL would have done).
//
// Raising an existing file's class (`raise`), atomically and without leaving plaintext:
// 1. open it (no symlink followed) and refuse anything but a regular file with one link
//    (re-creating a hard-linked file would leave its other names on the plaintext inode);
// 2. copy its data (holes stay holes), owner, mode, `user.*` attributes and mtime into a new
//    file in the class's staging directory; fsync it;
// 3. hard-link it into the journal as `protect-scrub-<random>` and fsync the journal
//    directory: from here on recovery will finish step 5 (a journal link whose inode still
//    has its original name, two links, means step 4 never happened: recovery only drops the
//    journal link then);
// 4. rename the new file over the old name (atomic), fsync the directory;
// 5. overwrite the old inode's data in place with zeros, fdatasync, unlink the journal link.
//    A freed block keeps its bytes until reused: without this step the plaintext would stay
//    on the disk. A file raised from a lower class gets its old ciphertext (under the weaker
//    key) overwritten the same way; recovery can do that only while that key is present, and
//    otherwise just unlinks. (A file the app rewrote earlier may have left copies in blocks
//    freed back then: nothing can find those now. Protect files when they are created.)
// A crash before step 4 leaves only a temp file in the staging directory (recovery removes
// it); after it, the file is protected and recovery scrubs what the journal still names.

import AppboxCore
import AppboxCrypto
import Foundation
import Glibc

/// Creates files under a protection class and raises the class of existing ones. Holds the
/// staging directories open until `close()` (an open one keeps its class's key busy).
public final class ProtectedFileWriter {
  static let scrubPrefix = "protect-scrub-"
  static let tempPrefix = ".protect-"

  let identifiers: [ProtectionClass: FscryptKeyIdentifier]
  private let directory: FileDescriptor
  private let journal: FileDescriptor
  private var staging: [ProtectionClass: FileDescriptor] = [:]

  public init(protection: DeviceProtection) throws {
    identifiers = try protection.keyIdentifiers()
    directory = try protection.openProtectionDirectory()
    do {
      journal = try FileDescriptor.open(protection.root.journalDirectory, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    } catch {
      directory.close()
      throw error
    }
  }

  public func close() {
    for fd in staging.values { fd.close() }
    staging.removeAll()
    directory.close()
    journal.close()
  }

  /// The class of the open file `fd`: `none` when unencrypted. A key this device does not
  /// know is `.invalidData`.
  func protectionClass(of fd: FileDescriptor, displayPath: String) throws -> ProtectionClass {
    guard let identifier = try fd.encryptionPolicy() else { return .none }
    guard let found = identifiers.first(where: { $0.value == identifier })?.key else {
      throw ContainerError(
        .invalidData, "'\(displayPath)' is encrypted under a key this device does not know (\(identifier))")
    }
    return found
  }

  /// The staging directory of `protectionClass`, created with its policy when missing.
  func stagingDirectory(_ protectionClass: ProtectionClass) throws -> FileDescriptor {
    if let open = staging[protectionClass] { return open }
    guard let identifier = identifiers[protectionClass] else {
      throw ContainerError(
        .unavailable, "The device has no \(protectionClass.rawValue) class key: set a passcode first")
    }
    let name = protectionClass.rawValue
    if let existing = try? directory.open(name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW) {
      if try existing.encryptionPolicy() == identifier {
        staging[protectionClass] = existing
        return existing
      }
      existing.close()
      try FileTree.remove(name, in: directory)  // another key's, or interrupted before its policy
    }
    try directory.makeDirectory(name, mode: 0o700)
    let created = try directory.open(name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    do {
      try created.setEncryptionPolicy(identifier)
      try directory.sync()
    } catch let error as SystemError where error.errno == .keyNotAvailable {
      created.close()
      throw Self.locked(protectionClass, doing: "create a staging directory")
    } catch {
      created.close()
      throw error
    }
    staging[protectionClass] = created
    return created
  }

  static func locked(_ protectionClass: ProtectionClass, doing what: String) -> ContainerError {
    ContainerError(
      .unavailable,
      "Cannot \(what) under class \(protectionClass.rawValue): the device is locked (its key is not "
        + "available); unlock it first")
  }

  /// Creates `name` in `parent` as a new, empty file of `protectionClass`, open read-write
  /// (an existing entry: EEXIST). `none` creates an ordinary file.
  public func createFile(
    rawName name: [UInt8], in parent: FileDescriptor, class protectionClass: ProtectionClass, mode: mode_t
  ) throws -> FileDescriptor {
    if protectionClass == .none {
      return try parent.open(rawName: name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW, mode: mode)
    }
    let staging = try stagingDirectory(protectionClass)
    let temp = Array((Self.tempPrefix + String(UInt64.random(in: 0...UInt64.max), radix: 16)).utf8)
    let fd: FileDescriptor
    do {
      fd = try staging.open(rawName: temp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW, mode: mode)
    } catch let error as SystemError where error.errno == .keyNotAvailable {
      throw Self.locked(protectionClass, doing: "create '\(String(decoding: name, as: UTF8.self))'")
    }
    do {
      try staging.rename(rawName: temp, to: name, in: parent, flags: .noReplace)
    } catch {
      fd.close()
      try? staging.remove(rawName: temp)
      throw error
    }
    return fd
  }

  /// Re-creates regular file `name` of `parent` under `protectionClass` (see the header),
  /// unless it already has that class. Returns its class before. Lowering is `.denied`.
  @discardableResult
  func raise(
    rawName name: [UInt8], in parent: FileDescriptor, to target: ProtectionClass, displayPath: String
  )
    throws -> ProtectionClass
  {
    let source: FileDescriptor
    do {
      source = try parent.open(rawName: name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK)
    } catch let error as SystemError where error.errno == .keyNotAvailable {
      throw ContainerError(
        .unavailable,
        "Cannot read '\(displayPath)': it is protected and the device is locked; unlock it first")
    } catch let error as SystemError where error.errno == .tooManyLinks {
      throw ContainerError(
        .denied, "'\(displayPath)' is a symbolic link; only regular files can be protected")
    }
    defer { source.close() }
    let before = try source.status()
    guard before.type == .regular else {
      throw ContainerError(
        .denied, "'\(displayPath)' is not a regular file; only regular files can be protected")
    }
    let current = try protectionClass(of: source, displayPath: displayPath)
    if current == target { return current }
    guard current < target else {
      throw ContainerError(
        .denied,
        "'\(displayPath)' is \(current.rawValue); protection can be raised, never lowered (asked: \(target.rawValue))"
      )
    }
    guard before.linkCount == 1 else {
      throw ContainerError(
        .denied,
        "'\(displayPath)' has \(before.linkCount) hard links; protecting it would leave the other names on the "
          + "unprotected data")
    }
    let staging = try stagingDirectory(target)
    let temp = Array((Self.tempPrefix + String(UInt64.random(in: 0...UInt64.max), radix: 16)).utf8)
    let copy: FileDescriptor
    do {
      copy = try staging.open(rawName: temp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW, mode: 0o600)
    } catch let error as SystemError where error.errno == .keyNotAvailable {
      throw Self.locked(target, doing: "protect '\(displayPath)'")
    }
    var renamed = false
    defer {
      copy.close()
      if !renamed { try? staging.remove(rawName: temp) }
    }
    let ranges = try source.dataRanges(size: before.size)
    try Self.copyData(from: source, to: copy, ranges: ranges, size: before.size, displayPath: displayPath)
    if fchown(copy.rawValue, before.uid, before.gid) != 0 && Errno.current != .notPermitted {
      throw SystemError("change owner", path: displayPath)
    }
    try copy.setPermissions(before.permissions)
    for (attribute, value) in try source.userExtendedAttributes() where attribute != protectionClassAttribute
    {
      try copy.setExtendedAttribute(attribute, value)
    }
    try copy.setTimes(access: before.modificationTime, modification: before.modificationTime)
    try copy.sync()
    let after = try source.status()
    guard after.size == before.size, after.modificationTime == before.modificationTime,
      after.changeTime == before.changeTime
    else {
      throw ContainerError(.tryLater, "'\(displayPath)' changed while it was being protected; try again")
    }

    CrashPoint.hit("protect.staged")
    let scrub = Array((Self.scrubPrefix + String(UInt64.random(in: 0...UInt64.max), radix: 16)).utf8)
    try parent.link(rawName: name, to: scrub, in: journal)
    try journal.sync()
    CrashPoint.hit("protect.linked")
    try staging.rename(rawName: temp, to: name, in: parent)
    renamed = true
    try parent.sync()
    CrashPoint.hit("protect.renamed")
    try Self.scrub(rawName: scrub, in: journal)
    return current
  }

  /// Copies `ranges` of `source` to the same offsets of `destination`, then sets its size.
  private static func copyData(
    from source: FileDescriptor, to destination: FileDescriptor, ranges: [Range<Int64>], size: Int64,
    displayPath: String
  ) throws {
    var buffer = [UInt8](repeating: 0, count: 1 << 20)
    try buffer.withUnsafeMutableBytes { buffer in
      for range in ranges {
        var offset = range.lowerBound
        while offset < range.upperBound {
          let want = Int(min(Int64(buffer.count), range.upperBound - offset))
          let n = pread(source.rawValue, buffer.baseAddress, want, off_t(offset))
          if n < 0 {
            if Errno.current == .interrupted { continue }
            throw SystemError("read", path: displayPath)
          }
          if n == 0 { break }
          try writeAll(destination, UnsafeRawBufferPointer(rebasing: buffer[0..<n]), at: offset, displayPath)
          offset += Int64(n)
        }
      }
    }
    try destination.truncate(to: size)
  }

  private static func writeAll(
    _ fd: FileDescriptor, _ bytes: UnsafeRawBufferPointer, at offset: Int64, _ displayPath: String
  ) throws {
    var done = 0
    while done < bytes.count {
      let n = pwrite(fd.rawValue, bytes.baseAddress! + done, bytes.count - done, off_t(offset + Int64(done)))
      if n < 0 {
        if Errno.current == .interrupted { continue }
        throw SystemError("write", path: displayPath)
      }
      done += n
    }
  }

  /// Overwrites the data of the journal's `name` with zeros where it lies, makes that
  /// durable, and removes the name. Recovery calls it for what a crash left: a file whose
  /// original name still holds it (two links: the rename never happened) is only unlinked
  /// from the journal, never overwritten.
  static func scrub(rawName name: [UInt8], in journal: FileDescriptor) throws {
    let display = ".appbox/journal/" + String(decoding: name, as: UTF8.self)
    if let fd = try? journal.open(rawName: name, O_WRONLY | O_NOFOLLOW | O_NONBLOCK) {
      defer { fd.close() }
      let status = try fd.status()
      if status.type == .regular && status.linkCount == 1 {
        let zeros = [UInt8](repeating: 0, count: 1 << 20)
        try zeros.withUnsafeBytes { zeros in
          for range in try fd.dataRanges(size: status.size) {
            var offset = range.lowerBound
            while offset < range.upperBound {
              let count = Int(min(Int64(zeros.count), range.upperBound - offset))
              try writeAll(fd, UnsafeRawBufferPointer(rebasing: zeros[0..<count]), at: offset, display)
              offset += Int64(count)
            }
          }
        }
        guard fdatasync(fd.rawValue) == 0 else { throw SystemError("sync", path: display) }
      }
    }
    try journal.remove(rawName: name)
    try journal.sync()
  }
}

/// Finishes what a killed `protect` (or restore of protected files) left: scrubs the old
/// plaintext the journal still names, and removes temp files from the staging directories.
public struct ProtectionRecovery: RecoveryStep {
  public init() {}

  public func recover(_ session: DeviceSession) throws {
    let journal = try FileDescriptor.open(session.root.journalDirectory, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    defer { journal.close() }
    for entry in try journal.entries() where entry.nameString.hasPrefix(ProtectedFileWriter.scrubPrefix) {
      try ProtectedFileWriter.scrub(rawName: entry.name, in: journal)
    }
    let protection = session.protection
    guard
      let directory = try? FileDescriptor.open(
        protection.protectionDirectory, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    else { return }
    defer { directory.close() }
    for protectionClass in ProtectionClass.keyed {
      guard let staging = try? directory.open(protectionClass.rawValue, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
      else {
        continue
      }
      // Names are encrypted while the key is absent; unlinking by the listed name works anyway.
      defer { staging.close() }
      for entry in try staging.entries() { try? staging.remove(rawName: entry.name) }
    }
    if FileManager.default.fileExists(atPath: protection.setupMarker),
      try protection.status().availableClasses.contains(.complete)
    {
      try protection.ensureSetup()
    }
  }
}
