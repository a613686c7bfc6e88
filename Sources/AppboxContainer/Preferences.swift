// An app's preferences: `Library/Preferences/<bundle-id>.plist`, a dictionary; and an app
// group's shared defaults, `Library/Preferences/<group-id>.plist` in its container, on the
// same rules (the group's members own its Library as the app owns its own).
//
// The app owns Library, so the file and the folders above it are hostile ground: the
// path is resolved beneath the home's descriptor with no symlink followed anywhere (a
// `Library` or `Library/Preferences` the app replaced by a link is refused, 77, even one
// that stays inside the home: `Library/Preferences -> ../Notes.app` would otherwise send
// the write into the sealed bundle), the file itself is opened with O_NOFOLLOW (a symlink
// there is refused rather than followed, 77), and a file that is not a property-list
// dictionary is bad data (65). Writes read the current dictionary,
// change it, and replace the file with a binary plist atomically (temp file + rename,
// which replaces a symlink planted meanwhile instead of writing through it).

import AppboxCore
import AppboxPlist
import Foundation
import Glibc

/// The value types `defaults write --type` accepts.
public enum PreferenceType: String, CaseIterable, Sendable {
  case string, int, float, bool, date, data

  /// Parses `text` as a value of this type: int as a decimal from Int64.min to UInt64.max, float as a finite
  /// decimal, bool as true/false/yes/no/1/0, date as ISO 8601 (2024-01-02T03:04:05Z,
  /// fractional seconds allowed), data as base64. Malformed text is a usage error (64).
  public func value(parsing text: String) throws -> PropertyList {
    func invalid(_ expected: String) -> ContainerError {
      ContainerError(.invalidRequest, "'\(text)' is not \(expected)")
    }
    switch self {
    case .string: return .string(text)
    case .int:
      if let value = Int64(text) { return .integer(value) }
      // Above Int64.max: stored as the 128-bit integer Apple's binary format uses for it.
      guard let value = UInt64(text) else { throw invalid("a whole number (for --type int)") }
      return .unsignedInteger(value)
    case .float:
      guard let value = Double(text), value.isFinite else {
        throw invalid("a finite number (for --type float)")
      }
      return .real(value)
    case .bool:
      switch text.lowercased() {
      case "true", "yes", "1": return .bool(true)
      case "false", "no", "0": return .bool(false)
      default: throw invalid("a boolean: true, false, yes, no, 1 or 0")
      }
    case .date:
      guard let date = PreferenceType.parseDate(text) else {
        throw invalid("an ISO 8601 date and time in UTC such as 2024-01-02T03:04:05Z")
      }
      return .date(date)
    case .data:
      guard let data = Data(base64Encoded: text) else { throw invalid("base64 data (for --type data)") }
      return .data(data)
    }
  }

  /// ISO 8601 as in 2024-01-02T03:04:05Z or 2024-01-02T03:04:05.250+01:00.
  static func parseDate(_ text: String) -> Date? {
    let plain = ISO8601DateFormatter()
    plain.formatOptions = [.withInternetDateTime]
    if let date = plain.date(from: text) { return date }
    let fractional = ISO8601DateFormatter()
    fractional.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
    return fractional.date(from: text)
  }
}

/// A preferences file, resolved beneath its container: an app's own
/// (`Library/Preferences/<bundle-id>.plist` in its home) or an app group's shared defaults
/// (`Library/Preferences/<group-id>.plist` in the group's container, `defaults --suite`).
public struct Preferences: Sendable {
  /// The domain: the bundle identifier, or the group identifier for a suite.
  public let domain: String
  /// The directory the file lives beneath (the home, or the group's container).
  private let container: String
  /// Who the files written here belong to (nil: whoever runs appbox).
  private let owner: UInt32?
  /// Whose preferences, for messages ("com.example.notes", "group.com.example.shared").
  private let subject: String
  /// What `container` is, for messages ("the home").
  private let containerName: String
  private let root: DeviceRoot

  init(home: Home) {
    domain = home.app.bundleIdentifier
    container = home.path
    owner = AppUser.dataOwner(of: home.app)
    subject = home.app.bundleIdentifier
    containerName = "the home"
    root = home.root
  }

  init(group: GroupRecord, root: DeviceRoot) {
    domain = group.identifier
    container = root.groupContainer(group.containerID)
    owner = GroupOwnership.dataOwner(of: group)
    subject = "the app group \(group.identifier)"
    containerName = "the group container"
    self.root = root
  }

  /// The file's path relative to its container, as messages show it.
  public var relativePath: String { "Library/Preferences/\(domain).plist" }

  /// The whole dictionary; empty when the app has no preferences yet.
  public func dictionary() throws -> PropertyListDictionary {
    try withFolder { folder in try read(from: folder) ?? [:] }
  }

  /// The value for `key` (case-sensitive); a missing key is exit 66.
  public func value(forKey key: String) throws -> PropertyList {
    guard let value = try dictionary()[key] else { throw missing(key) }
    return value
  }

  /// Sets `key` to `value`, creating the file (and Library/Preferences) if needed.
  public func set(_ value: PropertyList, forKey key: String) throws {
    guard !key.isEmpty else { throw ContainerError(.invalidRequest, "A preference key may not be empty") }
    try withFolder(creating: true) { folder in
      var dictionary = try read(from: folder) ?? [:]
      dictionary[key] = value
      try write(dictionary, to: folder!)
    }
  }

