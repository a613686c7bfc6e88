// The seeded home generator shared by the benchmark (`appbox-bench generate`) and the tests
// (seeded histories for `advise` and `why`): the same seed gives the same tree everywhere.

import AppboxPlist
import Foundation
import Glibc

/// A small, fast, seeded generator (SplitMix64): the same seed gives the same tree on
/// every machine.
public struct SeededRandom {
  private var state: UInt64
  public init(seed: UInt64) { state = seed &+ 0x9E37_79B9_7F4A_7C15 }

  public mutating func next() -> UInt64 {
    state &+= 0x9E37_79B9_7F4A_7C15
    var z = state
    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
  }

  public mutating func below(_ bound: Int) -> Int { Int(next() % UInt64(max(bound, 1))) }
  public mutating func unit() -> Double { Double(next() >> 11) / Double(1 << 53) }

  /// Fills `buffer` with pseudo-random bytes (incompressible content).
  public mutating func fill(_ buffer: UnsafeMutableRawBufferPointer) {
    var index = 0
    while index + 8 <= buffer.count {
      buffer.storeBytes(of: next(), toByteOffset: index, as: UInt64.self)
      index += 8
    }
    while index < buffer.count {
      buffer[index] = UInt8(truncatingIfNeeded: next())
      index += 1
    }
  }
}

/// Writes files of pseudo-random content, reusing one buffer.
public final class ContentWriter {
  private var random: SeededRandom
  private let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
  private var text: [UInt8]
  /// The mixed profile's content (MixedContent.swift); nil for the random profile.
  private var mixed: MixedContent?

  public init(seed: UInt64, profile: ContentProfile = .random) {
    random = SeededRandom(seed: seed)
    random.fill(buffer)
    // Some files compress (text-like); most do not (photos, media, databases).
    text = Array("The quick brown fox jumps over the lazy dog; appbox benchmark line.\n".utf8)
    if profile == .mixed { mixed = MixedContent(seed: seed) }
  }

  public var profile: ContentProfile { mixed == nil ? .random : .mixed }

  /// Creates (or replaces) `path` with `size` bytes of `kind`: in the random profile, text
  /// repeats one line and the rest is random; in the mixed profile, each kind as
  /// MixedContent.swift makes it (media behind its format's magic number).
  public func write(_ path: String, size: Int, kind: ContentClass) throws {
    guard mixed != nil else {
      try write(path, size: size, compressible: kind == .text)
      return
    }
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
    guard fd >= 0 else { throw GeneratorError("cannot create \(path): \(String(cString: strerror(errno)))") }
    defer { close(fd) }
    var done = 0
    while done < size {
      let chunk = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<min(size - done, buffer.count)])
      switch kind {
      case .text: mixed!.fillText(chunk)
      case .records: mixed!.fillRecords(chunk, startingAt: done)
      case .media:
        mixed!.fillMedia(chunk)
        if done == 0 {
          let magic: [UInt8] =
            path.hasSuffix(".mov") ? [0, 0, 0, 0x14] + Array("ftypqt  ".utf8) : [0xFF, 0xD8, 0xFF, 0xE0]
          for (index, byte) in magic.enumerated() where index < chunk.count { chunk[index] = byte }
        }
      }
      var offset = 0
      while offset < chunk.count {
        let n = Glibc.write(fd, chunk.baseAddress! + offset, chunk.count - offset)
        guard n > 0 else { throw GeneratorError("cannot write \(path): \(String(cString: strerror(errno)))") }
        offset += n
      }
      done += chunk.count
    }
  }

  /// A database page of the mixed profile (nil in the random profile).
  func recordPage(_ number: Int) -> [UInt8]? {
    guard mixed != nil else { return nil }
    var page = [UInt8](repeating: 0, count: InPlaceFiles.pageSize)
    mixed!.fillPage(&page, number: number)
    return page
  }

  deinit { buffer.deallocate() }

  /// Creates (or replaces) `path` with `size` bytes; `compressible` files repeat text.
  public func write(_ path: String, size: Int, compressible: Bool = false) throws {
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
    guard fd >= 0 else { throw GeneratorError("cannot create \(path): \(String(cString: strerror(errno)))") }
    defer { close(fd) }
    var remaining = size
    while remaining > 0 {
      let chunk = min(remaining, buffer.count)
      if compressible {
        let written = text.withUnsafeBytes { source -> Int in
          var offset = 0
          while offset < chunk {
            let n = min(source.count, chunk - offset)
            (buffer.baseAddress! + offset).copyMemory(from: source.baseAddress!, byteCount: n)
            offset += n
          }
          return chunk
        }
        _ = written
      } else {
        // Every byte fresh: no two files (or two versions of a file) share a block, as with real
        // photos, media and databases, so deduplication cannot find what is not there.
        random.fill(UnsafeMutableRawBufferPointer(rebasing: buffer[0..<chunk]))
      }
      var offset = 0
      while offset < chunk {
        let n = Glibc.write(fd, buffer.baseAddress! + offset, chunk - offset)
        guard n > 0 else { throw GeneratorError("cannot write \(path): \(String(cString: strerror(errno)))") }
        offset += n
      }
      remaining -= chunk
    }
  }

  public var rng: SeededRandom {
    get { random }
    set { random = newValue }
  }
}

