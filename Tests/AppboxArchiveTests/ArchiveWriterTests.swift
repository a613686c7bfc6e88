import AppboxArchive
import Foundation
import Testing

#if canImport(Glibc)
  import Glibc
#endif

@Suite struct ArchiveWriterTests {
  @Test(arguments: ArchiveCompression.allCases)
  func fullDiskIsReportedAsIOError(compression: ArchiveCompression) throws {
    let fd = open("/dev/full", O_WRONLY | O_CLOEXEC)
    try #require(fd >= 0)
    defer { close(fd) }
    let data = patternBytes(count: 1 << 20, seed: 7)
    let error = archiveError {
      let writer = try ArchiveWriter(fileDescriptor: fd, compression: compression, name: "/dev/full")
      try writer.writeHeader(.file(b("big"), size: Int64(data.count)))
      try writer.writeData(data)
      try writer.finish()
    }
    #expect(error?.kind == .io)
    #expect(error?.errno == ENOSPC)
    #expect(error?.description.contains("/dev/full") == true)
  }

  @Test func readOnlyDescriptorIsReportedAsIOError() throws {
    try withTemporaryDirectory { dir in
      try createFile(b(dir + "/ro.tar"))
      let fd = open(dir + "/ro.tar", O_RDONLY | O_CLOEXEC)
      defer { close(fd) }
      let error = archiveError {
        let writer = try ArchiveWriter(fileDescriptor: fd, compression: .none)
        try writer.writeHeader(.file(b("f"), size: 3))
        try writer.writeData(b("abc"))
        try writer.finish()
      }
      #expect(error?.kind == .io)
      #expect(error?.errno == EBADF)
    }
  }

  /// A name that is not UTF-8 is stored as raw bytes: libarchive's conversion fails, and it
  /// tells that apart from running out of memory by looking at `errno`. An ENOMEM some
  /// earlier call left in `errno` (zstd's allocations under load left one in CI) must not turn
  /// the header into "Can't allocate memory for Linkname".
  @Test func aStaleENOMEMDoesNotFailANameThatIsNotUTF8() throws {
    let fd = open("/dev/null", O_WRONLY | O_CLOEXEC)
    defer { close(fd) }
    let writer = try ArchiveWriter(fileDescriptor: fd, compression: .none)
    errno = ENOMEM
    try writer.writeHeader(.symlink(b("Documents/odd-link"), target: [0x66, 0xFF, 0x66]))
    try writer.finishEntry()
    errno = ENOMEM
    try writer.writeHeader(.file([0x6E, 0xFE, 0x6E], size: 0))
    try writer.finishEntry()
    try writer.finish()
  }

  @Test func dataBeyondTheDeclaredSizeIsRefused() throws {
    let fd = open("/dev/null", O_WRONLY | O_CLOEXEC)
    defer { close(fd) }
    let writer = try ArchiveWriter(fileDescriptor: fd, compression: .none)
    try writer.writeHeader(.file(b("f"), size: 3))
    let error = archiveError { try writer.writeData(b("abcd")) }
    #expect(error?.kind == .invalidArgument)
    #expect(error?.entryPath == b("f"))
    // The refused write changed nothing: the declared 3 bytes still fit.
    try writer.writeData(b("abc"))
    try writer.finish()
  }

  @Test func shortDataMustBePaddedExplicitly() throws {
    try withTemporaryDirectory { dir in
      let path = dir + "/short.tar"
      let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
      defer { close(fd) }
      let writer = try ArchiveWriter(fileDescriptor: fd, compression: .none)
      try writer.writeHeader(.file(b("shrank"), size: 1000))
      try writer.writeData(b("only this"))
      #expect(writer.remainingDataSize == 991)
      #expect(archiveError { try writer.finishEntry() }?.kind == .invalidArgument)
      #expect(try writer.finishEntryPaddingWithZeros() == 991)
      try writer.writeHeader(.file(b("next"), size: 2))
      try writer.writeData(b("ok"))
      try writer.finish()

      let members = try readArchive(path)
      #expect(members.map(\.entry.path) == [b("shrank"), b("next")])
      #expect(members[0].data == b("only this") + [UInt8](repeating: 0, count: 991))
      #expect(members[1].data == b("ok"))
    }
  }

