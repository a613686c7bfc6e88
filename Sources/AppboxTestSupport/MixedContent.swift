// The benchmark's second content profile: files that compress as an app's data does, for
// measuring compression (the first, `random`, fills everything but a quarter of the files with
// random bytes, so it measures speed and deduplication, and compression gains nothing there).
//
// Three kinds of files, by extension: text (`.txt`, plists, logs: words of a seeded
// vocabulary, drawn log-uniformly so a few are common, about 3x smaller under zstd -3), records
// (`.dat` and the in-place workload's database: 4 KiB pages, 60-95% full, of rows with ids,
// times, random UUIDs and short text, about 2.3x), and media (`.jpg`, `.mov`: random bytes behind the format's
// magic number, not compressible). Everything is seeded: the same seed gives the same bytes.

import Foundation
import Glibc

/// How a generated home's files are filled.
public enum ContentProfile: String, Sendable {
  /// Random bytes, but for a quarter of the files, which repeat one line of text.
  case random
  /// Text, records and media, compressing as an app's data does.
  case mixed
}

/// What a file of the mixed profile holds.
public enum ContentClass: Sendable {
  case text, records, media

  /// The class a file's extension names (anything unknown holds records).
  public static func of(path: String) -> ContentClass {
    if path.hasSuffix(".txt") || path.hasSuffix(".plist") || path.hasSuffix(".log") { return .text }
    if path.hasSuffix(".jpg") || path.hasSuffix(".mov") || path.hasSuffix(".png") { return .media }
    return .records
  }

  /// An extension for a new file of this class.
  public var fileExtension: String {
    switch self {
    case .text: return "txt"
    case .records: return "dat"
    case .media: return "jpg"
    }
  }
}

/// Fills buffers with the mixed profile's content.
struct MixedContent {
  private var random: SeededRandom
  private let words: [[UInt8]]

  init(seed: UInt64) {
    random = SeededRandom(seed: seed ^ 0x7E47)
    var vocabulary = SeededRandom(seed: 0x766F_6361_6275)
    let letters = Array("etaoinshrdlcumwfgypbvkjxqz".utf8)
    words = (0..<4096).map { _ in
      let length = 2 + vocabulary.below(9)
      // Common letters more often, as in words.
      return (0..<length).map { _ in letters[min(vocabulary.below(26), vocabulary.below(26))] }
    }
  }

  /// A word, drawn log-uniformly: the first ones far more often than the last.
  private mutating func word() -> [UInt8] {
    let rank = Int(pow(Double(words.count), random.unit())) - 1
    return words[max(0, min(words.count - 1, rank))]
  }

  mutating func fillText(_ buffer: UnsafeMutableRawBufferPointer) {
    var position = 0
    var inLine = 0
    while position < buffer.count {
      var piece = word()
      inLine += piece.count + 1
      piece.append(inLine > 72 ? 0x0A : random.below(12) == 0 ? 0x2C : 0x20)
      if inLine > 72 { inLine = 0 }
      let count = min(piece.count, buffer.count - position)
      for index in 0..<count { buffer[position + index] = piece[index] }
      position += count
    }
  }

  /// 4 KiB pages (as a database's): a small header, then rows of an id, a time, a UUID, a
  /// number and a few words, up to 60-95% of the page.
  mutating func fillRecords(_ buffer: UnsafeMutableRawBufferPointer, startingAt offset: Int = 0) {
    var page = [UInt8](repeating: 0, count: 4096)
    var position = 0
    var pageNumber = offset / 4096
    while position < buffer.count {
      fillPage(&page, number: pageNumber)
      let count = min(page.count, buffer.count - position)
      for index in 0..<count { buffer[position + index] = page[index] }
      position += count
      pageNumber += 1
    }
  }

  mutating func fillPage(_ page: inout [UInt8], number: Int) {
    for index in page.indices { page[index] = 0 }
    func put(_ value: UInt64, _ bytes: Int, at position: inout Int) {
      for shift in 0..<bytes where position < page.count {
        page[position] = UInt8(truncatingIfNeeded: value >> (8 * UInt64(shift)))
        position += 1
      }
    }
    var position = 0
    put(0x0D, 1, at: &position)
    put(UInt64(number), 4, at: &position)
    position = 16
    var id = UInt64(number) * 40
    let base: UInt64 = 1_700_000_000_000 + UInt64(number) * 3_600_000
    // Pages are rarely full: a database leaves room in them for rows to come.
    let fill = page.count * (60 + random.below(35)) / 100
    while position < fill - 120 {
      id += 1
      put(id, 8, at: &position)
      put(base + UInt64(random.below(3_600_000)), 8, at: &position)
      put(random.next(), 8, at: &position)
      put(random.next(), 8, at: &position)
      put(UInt64(random.below(1000)), 4, at: &position)
      for _ in 0..<(1 + random.below(6)) {
        for byte in word() where position < page.count - 1 {
          page[position] = byte
          position += 1
        }
        page[position] = 0x20
        position += 1
      }
      page[position] = 0
      position += 1
    }
  }

  mutating func fillMedia(_ buffer: UnsafeMutableRawBufferPointer) { random.fill(buffer) }
}
