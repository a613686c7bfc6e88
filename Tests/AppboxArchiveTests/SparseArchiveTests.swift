// Sparse members: written in GNU's pax sparse format 1.0 with only their data, read back with
// their holes (by offset, or as zeros), and the readers' oracles (GNU tar, bsdtar) agree.

import AppboxArchive
import AppboxCore
import Foundation
import Testing

#if canImport(Glibc)
  import Glibc
#endif

/// Writes one sparse member: `regions` of `data` (the logical content) inside `size` bytes.
private func writeSparse(
  _ path: String, name: String, size: Int64, regions: [ArchiveDataRegion], data: [UInt8]
) throws {
  let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
  guard fd >= 0 else { throw POSIXFailure(call: "open", code: errno) }
  defer { close(fd) }
  let writer = try ArchiveWriter(fileDescriptor: fd, compression: .none, name: path)
  var entry = ArchiveEntry.file(b(name), size: size)
  entry.sparseRegions = regions
  try writer.writeHeader(entry)
  var position: Int64 = 0
  for region in regions {
    try writer.writeZeros(region.offset - position)
    try data[Int(region.offset)..<Int(region.end)].withUnsafeBytes { try writer.writeData($0) }
    position = region.end
  }
  try writer.writeZeros(size - position)
  try writer.finishEntry()
  try writer.finish()
}

/// `size` logical bytes: pattern bytes inside `regions`, zeros elsewhere.
private func logicalContent(size: Int, regions: [ArchiveDataRegion]) -> [UInt8] {
  var content = [UInt8](repeating: 0, count: size)
  for (index, region) in regions.enumerated() {
    let bytes = patternBytes(count: Int(region.length), seed: UInt64(index + 1))
    content.replaceSubrange(Int(region.offset)..<Int(region.end), with: bytes)
  }
  return content
}

struct SparseArchiveTests {
  let size: Int64 = 8 << 20
  let regions = [
    ArchiveDataRegion(offset: 1 << 20, length: 5000), ArchiveDataRegion(offset: 3 << 20, length: 70_000),
  ]

  @Test func aSparseMemberStoresOnlyItsDataAndReadsBackWithItsHoles() throws {
    try withTemporaryDirectory { dir in
      let content = logicalContent(size: Int(size), regions: regions)
      let archive = dir + "/sparse.tar"
      try writeSparse(archive, name: "Documents/disk.img", size: size, regions: regions, data: content)
      let archiveSize = try lstatOf(b(archive)).st_size
      #expect(archiveSize < 100_000, "the 8 MiB file's holes were stored: \(archiveSize) bytes")

      let reader = try ArchiveReader(path: archive)
      let entry = try #require(try reader.nextEntry())
      #expect(entry.path == b("Documents/disk.img"))
      #expect(entry.size == size)
      // Stored widened to 512-byte blocks, as GNU tar needs.
      #expect(
        entry.sparseRegions == [
          ArchiveDataRegion(offset: 1 << 20, length: 5120),
          ArchiveDataRegion(offset: 3 << 20, length: 70_144),
        ])
      let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 4096, alignment: 16)
      defer { buffer.deallocate() }
      var rebuilt = [UInt8](repeating: 0, count: Int(size))
      var delivered: Int64 = 0
      while let chunk = try reader.readChunk(into: buffer) {
        let inRegion = (entry.sparseRegions ?? []).contains {
          chunk.offset >= $0.offset && chunk.offset + Int64(chunk.count) <= $0.end
        }
        #expect(inRegion, "data outside the map at \(chunk.offset)")
        rebuilt.replaceSubrange(
          Int(chunk.offset)..<Int(chunk.offset) + chunk.count, with: buffer[0..<chunk.count])
        delivered += Int64(chunk.count)
      }
      #expect(delivered == 75_264)
      #expect(reader.deliveredLength == size)
      #expect(rebuilt == content)
      #expect(try reader.nextEntry() == nil)
      #expect(reader.warnings.isEmpty)

      // readData gives the logical content, holes as zeros.
      let members = try readArchive(archive)
      #expect(members.count == 1 && members[0].data == content)