public struct GeneratorError: Error, CustomStringConvertible {
  public var description: String
  public init(_ description: String) { self.description = description }
}

public func makeDirectories(_ path: String) throws {
  try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
}

/// The shape of a generated home.
public struct HomeShape {
  public var files: Int
  public var bytes: Int64
  public var seed: UInt64
  public init(files: Int, bytes: Int64, seed: UInt64) {
    self.files = files
    self.bytes = bytes
    self.seed = seed
  }
}

/// Generates a bundle like a real app's: ~200 files, ~30 MB (an executable, frameworks,
/// many small assets, localizations, plists).
public func generateBundle(at path: String, seed: UInt64) throws {
  let writer = ContentWriter(seed: seed ^ 0xB0B)
  try makeDirectories(path)
  try makeDirectories(path + "/Frameworks")
  try makeDirectories(path + "/Assets")
  let info = """
    <?xml version="1.0" encoding="UTF-8"?>
    <!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
    <plist version="1.0">
    <dict>
    \t<key>CFBundleExecutable</key>\t<string>Bench</string>
    \t<key>CFBundleIdentifier</key>\t<string>com.example.bench</string>
    \t<key>CFBundleName</key>\t<string>Bench</string>
    \t<key>CFBundleShortVersionString</key>\t<string>1.0</string>
    \t<key>CFBundleVersion</key>\t<string>1</string>
    \t<key>UIFileSharingEnabled</key>\t<true/>
    </dict>
    </plist>

    """
  try info.write(toFile: path + "/Info.plist", atomically: false, encoding: .utf8)
  try "#!/bin/sh\necho Bench\n".write(toFile: path + "/Bench", atomically: false, encoding: .utf8)
  chmod(path + "/Bench", 0o755)
  try writer.write(path + "/Bench.bin", size: 4 << 20)
  for index in 0..<6 { try writer.write(path + "/Frameworks/Lib\(index).so", size: 3 << 20) }
  for language in ["Base", "en", "fr", "de", "ja"] {
    try makeDirectories(path + "/\(language).lproj")
    for index in 0..<4 {
      try writer.write(path + "/\(language).lproj/Strings\(index).strings", size: 6000, compressible: true)
    }
  }
  // The rest: assets, ~2% of them larger.
  var random = SeededRandom(seed: seed ^ 0xA55E7)
  for index in 0..<170 {
    let size = random.below(50) == 0 ? 2 << 20 : 8_000 + random.below(40_000)
    try writer.write(path + "/Assets/asset-\(index).png", size: size)
  }
}

