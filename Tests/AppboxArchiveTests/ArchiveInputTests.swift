// Archives from elsewhere: every compression libarchive reads, programs it needs named when
// missing, warnings kept instead of dropped, and clear reasons for damage.

import AppboxArchive
import AppboxTestSupport
import Foundation
import Testing

#if canImport(Glibc)
  import Glibc
#endif

/// A small tar made by GNU tar from one file, `hello.txt`.
private func plainTar(in dir: String) throws -> String {
  let source = dir + "/src"
  try FileManager.default.createDirectory(atPath: source, withIntermediateDirectories: false)
  try createFile(b(source + "/hello.txt"), b("hello, compressed world\n"))
  let archive = dir + "/plain.tar"
  let made = try runTool("/usr/bin/tar", ["--format=ustar", "-C", source, "-cf", archive, "hello.txt"])
  #expect(made.status == 0, "\(made.stderr)")
  return archive
}

/// The compressors of the formats libarchive reads, as shell commands from stdin to stdout.
let compressors: [(name: String, command: String)] = [
  ("gzip", "gzip -c"), ("bzip2", "bzip2 -c"), ("xz", "xz -c"), ("lzma", "xz --format=lzma -c"),
  ("lzip", "lzip -c"), ("lz4", "lz4 -c"), ("zstd", "zstd -q -c"), ("compress", "compress -c"),
  ("lzop", "lzop -c"), ("lrzip", "lrzip -q -o - "),
  (
    "uuencode",
    "python3 -c 'import sys,binascii;d=sys.stdin.buffer.read();sys.stdout.write(\"begin 644 x\\n\");[sys.stdout.write(binascii.b2a_uu(d[i:i+45]).decode()) for i in range(0,len(d),45)];sys.stdout.write(\"`\\nend\\n\")'"
  ),
]

struct ArchiveInputTests {
  @Test(arguments: compressors.map(\.name))
  func everyCompressionLibarchiveReadsIsRead(_ name: String) throws {
    let command = compressors.first { $0.name == name }!.command
    try withTemporaryDirectory { dir in
      let tar = try plainTar(in: dir)
      let compressed = dir + "/archive.tar.x"
      let input = name == "lrzip" ? "\(command)\(tar)" : "\(command) < \(tar)"
      let made = try runTool("/bin/sh", ["-c", "\(input) > \(compressed)"])
      #expect(made.status == 0, "\(name): \(made.stderr)")
      let reader = try ArchiveReader(path: compressed)
      let entry = try #require(try reader.nextEntry())
      #expect(entry.path == b("hello.txt"))
      #expect(try reader.readAllData() == b("hello, compressed world\n"))
      #expect(try reader.nextEntry() == nil)
      // Refused where only an uncompressed archive will do, naming what it is.
      let fd = open(compressed, O_RDONLY | O_CLOEXEC)
      defer { close(fd) }
      let refusal = archiveError { _ = try ArchiveReader(fileDescriptor: fd, allowCompressed: false) }
      #expect(refusal?.kind == .badData)
    }
  }

  /// One layer of compression, as every real archive has: what the filter produces must be a
  /// tar, never bid on again. (libarchive's recursive detection spins forever on a gzip that
  /// decompresses into a gzip header with an endless name: `test_read_filter_gzip_recursive`.)
  @Test func compressionInsideCompressionIsNotRead() throws {
    try withTemporaryDirectory { dir in
      let tar = try plainTar(in: dir)
      // A gzip header announcing a file name (FNAME), then 4 MiB of name without its NUL.
      let inner = dir + "/inner.gz"
      try createFile(
        b(inner), [0x1F, 0x8B, 0x08, 0x08, 0, 0, 0, 0, 0, 0x03] + [UInt8](repeating: 0x61, count: 4 << 20))
      for (name, command) in [
        ("gzip of gzip", "gzip -c \(tar) | gzip -c > \(dir)/double.gz"),
        ("endless name", "gzip -c \(inner) > \(dir)/double.gz"),
      ] {
        let made = try runTool("/bin/sh", ["-c", command])
        #expect(made.status == 0, "\(made.stderr)")
        let error = archiveError {
          let reader = try ArchiveReader(path: dir + "/double.gz")
          _ = try reader.nextEntry()
        }
        #expect(error?.kind == .badData, "\(name)")
        #expect(error?.message.hasPrefix("not a tar archive") == true, "\(name): \(error?.message ?? "")")
      }
    }
  }