  @Test func invalidEntriesAreRefusedBeforeAnythingIsWritten() throws {
    let fd = open("/dev/null", O_WRONLY | O_CLOEXEC)
    defer { close(fd) }
    let writer = try ArchiveWriter(fileDescriptor: fd, compression: .none)
    var badTime = ArchiveEntry.file(b("t"), size: 0)
    badTime.modificationTime.nanoseconds = 1_000_000_000
    for entry in [
      ArchiveEntry.file([], size: 0), .file(b("a\0b"), size: 0), .symlink(b("l"), target: []),
      .hardlink(b("h"), target: b("x\0")), .file(b("n"), size: -1), badTime,
      ArchiveEntry(path: b("o"), type: .other(0o100000), permissions: 0o644),
    ] {
      #expect(archiveError { try writer.writeHeader(entry) }?.kind == .invalidArgument, "\(entry)")
    }
    try writer.writeHeader(.file(b("fine"), size: 0))
    try writer.finish()
  }

  @Test func callsOutOfOrderAreRefused() throws {
    let fd = open("/dev/null", O_WRONLY | O_CLOEXEC)
    defer { close(fd) }
    let writer = try ArchiveWriter(fileDescriptor: fd, compression: .gzip)
    #expect(archiveError { try writer.writeData(b("x")) }?.kind == .invalidArgument)
    #expect(archiveError { try writer.finishEntry() }?.kind == .invalidArgument)
    try writer.writeHeader(.file(b("f"), size: 1))
    #expect(archiveError { try writer.writeHeader(.file(b("g"), size: 0)) }?.kind == .invalidArgument)
    writer.abort()
    #expect(archiveError { try writer.writeData(b("x")) }?.kind == .io)
    #expect(archiveError { try writer.finish() }?.kind == .io)
  }

  @Test func uncompressedOffsetMatchesTheFileAfterFinish() throws {
    try withTemporaryDirectory { dir in
      let path = dir + "/a.tar"
      let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
      defer { close(fd) }
      let writer = try ArchiveWriter(fileDescriptor: fd, compression: .none)
      #expect(writer.uncompressedOffset == 0)
      try writer.writeHeader(.file(b("f"), size: 700))
      try writer.writeData([UInt8](repeating: 1, count: 700))
      try writer.finishEntry()
      // A ustar header (no pax header needed: ASCII name, whole-second mtime) and 700 bytes
      // padded to 1024.
      #expect(writer.uncompressedOffset == 1536)
      try writer.writeHeader(
        .file(b("g"), size: 0, modificationTime: ArchiveTimestamp(seconds: 1, nanoseconds: 5)))
      try writer.finishEntry()
      // The nanoseconds need a pax extended header: its header and one block of records.
      #expect(writer.uncompressedOffset == 1536 + 1536)
      try writer.finish()
      #expect(writer.uncompressedOffset == 3072 + 1024)
      #expect(try lstatOf(b(path)).st_size == 3072 + 1024)
    }
  }

  @Test(arguments: [ArchiveCompression.gzip, .zstd])
  func offsetsCountTheUncompressedStream(compression: ArchiveCompression) throws {
    try withTemporaryDirectory { dir in
      let members = sampleMembers()
      let plainOffsets = try writeArchive(members, to: dir + "/a.tar")
      let compressed = dir + "/a" + compression.fileSuffix
      let compressedOffsets = try writeArchive(members, to: compressed, compression: compression)
      // archive_filter_bytes(a, 0) counts what enters the compressor, so the offsets are those of
      // the tar stream, identical with and without compression...
      #expect(compressedOffsets == plainOffsets)
      // ...and that stream is byte for byte the uncompressed archive.
      let tool = compression == .gzip ? "/usr/bin/gzip" : "/usr/bin/zstd"
      let decompressed = try runTool(tool, ["-dc", compressed])
      #expect(decompressed.status == 0)
      #expect(decompressed.stdout == (try readFile(b(dir + "/a.tar"))))
    }
  }
}
