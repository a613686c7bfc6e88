import AppboxCore
import Foundation
import Glibc

/// A small durable record of a multi-step operation in `<root>/.appbox/journal/`, written
/// atomically before the first step that cannot be undone by one rename, and removed
/// after the last. Recovery steps read them to finish or roll back.
public struct Journal: Sendable {
  public let directory: String

  public init(root: DeviceRoot) { directory = root.journalDirectory }

  /// Writes (or replaces) the entry `name` durably.
  public func write(_ name: String, _ fields: [String: String]) throws {
    let plist = PropertyList.dictionary(fields.mapValues(PropertyList.string))
    try AtomicFile.write(plist.xmlData(), toPath: directory + "/" + name + ".plist", mode: 0o600)
  }

  /// Removes entry `name` (absent is fine) and makes the removal durable.
  public func remove(_ name: String) throws {
    guard unlink(directory + "/" + name + ".plist") == 0 || Errno.current == .noEntry else {
      throw SystemError("remove journal entry", path: name)
    }
    let fd = try FileDescriptor.open(directory, O_RDONLY | O_DIRECTORY)
    try fd.closeAfter { try $0.sync() }
  }

  /// Entries whose names start with `prefix`, with their fields. A damaged entry is an
  /// error: guessing could lose data.
  public func entries(prefix: String) throws -> [(name: String, fields: [String: String])] {
    let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
    // A temp file is an entry whose write was interrupted: it never took effect.
    for name in names where name.hasPrefix(".") { unlink(directory + "/" + name) }
    return try names.filter { $0.hasPrefix(prefix) && $0.hasSuffix(".plist") }.sorted().map { file in
      let name = String(file.dropLast(6))
      guard let data = FileManager.default.contents(atPath: directory + "/" + file),
        let dictionary = try? PropertyList.decode(data).dictionary
      else {
        throw ContainerError(
          .invalidDevice, "Journal entry '\(directory)/\(file)' is damaged; inspect it by hand")
      }
      return (name, dictionary.compactMapValues(\.string))
    }
  }
}