/// Fills a home's Documents, Library, Library/Caches and tmp with `shape.files` files and
/// about `shape.bytes` bytes: many small files, some medium, a few large; nested folders;
/// a few plists in Library/Preferences. The mixed profile lays out the same tree, its files
/// holding text (`.txt`, a quarter), records (`.dat`) and media (`.jpg`, 3 in 8 of the rest).
public func generateData(home: String, shape: HomeShape, profile: ContentProfile = .random) throws {
  var random = SeededRandom(seed: shape.seed)
  let writer = ContentWriter(seed: shape.seed ^ 0xDA7A, profile: profile)
  // Where files go: Documents 60%, Library 15%, Library/Caches 20%, tmp 5%.
  let areas: [(String, Double)] = [
    ("Documents", 0.60), ("Library/Application Support", 0.15),
    ("Library/Caches", 0.20), ("tmp", 0.05),
  ]
  // Sizes: 90% small (1-16 KB), 9% medium (64 KB-1 MB), 1% large; scaled to the byte budget.
  var sizes: [Int] = (0..<shape.files).map { _ in
    let roll = random.below(1000)
    if roll < 900 { return 1024 + random.below(15 * 1024) }
    if roll < 990 { return 65536 + random.below(960 * 1024) }
    return 4 << 20 + random.below(12 << 20)
  }
  let total = sizes.reduce(0, +)
  let scale = Double(shape.bytes) / Double(max(total, 1))
  sizes = sizes.map { max(0, Int(Double($0) * scale)) }

  for preference in ["com.example.bench", "com.example.bench.widgets", "com.apple.analytics"] {
    try makeDirectories(home + "/Library/Preferences")
    try writer.write(home + "/Library/Preferences/\(preference).plist", size: 2_000, kind: .text)
  }
  var fileIndex = 0
  for (area, share) in areas {
    let count = area == "tmp" ? shape.files - fileIndex : Int(Double(shape.files) * share)
    var directory = home + "/" + area
    var inDirectory = 0
    for _ in 0..<max(count, 0) where fileIndex < shape.files {
      // A new folder every 20-80 files, nested up to four levels deep.
      if inDirectory == 0 || inDirectory > 20 + random.below(60) {
        let depth = 1 + random.below(4)
        directory =
          home + "/" + area + (0..<depth).map { level in "/folder-\(level)-\(random.below(12))" }.joined()
        try makeDirectories(directory)
        inDirectory = 0
      }
      let compressible = random.below(4) == 0
      if profile == .mixed {
        let kind: ContentClass = compressible ? .text : fileIndex % 8 < 3 ? .media : .records
        try writer.write(
          directory + "/file-\(fileIndex).\(kind.fileExtension)", size: sizes[fileIndex], kind: kind)
      } else {
        try writer.write(
          directory + "/file-\(fileIndex).\(compressible ? "txt" : "bin")", size: sizes[fileIndex],
          compressible: compressible)
      }
      fileIndex += 1
      inDirectory += 1
    }
  }
}

/// Modifies, adds and deletes `percent`% of the files in Documents and Library (not Caches):
/// half rewritten in place (same size, new bytes at the front), a quarter deleted, and as
/// many new files added beside them. In the mixed profile, each file is rewritten as its kind
/// and the new ones are text, records and media in turn.
public func mutate(
  home: String, percent: Double, seed: UInt64, profile: ContentProfile = .random
) throws -> (modified: Int, deleted: Int, added: Int) {
  var files: [String] = []
  for area in ["Documents", "Library"] {
    guard let enumerator = FileManager.default.enumerator(atPath: home + "/" + area) else { continue }
    while let relative = enumerator.nextObject() as? String {
      if area == "Library" && relative.hasPrefix("Caches") { continue }
      let path = home + "/" + area + "/" + relative
      var st = stat()
      if lstat(path, &st) == 0 && st.st_mode & S_IFMT == S_IFREG { files.append(path) }
    }
  }
  files.sort()
  var random = SeededRandom(seed: seed)
  let writer = ContentWriter(seed: seed ^ 0x3A7E, profile: profile)
  let count = max(1, Int(Double(files.count) * percent / 100))
  var chosen = Set<Int>()
  while chosen.count < min(count, files.count) { chosen.insert(random.below(files.count)) }
  var result = (modified: 0, deleted: 0, added: 0)
  for (order, index) in chosen.sorted().enumerated() {
    let path = files[index]
    switch order % 4 {
    case 0, 1:
      var st = stat()
      lstat(path, &st)
      try writer.write(path, size: Int(st.st_size), kind: rewritten(path, profile))
      result.modified += 1
    case 2:
      unlink(path)
      result.deleted += 1
    default:
      let directory = String(path[..<path.lastIndex(of: "/")!])
      try writeAdded(
        writer, directory, name: "added-\(seed)-\(order)", order: order, size: 2048 + random.below(30_000))
      result.added += 1
    }
  }
  return result
}

