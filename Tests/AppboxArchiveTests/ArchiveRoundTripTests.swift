import AppboxArchive
import Foundation
import Testing

#if canImport(Glibc)
  import Glibc
#endif

/// Every kind of member a home can hold, with names and metadata chosen to break lossy handling.
func sampleMembers() -> [Member] {
  let time = ArchiveTimestamp(seconds: 1_700_000_000, nanoseconds: 123_456_789)
  var big = ArchiveEntry.file(b("Documents/big.bin"), size: 3 * 1024 * 1024, modificationTime: time)
  big.extendedAttributes = [
    ArchiveExtendedAttribute(name: "user.binary", value: [0, 255, 1, 0, 0x80]),
    ArchiveExtendedAttribute(name: "user.com.apple.exclude", value: b("1")),
  ]
  var documents = ArchiveEntry.directory(
    b("Documents"), permissions: 0o750,
    modificationTime: ArchiveTimestamp(seconds: 1_600_000_000, nanoseconds: 1))
  documents.extendedAttributes = [ArchiveExtendedAttribute(name: "user.dir", value: [0xFF])]
  var owned = ArchiveEntry.file(b("Library/owned"), size: 2, permissions: 0o600, modificationTime: time)
  owned.uid = 501
  owned.gid = 20
  owned.userName = "mobile"
  owned.groupName = "staff"
  return [
    Member(entry: documents),
    Member(entry: .file(b("Documents/empty"), size: 0, modificationTime: time)),
    Member(entry: big, data: patternBytes(count: 3 * 1024 * 1024, seed: 1)),
    Member(entry: .file(b("Documents/a.txt"), size: 5, modificationTime: time), data: b("lower")),
    Member(entry: .file(b("Documents/A.txt"), size: 5, modificationTime: time), data: b("UPPER")),
    Member(entry: .hardlink(b("Documents/hard"), target: b("Documents/a.txt"), modificationTime: time)),
    Member(entry: .symlink(b("Documents/dangling"), target: b("nowhere/missing"), modificationTime: time)),
    Member(entry: .symlink(b("Documents/escape"), target: b("../../etc/passwd"), modificationTime: time)),
    Member(entry: .symlink(b("Documents/odd-link"), target: [0x66, 0xFF, 0x66], modificationTime: time)),
    Member(entry: .file(b("Documents/naïve 日本.txt"), size: 3, modificationTime: time), data: b("utf")),
    Member(entry: .file([0x66, 0xFF, 0x66], size: 3, modificationTime: time), data: b("raw")),
    Member(entry: .directory(b("Library"), permissions: 0o700, modificationTime: time)),
    Member(
      entry: .file(b("Library/tool"), size: 1, permissions: 0o4755, modificationTime: time), data: b("#")),
    Member(entry: .file(b("Library/sticky"), size: 0, permissions: 0o1777, modificationTime: time)),
    Member(entry: owned, data: b("ok")),
    Member(
      entry: ArchiveEntry(
        path: b("Library/fifo"), type: .other(UInt32(Glibc.S_IFIFO)), permissions: 0o620,
        modificationTime: time)),
  ]
}

@Suite struct ArchiveRoundTripTests {
  @Test(arguments: ArchiveCompression.allCases)
  func everyKindOfMemberComesBackExactly(compression: ArchiveCompression) throws {
    try withTemporaryDirectory { dir in
      let path = dir + "/backup" + compression.fileSuffix
      let members = sampleMembers()
      // An odd chunk size so data crosses libarchive's block boundaries unevenly.
      try writeArchive(members, to: path, compression: compression, chunkSize: 100_003)
      let read = try readArchive(path)
      #expect(read.count == members.count)
      for (written, got) in zip(members, read) {
        #expect(got.entry == written.entry, "entry \(written.entry.displayPath)")
        #expect(got.data == written.data, "data of \(written.entry.displayPath)")
      }
    }
  }