      // GNU tar and bsdtar extract the same bytes, and leave holes.
      for (tool, arguments) in [
        ("/usr/bin/tar", ["-xf", archive, "-C"]), ("/usr/bin/bsdtar", ["-xf", archive, "-C"]),
      ] {
        let out = dir + "/" + splitPath(tool).name
        try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: false)
        let result = try runTool(tool, arguments + [out])
        #expect(result.status == 0, "\(tool): \(result.stderr)")
        let extracted = b(out + "/Documents/disk.img")
        #expect(try readFile(extracted) == content, "\(tool)")
        #expect(Int64(try lstatOf(extracted).st_blocks) * 512 < 1 << 20, "\(tool) filled the holes")
      }
      let python = try runTool(
        "/usr/bin/python3",
        [
          "-c",
          "import tarfile,sys; t=tarfile.open(sys.argv[1]); sys.stdout.buffer.write(t.extractfile(t.next()).read())",
          archive,
        ])
      #expect(python.status == 0 && python.stdout == content, "\(python.stderr)")
    }
  }

  @Test func anAllHoleFileIsStoredAsAMapAlone() throws {
    try withTemporaryDirectory { dir in
      let archive = dir + "/holes.tar"
      try writeSparse(archive, name: "Documents/empty.img", size: 1 << 30, regions: [], data: [])
      #expect(try lstatOf(b(archive)).st_size < 10_000)
      let reader = try ArchiveReader(path: archive)
      let entry = try #require(try reader.nextEntry())
      #expect(entry.size == 1 << 30 && entry.sparseRegions == [])
      let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 4096, alignment: 16)
      defer { buffer.deallocate() }
      #expect(try reader.readChunk(into: buffer) == nil)
      #expect(reader.deliveredLength == 1 << 30)
      let listing = try runTool("/usr/bin/tar", ["-tvf", archive])
      #expect(listing.status == 0 && listing.stderr.isEmpty, "\(listing.stderr)")
      #expect(String(decoding: listing.stdout, as: UTF8.self).contains("1073741824"))
    }
  }

  @Test func dataGivenForAHoleIsRefused() throws {
    try withTemporaryDirectory { dir in
      let fd = open(dir + "/bad.tar", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
      defer { close(fd) }
      let writer = try ArchiveWriter(fileDescriptor: fd, compression: .none)
      var entry = ArchiveEntry.file(b("f"), size: 8192)
      entry.sparseRegions = [ArchiveDataRegion(offset: 4096, length: 4096)]
      try writer.writeHeader(entry)
      let error = archiveError {
        try writer.writeData([UInt8](repeating: 0, count: 4000) + [1] + [UInt8](repeating: 0, count: 95))
      }
      #expect(error?.kind == .invalidArgument)
      #expect(error?.message.contains("hole") == true)
      // Zeros in a hole are fine: they are what the hole holds.
      try writer.writeData([UInt8](repeating: 0, count: 4096))
      try writer.writeData([UInt8](repeating: 7, count: 4096))
      try writer.finishEntry()
      try writer.finish()
    }
  }

  @Test func aMapThatOverlapsOrPassesTheSizeIsNotWritten() throws {
    try withTemporaryDirectory { dir in
      let fd = open(dir + "/bad.tar", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
      defer { close(fd) }
      let writer = try ArchiveWriter(fileDescriptor: fd, compression: .none)
      for regions in [
        [ArchiveDataRegion(offset: 0, length: 10), ArchiveDataRegion(offset: 5, length: 10)],
        [ArchiveDataRegion(offset: 90, length: 20)],
      ] {
        var entry = ArchiveEntry.file(b("f"), size: 100)
        entry.sparseRegions = regions
        #expect(archiveError { try writer.writeHeader(entry) }?.kind == .invalidArgument)
      }
    }
  }

  /// GNU tar's sparse formats, each for a file that ends in a hole (the case libarchive's map
  /// ends with an empty region, and data stops before the size).
  @Test(arguments: ["gnu", "posix-0.0", "posix-0.1", "posix-1.0"])
  func membersEndingInAHoleReadWithTheirFullSize(_ format: String) throws {
    try withTemporaryDirectory { dir in
      let source = dir + "/src"
      try FileManager.default.createDirectory(atPath: source, withIntermediateDirectories: false)
      let file = b(source + "/tail-hole.db")
      try createFile(file, [UInt8](repeating: 0x5A, count: 10_000))
      guard truncate(source + "/tail-hole.db", 5 << 20) == 0 else {
        throw POSIXFailure(call: "truncate", code: errno)
      }
      let archive = dir + "/gnu.tar"
      var arguments = ["--sparse", "-C", source, "-cf", archive, "tail-hole.db"]
      if format == "gnu" {
        arguments.insert("--format=gnu", at: 0)
      } else {
        arguments.insert(contentsOf: ["--format=posix", "--sparse-version=\(format.dropFirst(6))"], at: 0)
      }
      let made = try runTool("/usr/bin/tar", arguments)
      #expect(made.status == 0, "\(made.stderr)")
      let reader = try ArchiveReader(path: archive)
      let entry = try #require(try reader.nextEntry())
      #expect(entry.path == b("tail-hole.db") && entry.size == 5 << 20)
      #expect(entry.sparseRegions != nil)
      let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 65536, alignment: 16)
      defer { buffer.deallocate() }
      var data: Int64 = 0
      while let chunk = try reader.readChunk(into: buffer) {
        #expect(buffer[0..<chunk.count].allSatisfy { $0 == 0x5A || $0 == 0 })
        data += Int64(chunk.count)
      }
      #expect(data >= 10_000 && data < 1 << 20)
      #expect(reader.deliveredLength == 5 << 20)
      #expect(reader.warnings.isEmpty)
    }
  }
}
