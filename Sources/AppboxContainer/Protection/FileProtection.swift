// `protect`: show or raise the protection class of an app's files, and the checks other
// commands make while the device is locked.
//
// A path names a file, or a directory whose files (recursively) are all meant, inside the
// app's Documents or Library; it is resolved beneath the home without following any symlink
// (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS). Raising first plans every file and refuses
// the whole request if any file would be lowered (exit 77), then raises file by file, each
// atomically (ProtectedFileWriter): an interrupted run leaves every file either as it was or
// protected, and running it again finishes. Symlinks, FIFOs and sockets are listed as skipped.
// The app must not be running (exit 75): a process writing a file while it is re-created
// would lose its writes.
//
// Files the app creates later in a protected folder are NOT protected: protection belongs to
// files, not folders (fscrypt policies on the app's own directories would make the folder
// itself unusable while locked, which the platform does not do).

import AppboxCore
import Foundation
import Glibc

/// One file and its protection class.
public struct FileProtectionEntry: Sendable, Equatable {
  /// Relative to the home ("Documents/a.txt").
  public var path: String
  /// nil when the file is encrypted under a class whose key is not available now (a locked
  /// device): its class cannot be read until unlock.
  public var protectionClass: ProtectionClass?
  /// Whether the file can be opened now.
  public var isAvailable: Bool
}

/// What `protect` changed.
public struct ProtectReport: Sendable, Equatable {
  /// Files raised: path, class before.
  public var raised: [(path: String, from: ProtectionClass)]
  /// Files that had the class already.
  public var unchanged: [String]
  /// Entries left alone (symlinks and other non-regular files), with why.
  public var skipped: [(path: String, reason: String)]
  public var target: ProtectionClass

  public static func == (a: ProtectReport, b: ProtectReport) -> Bool {
    a.raised.map(\.path) == b.raised.map(\.path) && a.unchanged == b.unchanged && a.target == b.target
  }
}

extension DeviceSession {
  /// Every regular file at or under `path` (inside Documents or Library) with its class.
  public func protectionClasses(of app: AppRecord, path: String) throws -> [FileProtectionEntry] {
    let target = try ProtectionTarget(session: self, app: app, path: path)
    defer { target.close() }
    let identifiers = try protection.keyIdentifiers()
    var result: [FileProtectionEntry] = []
    for file in target.files {
      let parent = try target.parent(of: file)
      defer { parent.close() }
      let name = ProtectionTarget.lastComponent(file)
      let display = String(decoding: file, as: UTF8.self)
      guard try parent.isEncrypted(rawName: name) else {
        result.append(
          FileProtectionEntry(path: display, protectionClass: ProtectionClass.none, isAvailable: true))
        continue
      }
      do {
        let fd = try parent.open(rawName: name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK)
        let identifier = try fd.closeAfter { try $0.encryptionPolicy() }
        guard let found = identifiers.first(where: { $0.value == identifier })?.key else {
          throw ContainerError(
            .invalidData, "'\(display)' is encrypted under a key this device does not know")
        }
        result.append(FileProtectionEntry(path: display, protectionClass: found, isAvailable: true))
      } catch let error as SystemError where error.errno == .keyNotAvailable {
        result.append(FileProtectionEntry(path: display, protectionClass: nil, isAvailable: false))
      }
    }
    return result
  }

  /// Raises every regular file at or under `path` to `protectionClass` (see the header).
  /// Needs a passcode, a file system with encryption and the class's key (exit 69); lowering
  /// any file is refused before anything changes (exit 77).
  public func protect(_ app: AppRecord, path: String, to protectionClass: ProtectionClass) throws
    -> ProtectReport
  {
    let protection = self.protection
    if protectionClass != .none {
      try protection.requireSupport(for: "protect files")
      let status = try protection.status()
      guard status.isPasscodeSet else {
        throw ContainerError(
          .unavailable,
          "Cannot protect files: the device has no passcode, and protection needs one; set it with "
            + "'appbox device passcode set'")
      }
      guard status.availableClasses.contains(protectionClass) else {
        throw ProtectedFileWriter.locked(protectionClass, doing: "protect files")
      }
    }
    let running = try ensureNotRunning(app)
    defer { withExtendedLifetime(running) {} }
    let target = try ProtectionTarget(session: self, app: app, path: path)
    defer { target.close() }

    // Plan: nothing changes if any file would be lowered.
    let current = try protectionClasses(of: app, path: path)
    if let lowered = current.first(where: { ($0.protectionClass ?? .complete) > protectionClass }) {
      guard let from = lowered.protectionClass else {
        throw ContainerError(
          .unavailable, "Cannot read the class of '\(lowered.path)': the device is locked; unlock it first")
      }
      throw ContainerError(
        .denied,
        "'\(lowered.path)' is \(from.rawValue); protection can be raised, never lowered or removed "
          + "(asked: \(protectionClass.rawValue))")
    }
    var report = ProtectReport(raised: [], unchanged: [], skipped: target.skipped, target: protectionClass)
    if protectionClass == .none {
      report.unchanged = current.map(\.path)
      return report
    }
    let writer = try ProtectedFileWriter(protection: protection)
    defer { writer.close() }
    for file in target.files {
      let parent = try target.parent(of: file)
      defer { parent.close() }
      let display = String(decoding: file, as: UTF8.self)
      let before = try writer.raise(
        rawName: ProtectionTarget.lastComponent(file), in: parent, to: protectionClass, displayPath: display)
      if before == protectionClass {
        report.unchanged.append(display)
      } else {
        report.raised.append((display, before))
      }
    }
    return report
  }