  @Test func aFormatWhoseProgramIsMissingNamesTheProgram() throws {
    try withTemporaryDirectory { dir in
      // grzip's magic: libarchive has no grzip decoder of its own and runs `grzip -d`.
      let path = dir + "/archive.tar.grz"
      try createFile(b(path), b("GRZipII") + [0, 0x02, 0x04, 0x3A, 0x29] + [UInt8](repeating: 7, count: 600))
      let error = archiveError {
        let reader = try ArchiveReader(path: path)
        _ = try reader.nextEntry()
      }
      #expect(error?.kind == .unavailable)
      #expect(error?.message.contains("'grzip'") == true, "\(error?.message ?? "")")
    }
  }

  @Test func otherFormatsAreStillNotTar() throws {
    try withTemporaryDirectory { dir in
      let path = dir + "/archive.cpio"
      let made = try runTool(
        "/bin/sh", ["-c", "cd \(dir) && echo x > f && echo f | bsdtar -cf \(path) --format cpio -T -"])
      #expect(made.status == 0, "\(made.stderr)")
      let error = archiveError {
        let reader = try ArchiveReader(path: path)
        _ = try reader.nextEntry()
      }
      #expect(error?.kind == .badData)
      #expect(error?.message.hasPrefix("not a tar archive") == true)
    }
  }

  /// Malformed pax records libarchive reads around: kept as warnings, with the member.
  @Test(arguments: [
    ("missing newline", b("30 path=a/b/c/d/e/f/g/h/i/jj")),
    ("NUL in a key", b("31 SCHILY.xattr.null") + [0] + b("=fizzbuzz\n")),
    ("empty value without newline", b("9 empty=")),
  ])
  func malformedPaxRecordsAreWarnings(_ name: String, _ body: [UInt8]) throws {
    try withTemporaryDirectory { dir in
      var tar = RawTar()
      tar.paxRaw(body)
      tar.header("file.txt", size: 2)
      tar.data(b("ok"))
      tar.end()
      let path = dir + "/bad.tar"
      try createFile(b(path), tar.bytes)
      let reader = try ArchiveReader(path: path)
      let entry = try #require(try reader.nextEntry())
      #expect(entry.path == b("file.txt"))
      #expect(reader.warnings.count >= 1, "\(name)")
      #expect(reader.warnings.first?.entryPath == b("file.txt"))
      #expect(try reader.readAllData() == b("ok"))
    }
  }

  @Test func aHeaderCutShortSaysTheArchiveIsTruncated() throws {
    try withTemporaryDirectory { dir in
      var tar = RawTar()
      tar.header("PaxHeaders/x", type: "x", size: 90)
      let path = dir + "/cut.tar"
      try createFile(b(path), tar.bytes + b("30 00000=0000000000000000000000\n"))
      let error = archiveError {
        let reader = try ArchiveReader(path: path)
        while try reader.nextEntry() != nil {}
      }
      #expect(error?.kind == .badData)
      #expect(error?.message.contains("truncated") == true, "\(error?.message ?? "")")
      #expect(error?.message.contains("status") == false)
    }
  }

  /// An old GNU header whose `realsize` field is set on a plain file (Eye-Fi cards write such
  /// archives): the member holds the bytes its size field declares, as GNU tar and Python read it.
  @Test func aDenseMemberGivesTheBytesItsSizeFieldDeclares() throws {
    try withTemporaryDirectory { dir in
      var tar = RawTar()
      tar.gnuHeader("P1050238.JPG.log", size: 14, realSize: 2176)
      tar.data(b("44,44,POWERON\0"))
      tar.end()
      let path = dir + "/eyefi.tar"
      try createFile(b(path), tar.bytes)
      let reader = try ArchiveReader(path: path)
      let entry = try #require(try reader.nextEntry())
      #expect(entry.sparseRegions == nil)
      let data = try reader.readAllData()
      #expect(data == b("44,44,POWERON\0"))
      #expect(reader.deliveredLength == 14)
      let gnu = try runTool("/usr/bin/tar", ["-xOf", path])
      #expect(gnu.stdout == data)
      let python = try runTool(
        "/usr/bin/env",
        [
          "python3", "-c",
          "import tarfile,sys; t=tarfile.open(sys.argv[1]); sys.stdout.buffer.write(t.extractfile(t.next()).read())",
          path,
        ])
      #expect(python.status == 0 && python.stdout == data, "\(python.stderr)")
    }
  }
}
