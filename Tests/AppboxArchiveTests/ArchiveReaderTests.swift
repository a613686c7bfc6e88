import AppboxArchive
import CSystem
import Foundation
import Testing

#if canImport(Glibc)
  import Glibc
#endif

/// Reads the whole archive and returns the error it ends with, if any.
func readFailure(_ path: String, allowCompressed: Bool = true) -> ArchiveError? {
  archiveError {
    let reader = try ArchiveReader(path: path, allowCompressed: allowCompressed)
    while try reader.nextEntry() != nil { _ = try reader.readAllData() }
  }
}

@Suite struct ArchiveReaderTests {
  // Not iso9660: an ISO image starts with 32 KiB of zeros, which any tar reader (GNU tar too)
  // takes for the end-of-archive marker of an empty archive.
  @Test(arguments: ["zip", "cpio", "newc", "7zip", "ar", "shar"])
  func otherArchiveFormatsAreNotTar(format: String) throws {
    try withTemporaryDirectory { dir in
      try FileManager.default.createDirectory(atPath: dir + "/in", withIntermediateDirectories: false)
      try createFile(b(dir + "/in/hello.txt"), b("hello\n"))
      let made = try runTool(
        "/usr/bin/bsdtar", ["--format", format, "-cf", dir + "/out", "-C", dir + "/in", "."])
      try #require(made.status == 0, "bsdtar: \(made.stderr)")
      let error = readFailure(dir + "/out")
      #expect(error?.kind == .badData)
      #expect(error?.message.hasPrefix("not a tar archive") == true, "\(String(describing: error))")
    }
  }