  /// Fails with exit 69 when the device is locked and `app`'s backed-up data (Documents and
  /// Library but Library/Caches) holds a file whose class is not available now, whether or
  /// not the kernel would still open it (ProtectionGate.swift). Backup and export call it
  /// first, so that they stop before reading or writing anything. Costs nothing while unlocked.
  public func requireProtectedDataAvailable(of app: AppRecord, for what: String) throws {
    let gate = try protectionGate()
    guard !gate.isOpen else { return }
    let home = try FileDescriptor.open(self.home(of: app).path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    defer { home.close() }
    if let path = try ProtectionTarget.firstUnavailableFile(in: home, gate: gate) {
      throw ContainerError(
        .unavailable,
        "Cannot \(what) \(app.bundleIdentifier) while the device is locked: '\(path)' is protected and "
          + "cannot be read; unlock the device first")
    }
  }
}

/// The files a `protect` path names, found without following symlinks.
struct ProtectionTarget {
  let home: FileDescriptor
  /// Regular files, relative to the home.
  var files: [[UInt8]] = []
  var skipped: [(path: String, reason: String)] = []

  init(session: DeviceSession, app: AppRecord, path: String) throws {
    let relative = try RelativePath(validating: path, container: "the home")
    guard ["Documents", "Library"].contains(relative.components[0]) else {
      throw ContainerError(
        .denied, "Only files in Documents or Library can be protected, not '\(relative)'")
    }
    home = try FileDescriptor.open(session.home(of: app).path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    do {
      try collect(Array(relative.description.utf8))
    } catch {
      home.close()
      throw error
    }
  }

  func close() { home.close() }

  static func lastComponent(_ path: [UInt8]) -> [UInt8] {
    guard let slash = path.lastIndex(of: UInt8(ascii: "/")) else { return path }
    return Array(path[(slash + 1)...])
  }

  /// The parent directory of `path`, opened beneath the home without following symlinks.
  func parent(of path: [UInt8]) throws -> FileDescriptor {
    guard let slash = path.lastIndex(of: UInt8(ascii: "/")) else { return try home.duplicate() }
    return try home.openBeneath(Array(path[..<slash]), O_RDONLY | O_DIRECTORY)
  }

  private mutating func collect(_ start: [UInt8]) throws {
    let parent = try self.parent(of: start)
    let status = try parent.closeAfter { try $0.status(ofRawName: Self.lastComponent(start)) }
    let display = String(decoding: start, as: UTF8.self)
    guard let status else { throw ContainerError(.fileNotFound, "No file '\(display)' in the app's home") }
    switch status.type {
    case .regular: files.append(start)
    case .directory:
      var stack = [start]
      while let directory = stack.popLast() {
        let fd = try home.openBeneath(directory, O_RDONLY | O_DIRECTORY)
        defer { fd.close() }
        for entry in try fd.entries().sorted(by: { $0.name.lexicographicallyPrecedes($1.name) }) {
          let path = directory + [UInt8(ascii: "/")] + entry.name
          let type = try entry.type ?? fd.status(ofRawName: entry.name)?.type
          switch type {
          case .regular: files.append(path)
          case .directory: stack.append(path)
          case nil: continue
          default: skipped.append((String(decoding: path, as: UTF8.self), "not a regular file"))
          }
        }
      }
    case .symlink: throw ContainerError(.denied, "'\(display)' is a symbolic link; it is not followed")
    default: throw ContainerError(.denied, "'\(display)' is not a regular file or a directory")
    }
  }

  /// The first file under Documents and Library (Library/Caches left out) that `gate` says
  /// must not be read now, or nil. Walks without following symlinks; opens only files whose
  /// encrypted attribute is set.
  static func firstUnavailableFile(in home: FileDescriptor, gate: ProtectionGate) throws -> String? {
    var stack: [[UInt8]] = [Array("Library".utf8), Array("Documents".utf8)]
    while let directory = stack.popLast() {
      guard let fd = try? home.openBeneath(directory, O_RDONLY | O_DIRECTORY) else { continue }
      defer { fd.close() }
      for entry in try fd.entries() {
        let path = directory + [UInt8(ascii: "/")] + entry.name
        if path == Array("Library/Caches".utf8) { continue }
        let type = try entry.type ?? fd.status(ofRawName: entry.name)?.type
        if type == .directory {
          stack.append(path)
        } else if type == .regular, try gate.mustNotRead(entry.name, in: fd) {
          return String(decoding: path, as: UTF8.self)
        }
      }
    }
    return nil
  }
}
