import AppboxCore
import AppboxPlist
import Foundation
import Glibc

/// A small durable record of a multi-step operation in `<root>/.appbox/journal/`, written
/// before the first step that cannot be undone by one rename, and removed after the last.
/// Recovery steps read them to finish or roll back. Updates (`update-*`) and home swaps
/// (`swap-*`) both keep theirs here, under one rule:
///
/// - An entry is written as a `StagedFile` (temp name, fsync, rename, fsync of the
///   directory), so an entry under its final name is always whole.
/// - A temp file (a name starting with ".") is a write that was interrupted before its
///   rename: it never took effect, and is removed (`removeInterruptedWrites`, only while no
///   other appbox is active: a live writer's temp file looks the same).
/// - An entry under its final name that cannot be read or decoded is damage, not a torn
///   write: recovery stops with an error naming it (exit 65) rather than guess, since
///   guessing wrong could lose the app's data.
public struct Journal: Sendable {
  public let directory: String

  public init(root: DeviceRoot) { directory = root.journalDirectory }

  /// Writes (or replaces) the entry `name` durably, as a binary property list.
  public func write(_ name: String, _ record: [String: PropertyList]) throws {
    let folder = try OwnedFileDescriptor.open(directory, O_RDONLY | O_DIRECTORY)
    try AtomicFile.write(
      PropertyList.dictionary(record).binaryData(), to: name + ".plist", in: folder.borrowed, mode: 0o600)
  }

  /// Writes (or replaces) the entry `name`, whose fields are all strings.
  public func write(_ name: String, _ fields: [String: String]) throws {
    try write(name, fields.mapValues(PropertyList.string))
  }

  /// Removes entry `name` (absent is fine) and makes the removal durable.
  public func remove(_ name: String) throws {
    let folder = try OwnedFileDescriptor.open(directory, O_RDONLY | O_DIRECTORY)
    guard unlinkat(folder.rawValue, name + ".plist", 0) == 0 || Errno.current == .noEntry else {
      throw SystemError("remove journal entry", path: name)
    }
    try folder.borrowed.sync()
  }

  /// Removes the temp files of interrupted writes. Call only when no other appbox is active.
  public func removeInterruptedWrites() throws {
    let folder = try OwnedFileDescriptor.open(directory, O_RDONLY | O_DIRECTORY)
    for entry in try folder.borrowed.entries() where entry.name.first == UInt8(ascii: ".") {
      try folder.borrowed.remove(rawName: entry.name)
    }
  }

  /// Entries whose names start with `prefix`, in name order, with their records (temp files
  /// are not entries). A damaged entry is an error (see the type's rule).
  public func records(prefix: String) throws -> [(name: String, record: PropertyListDictionary)] {
    let folder = try OwnedFileDescriptor.open(directory, O_RDONLY | O_DIRECTORY)
    let names = try folder.borrowed.entries().map(\.nameString)
    return try names.filter { $0.hasPrefix(prefix) && $0.hasSuffix(".plist") }.sorted().map { file in
      let name = String(file.dropLast(6))
      let damaged = ContainerError(
        .invalidDevice, "Journal entry '\(directory)/\(file)' is damaged; inspect it by hand")
      guard let entry = try? folder.borrowed.openOwned(file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK),
        let bytes = try? entry.borrowed.readAll(limit: 1 << 20),
        let record = try? PropertyList.decode(Data(bytes)).dictionary
      else { throw damaged }
      return (name, record)
    }
  }

  /// Entries whose names start with `prefix`, with their string fields.
  public func entries(prefix: String) throws -> [(name: String, fields: [String: String])] {
    try records(prefix: prefix).map { ($0.name, $0.record.compactMapValues(\.string)) }
  }
}