  /// Removes `key`; a missing key (or file) is exit 66.
  public func removeValue(forKey key: String) throws {
    try withFolder { folder in
      guard let folder, var dictionary = try read(from: folder), dictionary.removeValue(forKey: key) != nil
      else {
        throw missing(key)
      }
      try write(dictionary, to: folder)
    }
  }

  private func missing(_ key: String) -> ContainerError {
    ContainerError(.keyNotFound, "No preference '\(key)' in \(relativePath) of \(subject)")
  }

  private var fileName: String { "\(domain).plist" }

  /// Runs `body` with Library/Preferences open beneath the home, or with nil when it is
  /// missing (unless `creating`, which makes it).
  private func withFolder<R>(creating: Bool = false, _ body: (FileDescriptor?) throws -> R) throws -> R {
    let contained = try ContainedDirectory.open(container, container: containerName, symlinks: .refuse)
    defer { contained.close() }
    let path = try RelativePath(validating: "Library/Preferences")
    let folder: FileDescriptor
    do {
      folder = try contained.open(path, O_RDONLY | O_DIRECTORY)
    } catch let error as SystemError where error.errno == .noEntry {
      guard creating else { return try body(nil) }
      let library = try contained.open(try RelativePath(validating: "Library"), O_RDONLY | O_DIRECTORY)
      try library.closeAfter { library in
        do {
          try library.makeDirectory("Preferences")
          if let owner {
            try DataOwnership.handOver("Preferences", in: library, to: owner)
          }
        } catch let error as SystemError where error.errno == .exists {}
      }
      folder = try contained.open(path, O_RDONLY | O_DIRECTORY)
    }
    return try folder.closeAfter { try body($0) }
  }

  /// Replaces the file atomically. A protected preferences file stays protected: the new
  /// one is created under the same class, with the same owner and mode (protection is never
  /// lowered).
  private func write(_ dictionary: PropertyListDictionary, to folder: FileDescriptor) throws {
    let bytes = PropertyList.dictionary(dictionary).binaryData()
    let protection = DeviceProtection(root: root)
    var existing: (identifier: FscryptKeyIdentifier, status: FileStatus)?
    if let fd = try? folder.open(fileName, O_RDONLY | O_NOFOLLOW | O_NONBLOCK) {
      defer { fd.close() }
      if let identifier = try fd.encryptionPolicy() { existing = (identifier, try fd.status()) }
    }
    guard let existing,
      let protectionClass = try protection.keyIdentifiers().first(where: { $0.value == existing.identifier })?
        .key
    else {
      try AtomicFile.write(bytes, to: fileName, in: folder)
      if let owner { try DataOwnership.handOver(fileName, in: folder, to: owner) }
      return
    }
    let writer = try ProtectedFileWriter(protection: protection)
    defer { writer.close() }
    let temp = Array(".\(fileName).tmp-\(UInt32.random(in: 0...UInt32.max))".utf8)
    let fd = try writer.createFile(rawName: temp, in: folder, class: protectionClass, mode: 0o600)
    do {
      try fd.closeAfter { fd in
        try fd.writeAll(bytes)
        if fchown(fd.rawValue, existing.status.uid, existing.status.gid) != 0
          && Errno.current != .notPermitted
        {
          throw SystemError("change owner", path: relativePath)
        }
        try fd.setPermissions(existing.status.permissions)
        try fd.sync()
      }
      try folder.rename(rawName: temp, to: Array(fileName.utf8), in: folder)
    } catch {
      try? folder.remove(rawName: temp)
      throw error
    }
    try folder.sync()
  }

  /// The dictionary in the preferences file, nil when there is none. Never follows a
  /// symlink and never blocks on a FIFO.
  private func read(from folder: FileDescriptor?) throws -> PropertyListDictionary? {
    guard let folder else { return nil }
    let file: FileDescriptor
    do {
      file = try folder.open(fileName, O_RDONLY | O_NOFOLLOW | O_NONBLOCK, displayPath: relativePath)
    } catch let error as SystemError where error.errno == .noEntry {
      return nil
    } catch let error as SystemError where error.errno == .tooManyLinks {
      throw ContainmentError(path: relativePath, reason: .symlink, container: containerName)
    } catch let error as SystemError where error.errno == .keyNotAvailable {
      throw ContainerError(
        .unavailable,
        "Cannot read the preferences '\(relativePath)' of \(subject): they are protected and the "
          + "device is locked; unlock it first")
    }
    let bytes: [UInt8] = try file.closeAfter { file in
      guard try file.status().type == .regular else {
        throw ContainerError(
          .invalidData, "Preferences '\(relativePath)' of \(subject) is not a file")
      }
      return try file.readAll(limit: 64 << 20)
    }
    let plist: PropertyList
    do {
      plist = try PropertyList.decode(Data(bytes))
    } catch {
      throw ContainerError(
        .invalidData,
        "Preferences '\(relativePath)' of \(subject) are not a valid property list: \(error)")
    }
    guard let dictionary = plist.dictionary else {
      throw ContainerError(
        .invalidData, "Preferences '\(relativePath)' of \(subject) are not a dictionary")
    }
    return dictionary
  }
}

extension DeviceSession {
  /// `app`'s preferences.
  public func preferences(of app: AppRecord) -> Preferences { Preferences(home: home(of: app)) }

  /// The shared defaults of app group `group` (`UserDefaults(suiteName:)` on the platform).
  public func preferences(ofGroup group: GroupRecord) -> Preferences { Preferences(group: group, root: root) }
}
