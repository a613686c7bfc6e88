import Glibc

/// A file written under a temporary name beside its final one and put in place whole:
/// "temp file, fsync, rename, fsync the directory". Readers see the old file or the
/// complete new one, never a mix; a crash leaves at most the temp file.
///
/// The temp file is created with `O_EXCL | O_NOFOLLOW`; `commit()` consumes the value, so a
/// staged file is committed or abandoned exactly once and its descriptor closed exactly
/// once. A staged file dropped without `commit()` (an error was thrown) is closed and its
/// temp file removed.
///
///     var staged = try StagedFile("notes.tar", in: directory, mode: 0o644)
///     try staged.descriptor.writeAll(bytes)
///     try staged.commit()
public struct StagedFile: ~Copyable {
  /// The directory both names are in; the caller keeps it open until the commit.
  public let directory: FileDescriptor
  /// The final name's raw bytes.
  public let rawName: [UInt8]
  public let temporaryName: String
  /// The permission bits the file ends with (umask does not narrow them).
  public let mode: mode_t
  private let file: FileDescriptor

  /// Creates the temp file for `name` in `directory`: `temporaryName` when given, else
  /// `StagedFile.temporaryName(for:)`. Uses `openat(2)` with `O_CREAT | O_EXCL | O_NOFOLLOW`.
  public init(
    _ name: String, in directory: FileDescriptor, temporaryName: String? = nil, mode: mode_t = 0o644,
    displayPath: String? = nil
  ) throws {
    try self.init(
      rawName: Array(name.utf8), in: directory, temporaryName: temporaryName, mode: mode,
      displayPath: displayPath)
  }

  /// `init(_:in:...)` for a final name given as raw bytes (which need not be UTF-8).
  public init(
    rawName: [UInt8], in directory: FileDescriptor, temporaryName: String? = nil, mode: mode_t = 0o644,
    displayPath: String? = nil
  ) throws {
    let temporary = temporaryName ?? StagedFile.temporaryName(for: String(decoding: rawName, as: UTF8.self))
    self.file = try directory.open(
      temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode: mode,
      displayPath: displayPath ?? String(decoding: rawName, as: UTF8.self))
    self.directory = directory
    self.rawName = rawName
    self.temporaryName = temporary
    self.mode = mode
  }

  /// The final name as text (lossy for a name that is not UTF-8).
  public var name: String { String(decoding: rawName, as: UTF8.self) }

  /// What is still to clean up: `commit()` clears these as it goes, so that whatever it
  /// did not finish, and nothing else, is undone when the value is destroyed.
  private var isOpen = true
  private var isStaged = true

  /// Abandoned (or a commit failed): close the file if still open, remove the temp name if
  /// it was not renamed.
  deinit {
    if isOpen { _ = Glibc.close(file.rawValue) }
    if isStaged { _ = Glibc.unlinkat(directory.rawValue, temporaryName, 0) }
  }

  /// The temp file, open for writing, for calls made before the commit.
  public var descriptor: FileDescriptor { file }

  /// Puts the file in place: sets its mode, fsyncs and closes it, runs `beforeRename`,
  /// renames it over the final name (with `flags`: `.noReplace` refuses an existing one)
  /// and fsyncs the directory. With `durable: false` the two fsyncs are skipped. On failure
  /// before the rename the temp file is removed and the final name is untouched.
  /// Uses `fchmod(2)`, `fsync(2)`, `close(2)` and `renameat2(2)`.
  public consuming func commit(
    flags: RenameFlags = [], durable: Bool = true, beforeRename: () throws -> Void = {}
  ) throws {
    try file.setPermissions(mode)
    if durable { try file.sync() }
    isOpen = false
    file.close()
    try beforeRename()
    try directory.rename(rawName: Array(temporaryName.utf8), to: rawName, in: directory, flags: flags)
    isStaged = false
    if durable { try directory.sync() }
  }

  /// The longest name the file system takes for one entry (`NAME_MAX`).
  public static let maximumNameLength = 255

  /// A temp name for `name`: `.<name>.tmp-<8 hex digits>`, with `name` shortened (at a
  /// character boundary) so the whole stays within `NAME_MAX` bytes.
  public static func temporaryName(for name: String) -> String {
    let suffix = ".tmp-" + String(format8Hex: UInt32.random(in: 0...UInt32.max))
    let room = maximumNameLength - 1 - suffix.utf8.count
    var kept = Substring(name)
    while kept.utf8.count > room { kept = kept.dropLast() }
    return "." + kept + suffix
  }
}

extension String {
  /// Eight lowercase hex digits, zero-padded.
  init(format8Hex value: UInt32) {
    let digits = String(value, radix: 16)
    self = String(repeating: "0", count: 8 - digits.count) + digits
  }
}