/// What a rewritten file holds: its kind in the mixed profile; random bytes in the random one,
/// whatever its name.
private func rewritten(_ path: String, _ profile: ContentProfile) -> ContentClass {
  profile == .mixed ? ContentClass.of(path: path) : .records
}

/// A new file: `.bin` (random) in the random profile; text, records or media in turn in the
/// mixed one.
private func writeAdded(
  _ writer: ContentWriter, _ directory: String, name: String, order: Int, size: Int
) throws {
  guard writer.profile == .mixed else {
    try writer.write(directory + "/" + name + ".bin", size: size)
    return
  }
  let kind = [ContentClass.text, .records, .media][order / 4 % 3]
  try writer.write(directory + "/" + name + "." + kind.fileExtension, size: size, kind: kind)
}

/// The files the in-place workload edits: a 64 MB database in Library/Application Support and
/// media files of 1 to 64 MB in Documents/Media (paths relative to the home).
public enum InPlaceFiles {
  public static let database = "Library/Application Support/Store.sqlite"
  public static let media = (0..<6).map { "Documents/Media/clip-\($0).mov" }
  public static let mediaSizes = [1 << 20, 3 << 20, 6 << 20, 12 << 20, 24 << 20, 64 << 20]
  public static let databaseSize = 64 << 20
  public static let pageSize = 4096
}

/// Creates the in-place workload's database and media files (fresh content; in the mixed
/// profile the database holds records).
public func generateInPlaceFiles(home: String, seed: UInt64, profile: ContentProfile = .random) throws {
  let writer = ContentWriter(seed: seed ^ 0x5EED, profile: profile)
  try makeDirectories(home + "/Library/Application Support")
  try makeDirectories(home + "/Documents/Media")
  try writer.write(home + "/" + InPlaceFiles.database, size: InPlaceFiles.databaseSize, kind: .records)
  for (path, size) in zip(InPlaceFiles.media, InPlaceFiles.mediaSizes) {
    try writer.write(home + "/" + path, size: size, kind: .media)
  }
}

/// What a workload changed.
public struct Mutation: CustomStringConvertible {
  public var modified = 0
  public var deleted = 0
  public var added = 0
  /// Files saved atomically (written to a temp name, renamed over the old one: a new inode).
  public var savedAtomically = 0
  /// Bytes written in place into the database and the media files.
  public var editedInPlace: Int64 = 0
  public var description: String {
    "modified \(modified), deleted \(deleted), added \(added), saved atomically \(savedAtomically), edited in place \(editedInPlace) bytes"
  }
}

