// What the reader hands back besides entries: runs of data with their offsets, and the
// warnings libarchive gave while reading around something.

/// Something libarchive read around rather than failing on: a malformed pax record it
/// skipped, an attribute it could not convert, a damaged header it resynchronised past.
public struct ArchiveWarning: Sendable, Equatable, CustomStringConvertible {
  /// The member the warning came with (nil when it came before any member).
  public var entryPath: [UInt8]?
  public var message: String

  public init(entryPath: [UInt8]?, message: String) {
    self.entryPath = entryPath
    self.message = message
  }

  public var description: String {
    guard let entryPath else { return message }
    return "'\(String(decoding: entryPath, as: UTF8.self))': \(message)"
  }
}

/// A run of data read from a member: `count` bytes that belong at `offset` of the file.
public struct ArchiveChunk: Sendable, Equatable {
  public var offset: Int64
  public var count: Int

  public init(offset: Int64, count: Int) {
    self.offset = offset
    self.count = count
  }
}
