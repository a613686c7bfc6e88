// The platform's backup anti-patterns, recognised by name and type: what `advise` flags.
//
// The platform's guidance: Documents holds what the user made; anything the app can download
// or rebuild again (thumbnails, caches, logs, downloaded media, scratch files) belongs in
// Library/Caches, which is never backed up, or should carry the exclude-from-backup mark.
// Databases should be updated in place (SQLite's journal or WAL) rather than written anew
// and renamed over the old file, which makes every backup store the whole file.
//
// Names are split into lowercase words at punctuation, digits and camelCase humps
// ("ThumbnailCache" is "thumbnail" and "cache", "catalog" is only "catalog"), so a word, not
// a substring, decides. Names are raw bytes; only ASCII letters are looked at.

/// Why some data looks regenerable.
public enum RegenerableKind: String, Sendable, CaseIterable {
  case thumbnails, caches, logs
  case downloads = "downloaded media"
  case temporary = "temporary files"
}

enum NameClassifier {
  private static let regenerableWords: [String: RegenerableKind] = [
    "thumb": .thumbnails, "thumbs": .thumbnails, "thumbnail": .thumbnails, "thumbnails": .thumbnails,
    "preview": .thumbnails, "previews": .thumbnails,
    "cache": .caches, "caches": .caches, "cached": .caches,
    "log": .logs, "logs": .logs,
    "download": .downloads, "downloads": .downloads, "downloaded": .downloads, "offline": .downloads,
    "tmp": .temporary, "temp": .temporary, "temporary": .temporary, "scratch": .temporary,
  ]
  private static let fileExtensions: [String: RegenerableKind] = [
    "log": .logs, "trace": .logs, "cache": .caches, "thm": .thumbnails,
    "tmp": .temporary, "temp": .temporary, "part": .temporary, "partial": .temporary,
    "crdownload": .temporary, "download": .temporary,
  ]
  /// Words of a folder (or file) name that make media inside it downloaded rather than made.
  private static let mediaSourceWords: Set<String> = [
    "download", "downloads", "downloaded", "offline", "podcast", "podcasts", "episode", "episodes",
    "stream", "streams", "streaming",
  ]
  private static let mediaExtensions: Set<String> = [
    "mp4", "m4v", "mov", "mkv", "webm", "avi", "mp3", "m4a", "aac", "wav", "flac", "ogg", "opus",
  ]
  private static let databaseExtensions: Set<String> = [
    "sqlite", "sqlite3", "sqlitedb", "db", "db3", "store", "realm",
  ]
  /// Every word and extension above starts with one of these letters pairs; names without
  /// any are dismissed without being split (most names of a large home).
  private static let triggers: [[UInt8]] = [
    "th", "pr", "ca", "lo", "do", "of", "tm", "te", "sc", "tr", "pa", "cr", "po", "ep", "st", "mp", "m4",
    "mo", "mk", "we", "av", "aa", "wa", "fl", "og", "op", "sq", "db", "re",
  ].map { Array($0.utf8) }

  /// The lowercase ASCII words of a name, split at anything else and at camelCase humps.
  static func words(of name: some Collection<UInt8>) -> [String] {
    var result: [String] = []
    var word: [UInt8] = []
    var previousWasLower = false
    for byte in name {
      let isUpper = byte >= 65 && byte <= 90
      let isLower = byte >= 97 && byte <= 122
      if isUpper && previousWasLower || !(isUpper || isLower) {
        if !word.isEmpty { result.append(String(decoding: word, as: UTF8.self)) }
        word.removeAll(keepingCapacity: true)
      }
      if isUpper || isLower { word.append(isUpper ? byte + 32 : byte) }
      previousWasLower = isLower
    }
    if !word.isEmpty { result.append(String(decoding: word, as: UTF8.self)) }
    return result
  }

  /// The lowercase extension after the last dot, if it is a short ASCII word.
  static func fileExtension(of name: some Collection<UInt8>) -> String? {
    let bytes = Array(name)
    guard let dot = bytes.lastIndex(of: UInt8(ascii: ".")), dot > 0, bytes.count - dot - 1 <= 12 else {
      return nil
    }
    let tail = bytes[(dot + 1)...]
    guard !tail.isEmpty,
      tail.allSatisfy({ ($0 | 0x20) >= 97 && ($0 | 0x20) <= 122 || ($0 >= 48 && $0 <= 57) })
    else { return nil }
    return String(decoding: tail.map { $0 >= 65 && $0 <= 90 ? $0 + 32 : $0 }, as: UTF8.self)
  }

  /// The trigger pairs as a table indexed by `first << 8 | second`.
  private static let triggerTable: [Bool] = {
    var table = [Bool](repeating: false, count: 1 << 16)
    for trigger in triggers { table[Int(trigger[0]) << 8 | Int(trigger[1])] = true }
    return table
  }()

  /// Whether the name holds any two-letter start of a word worth splitting for: one table
  /// lookup per byte, for the hundreds of thousands of names of a large snapshot.
  static func mayMatch(_ name: some Collection<UInt8>) -> Bool {
    triggerTable.withUnsafeBufferPointer { table in
      var previous = 0
      for byte in name {
        let lower = Int(byte >= 65 && byte <= 90 ? byte + 32 : byte)
        if table[previous << 8 | lower] { return true }
        previous = lower
      }
      return false
    }
  }

  /// What a folder's name says its content is, if regenerable.
  static func regenerableKind(ofDirectory name: some Collection<UInt8>) -> RegenerableKind? {
    guard mayMatch(name) else { return nil }
    return words(of: name).lazy.compactMap { regenerableWords[$0] }.first
  }

  /// Whether a folder's name makes the media files inside it downloaded media.
  static func isMediaSource(_ name: some Collection<UInt8>) -> Bool {
    guard mayMatch(name) else { return false }
    return words(of: name).contains { mediaSourceWords.contains($0) }
  }

  /// What a file's name and extension say it is, if regenerable. `inMediaSource`: a folder
  /// above it names a download or streaming source.
  static func regenerableKind(ofFile name: some Collection<UInt8>, inMediaSource: Bool) -> RegenerableKind? {
    guard mayMatch(name) else { return nil }
    let fileExtension = fileExtension(of: name)
    if let fileExtension, let kind = fileExtensions[fileExtension] { return kind }
    if let fileExtension, mediaExtensions.contains(fileExtension),
      inMediaSource || words(of: name).contains(where: { mediaSourceWords.contains($0) })
    {
      return .downloads
    }
    let stem = fileExtension.map { Array(name).dropLast($0.utf8.count + 1) } ?? Array(name)[...]
    return words(of: stem).lazy.compactMap { regenerableWords[$0] }.first
  }

  /// Whether a file's name is a database's (SQLite, Core Data, Realm); journals and WAL
  /// sidecars are not the database.
  static func isDatabase(_ name: some Collection<UInt8>) -> Bool {
    guard mayMatch(name), let fileExtension = fileExtension(of: name) else { return false }
    return databaseExtensions.contains(fileExtension)
  }
}