/// The independent workload's 1% change, the way apps change their data: `percent`% of the
/// files in Documents and Library (not Caches) chosen as `mutate` chooses them, half of those
/// saved atomically with new content (temp file + rename: a new inode, as Core Data's and most
/// editors' saves do), a quarter deleted, as many new files added; and, in place (same inode,
/// `pwrite`), `percent`% of the database's 4 KB pages (the header page and runs of 1 to 8
/// neighbouring pages, as SQLite's B-tree updates touch them) and two media files (a 64 KB
/// metadata block rewritten where it lies, and 256 KB appended).
public func mutateInPlace(
  home: String, percent: Double, seed: UInt64, profile: ContentProfile = .random
) throws -> Mutation {
  var result = Mutation()
  var random = SeededRandom(seed: seed)
  let writer = ContentWriter(seed: seed ^ 0x1A7E, profile: profile)
  // Files, as `mutate` picks them (the in-place files are edited separately).
  var files: [String] = []
  let skip = Set(([InPlaceFiles.database] + InPlaceFiles.media).map { home + "/" + $0 })
  for area in ["Documents", "Library"] {
    guard let enumerator = FileManager.default.enumerator(atPath: home + "/" + area) else { continue }
    while let relative = enumerator.nextObject() as? String {
      if area == "Library" && relative.hasPrefix("Caches") { continue }
      let path = home + "/" + area + "/" + relative
      var st = stat()
      if lstat(path, &st) == 0 && st.st_mode & S_IFMT == S_IFREG && !skip.contains(path) {
        files.append(path)
      }
    }
  }
  files.sort()
  let count = max(1, Int(Double(files.count) * percent / 100))
  var chosen = Set<Int>()
  while chosen.count < min(count, files.count) { chosen.insert(random.below(files.count)) }
  for (order, index) in chosen.sorted().enumerated() {
    let path = files[index]
    switch order % 4 {
    case 0, 1:
      var st = stat()
      lstat(path, &st)
      try writer.write(path + ".saving", size: Int(st.st_size), kind: rewritten(path, profile))
      guard rename(path + ".saving", path) == 0 else { throw GeneratorError("cannot rename over \(path)") }
      result.savedAtomically += 1
    case 2:
      unlink(path)
      result.deleted += 1
    default:
      let directory = String(path[..<path.lastIndex(of: "/")!])
      try writeAdded(
        writer, directory, name: "added-\(seed)-\(order)", order: order, size: 2048 + random.below(30_000))
      result.added += 1
    }
  }
  // The database: the header page, then runs of neighbouring pages, `percent`% of them.
  let pages = InPlaceFiles.databaseSize / InPlaceFiles.pageSize
  var edited = Set<Int>([0])
  while Double(edited.count) < Double(pages) * percent / 100 {
    let start = random.below(pages)
    for page in start..<min(pages, start + 1 + random.below(8)) { edited.insert(page) }
  }
  var page = [UInt8](repeating: 0, count: InPlaceFiles.pageSize)
  let database = open(home + "/" + InPlaceFiles.database, O_WRONLY | O_CLOEXEC)
  guard database >= 0 else { throw GeneratorError("cannot open the database") }
  defer { close(database) }
  for index in edited.sorted() {
    if let records = writer.recordPage(index) {
      page = records
    } else {
      page.withUnsafeMutableBytes { random.fill($0) }
    }
    _ = page.withUnsafeBytes {
      pwrite(database, $0.baseAddress, $0.count, off_t(index * InPlaceFiles.pageSize))
    }
    result.editedInPlace += Int64(InPlaceFiles.pageSize)
  }
  result.modified += 1
  // Two media files: a metadata block rewritten in place, and data appended.
  let first = random.below(InPlaceFiles.media.count)
  let second = (first + 1 + random.below(InPlaceFiles.media.count - 1)) % InPlaceFiles.media.count
  var block = [UInt8](repeating: 0, count: 64 << 10)
  block.withUnsafeMutableBytes { random.fill($0) }
  let media = open(home + "/" + InPlaceFiles.media[first], O_WRONLY | O_CLOEXEC)
  guard media >= 0 else { throw GeneratorError("cannot open a media file") }
  let size = InPlaceFiles.mediaSizes[first]
  _ = block.withUnsafeBytes {
    pwrite(media, $0.baseAddress, $0.count, off_t(random.below(size - block.count)))
  }
  close(media)
  var tail = [UInt8](repeating: 0, count: 256 << 10)
  tail.withUnsafeMutableBytes { random.fill($0) }
  let appended = open(home + "/" + InPlaceFiles.media[second], O_WRONLY | O_APPEND | O_CLOEXEC)
  guard appended >= 0 else { throw GeneratorError("cannot open a media file") }
  _ = tail.withUnsafeBytes { write(appended, $0.baseAddress, $0.count) }
  close(appended)
  result.editedInPlace += Int64(block.count + tail.count)
  result.modified += 2
  return result
}
