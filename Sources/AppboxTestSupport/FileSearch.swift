import Foundation

/// The files under `directory` (recursively, hidden ones and SQLite's -wal/-shm included)
/// whose bytes contain `needle`, as paths relative to `directory`. Symlinks are not followed.
public func filesContaining(_ needle: [UInt8], under directory: String) -> [String] {
  guard !needle.isEmpty, let enumerator = FileManager.default.enumerator(atPath: directory) else { return [] }
  var found: [String] = []
  let pattern = Data(needle)
  for case let relative as String in enumerator {
    let path = directory + "/" + relative
    guard let attributes = try? FileManager.default.attributesOfItem(atPath: path),
      attributes[.type] as? FileAttributeType == .typeRegular,
      let content = FileManager.default.contents(atPath: path)
    else { continue }
    if content.range(of: pattern) != nil { found.append(relative) }
  }
  return found.sorted()
}