  @Test(arguments: ArchiveCompression.allCases)
  func outputStartsWithTheRightMagic(compression: ArchiveCompression) throws {
    try withTemporaryDirectory { dir in
      let path = dir + "/a" + compression.fileSuffix
      try writeArchive(
        [Member(entry: .file(b("f"), size: 1), data: b("x"))], to: path, compression: compression)
      let bytes = try readFile(b(path))
      switch compression {
      case .none: #expect(Array(bytes[257..<262]) == b("ustar"))
      case .gzip: #expect(Array(bytes[0..<2]) == [0x1F, 0x8B])
      case .zstd: #expect(Array(bytes[0..<4]) == [0x28, 0xB5, 0x2F, 0xFD])
      }
    }
  }

  @Test func uidAndGidDefaultToRootWithoutNames() throws {
    try withTemporaryDirectory { dir in
      let path = dir + "/a.tar"
      try writeArchive([Member(entry: .file(b("f"), size: 0))], to: path)
      let entry = try #require(try readArchive(path).first).entry
      #expect(entry.uid == 0 && entry.gid == 0)
      #expect(entry.userName == nil && entry.groupName == nil)
      // The ustar uname field (offset 265, 32 bytes) is empty, not "root".
      #expect(try readFile(b(path))[265..<297].allSatisfy { $0 == 0 })
    }
  }

  @Test func emptyArchiveHasNoEntries() throws {
    try withTemporaryDirectory { dir in
      let path = dir + "/empty.tar"
      try writeArchive([], to: path)
      // Just the two zero blocks that end a tar archive.
      #expect(try readFile(b(path)) == [UInt8](repeating: 0, count: 1024))
      #expect(try readArchive(path).isEmpty)
    }
  }

  @Test(arguments: [(ArchiveCompression.gzip, 1), (.gzip, 9), (.zstd, 1), (.zstd, 19)])
  func compressionLevelsProduceReadableArchives(compression: ArchiveCompression, level: Int) throws {
    try withTemporaryDirectory { dir in
      let path = dir + "/a" + compression.fileSuffix
      let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
      defer { close(fd) }
      let writer = try ArchiveWriter(fileDescriptor: fd, compression: compression, compressionLevel: level)
      let data = [UInt8](repeating: 0x41, count: 100_000)
      try writer.writeHeader(.file(b("aaaa"), size: Int64(data.count)))
      try writer.writeData(data)
      try writer.finish()
      #expect(try readFile(b(path)).count < 10_000)
      #expect(try readArchive(path).map(\.data) == [data])
    }
  }

  @Test func invalidCompressionLevelsAreRefused() throws {
    let fd = open("/dev/null", O_WRONLY)
    defer { close(fd) }
    let tooHigh = archiveError {
      _ = try ArchiveWriter(fileDescriptor: fd, compression: .zstd, compressionLevel: 99)
    }
    #expect(tooHigh?.kind == .invalidArgument)
    let withoutCompression = archiveError {
      _ = try ArchiveWriter(fileDescriptor: fd, compression: .none, compressionLevel: 3)
    }
    #expect(withoutCompression?.kind == .invalidArgument)
  }

  @Test func pathsAreNormalisedWhenRead() throws {
    try withTemporaryDirectory { dir in
      let path = dir + "/a.tar"
      try writeArchive(
        [
          Member(entry: .directory(b("./"))),
          Member(entry: .directory(b("./Documents/"))),
          Member(entry: .file(b(".//Documents/x"), size: 0)),
          Member(entry: .hardlink(b("./Documents/y"), target: b("./Documents/x"))),
          Member(entry: .symlink(b("./Documents/z"), target: b("./x/"))),
          Member(entry: .file(b("/abs/../path"), size: 0)),
        ], to: path)
      let entries = try readArchive(path).map(\.entry)
      #expect(
        entries.map(\.path) == [
          b("."), b("Documents"), b("Documents/x"), b("Documents/y"), b("Documents/z"), b("/abs/../path"),
        ])
      #expect(entries[3].linkTarget == b("Documents/x"))
      #expect(entries[4].linkTarget == b("./x/"), "symlink targets stay verbatim")
    }
  }
}