  @Test func plainTextEmptyAndCompressedTextAreNotTar() throws {
    try withTemporaryDirectory { dir in
      try createFile(
        b(dir + "/text"), Array(repeating: b("just some text, not an archive\n"), count: 100).flatMap { $0 })
      try createFile(b(dir + "/empty"))
      try createFile(b(dir + "/zeros"), [UInt8](repeating: 0, count: 100))
      _ = try runTool("/usr/bin/gzip", ["-k", dir + "/text"])
      for name in ["text", "empty", "zeros", "text.gz"] {
        let error = readFailure(dir + "/" + name)
        #expect(error?.kind == .badData, "\(name)")
        #expect(
          error?.message.hasPrefix("not a tar archive") == true, "\(name): \(String(describing: error))")
      }
    }
  }

  @Test func compressedArchiveIsRefusedWhenNotAllowed() throws {
    try withTemporaryDirectory { dir in
      let path = dir + "/a.tar.zst"
      try writeArchive([Member(entry: .file(b("f"), size: 0))], to: path, compression: .zstd)
      let error = readFailure(path, allowCompressed: false)
      #expect(error?.kind == .badData)
      #expect(error?.message.contains("zstd") == true)
    }
  }

  @Test func missingFileIsNotFound() throws {
    try withTemporaryDirectory { dir in
      #expect(archiveError { _ = try ArchiveReader(path: dir + "/nope.tar") }?.kind == .notFound)
    }
  }

  @Test func failingDescriptorIsIOError() throws {
    try withTemporaryDirectory { dir in
      // read(2) on a directory fails with EISDIR: the descriptor fails, not the data.
      let fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
      defer { close(fd) }
      let error = archiveError {
        let reader = try ArchiveReader(fileDescriptor: fd)
        _ = try reader.nextEntry()
      }
      #expect(error?.kind == .io)
      #expect(error?.errno == EISDIR)
    }
  }

  @Test(arguments: ArchiveCompression.allCases)
  func truncatedMemberDataThrows(compression: ArchiveCompression) throws {
    try withTemporaryDirectory { dir in
      let path = dir + "/a" + compression.fileSuffix
      let data = patternBytes(count: 300_000, seed: 3)
      try writeArchive(
        [Member(entry: .file(b("big"), size: Int64(data.count)), data: data)], to: path,
        compression: compression)
      let whole = try readFile(b(path))
      try createFile(b(path), Array(whole[0..<(whole.count / 2)]))
      let reader = try ArchiveReader(path: path)
      #expect(try reader.nextEntry()?.path == b("big"))
      let error = archiveError { _ = try reader.readAllData() }
      #expect(error?.kind == .badData)
      #expect(error?.entryPath == b("big"))
      // The reader stays failed instead of pretending the archive ended.
      #expect(archiveError { _ = try reader.nextEntry() }?.kind == .badData)
    }
  }

  @Test func truncatedHeaderThrows() throws {
    try withTemporaryDirectory { dir in
      let path = dir + "/a.tar"
      try writeArchive(
        [
          Member(entry: .file(b("first"), size: 1), data: b("1")),
          Member(
            entry: .file(
              b("second"), size: 1, modificationTime: ArchiveTimestamp(seconds: 5, nanoseconds: 5)),
            data: b("2")),
        ], to: path)
      let whole = try readFile(b(path))
      // Cut inside the second member's pax extended header (it starts at 1024).
      try createFile(b(path), Array(whole[0..<1300]))
      let reader = try ArchiveReader(path: path)
      #expect(try reader.nextEntry()?.path == b("first"))
      #expect(archiveError { _ = try reader.nextEntry() }?.kind == .badData)
    }
  }

  @Test func corruptedHeaderChecksumThrows() throws {
    try withTemporaryDirectory { dir in
      let path = dir + "/a.tar"
      try writeArchive(
        [
          Member(entry: .file(b("first"), size: 1), data: b("1")),
          Member(entry: .file(b("second"), size: 1), data: b("2")),
        ], to: path)
      var bytes = try readFile(b(path))
      // Both members have plain ustar headers (no pax header needed); the second starts at 1024.
      #expect(Array(bytes[1024..<1030]) == b("second"))
      bytes[1024] = UInt8(ascii: "S")
      try createFile(b(path), bytes)
      let reader = try ArchiveReader(path: path)
      #expect(try reader.nextEntry()?.path == b("first"))
      let error = archiveError { _ = try reader.nextEntry() }
      #expect(error?.kind == .badData)
      // A corrupted first header means it is not recognisable as tar at all.
      bytes[0] = UInt8(ascii: "F")
      try createFile(b(path), bytes)
      #expect(readFailure(path)?.kind == .badData)
    }
  }

  @Test func readerStartsAtARecordedHeaderOffset() throws {
    try withTemporaryDirectory { dir in
      let path = dir + "/a.tar"
      let time = ArchiveTimestamp(seconds: 1_700_000_000, nanoseconds: 999_999_999)
      let members = (0..<12).map { index in
        // Varying sizes and names (some need pax headers, some not) move headers around.
        let data = patternBytes(count: index * 1000 + index % 3, seed: UInt64(index))
        let name = index % 2 == 0 ? b("Documents/file-\(index)") : b("Documents/naïve-\(index)-") + [0xFF]
        return Member(
          entry: .file(
            name, size: Int64(data.count),
            modificationTime: index % 3 == 0 ? time : ArchiveTimestamp(seconds: 9)), data: data)
      }
      let offsets = try writeArchive(members, to: path)

      // The reader reports the same offsets when reading from the start.
      let sequential = try ArchiveReader(path: path)
      var seen: [Int64] = []
      while try sequential.nextEntry() != nil { seen.append(try #require(sequential.headerOffset)) }
      #expect(seen == offsets)

      let fd = open(path, O_RDONLY | O_CLOEXEC)
      defer { close(fd) }
      for index in [11, 0, 5, 6, 1] {
        let reader = try ArchiveReader(fileDescriptor: fd, startingAt: offsets[index])
        let entry = try #require(try reader.nextEntry())
        #expect(entry == members[index].entry)
        #expect(reader.headerOffset == offsets[index])
        #expect(try reader.readAllData() == members[index].data)
        // Reading goes on to the following members and ends normally.
        var rest = 0
        while try reader.nextEntry() != nil { rest += 1 }
        #expect(rest == members.count - index - 1)
      }
    }
  }

  @Test func skippingDataMovesToTheNextMember() throws {
    try withTemporaryDirectory { dir in
      let path = dir + "/a.tar.gz"
      let data = patternBytes(count: 200_000, seed: 9)
      try writeArchive(
        [
          Member(entry: .file(b("skipped"), size: Int64(data.count)), data: data),
          Member(entry: .file(b("kept"), size: 2), data: b("ok")),
        ],
        to: path, compression: .gzip)
      let reader = try ArchiveReader(path: path)
      #expect(archiveError { try reader.skipData() }?.kind == .invalidArgument)
      _ = try reader.nextEntry()
      var partial = [UInt8](repeating: 0, count: 10)
      #expect(try partial.withUnsafeMutableBytes { try reader.readData(into: $0) } == 10)
      #expect(partial == Array(data[0..<10]))
      try reader.skipData()
      #expect(try reader.nextEntry()?.path == b("kept"))
      #expect(try reader.readAllData() == b("ok"))
      #expect(try reader.nextEntry() == nil)
      #expect(try reader.nextEntry() == nil)
    }
  }

  @Test func readsFromAPipe() throws {
    try withTemporaryDirectory { dir in
      let path = dir + "/a.tar.zst"
      let members = sampleMembers()
      try writeArchive(members, to: path, compression: .zstd)
      let bytes = try readFile(b(path))
      var ends: [Int32] = [0, 0]
      try #require(appbox_pipe_cloexec(&ends) == 0)  // a child another test starts must not hold it
      let (readEnd, writeEnd) = (ends[0], ends[1])
      defer { close(readEnd) }
      // A pipe cannot seek: skipping falls back to reading and discarding.
      let feeder = Thread {
        bytes.withUnsafeBytes { buffer in
          var done = 0
          while done < buffer.count {
            let count = write(writeEnd, buffer.baseAddress! + done, buffer.count - done)
            if count <= 0 { break }
            done += count
          }
        }
        close(writeEnd)
      }
      feeder.start()
      let reader = try ArchiveReader(fileDescriptor: readEnd)
      var paths: [[UInt8]] = []
      while let entry = try reader.nextEntry() {
        paths.append(entry.path)
        if entry.path == b("Documents/a.txt") { #expect(try reader.readAllData() == b("lower")) }
      }
      #expect(paths == members.map(\.entry.path))
    }
  }
}
