// Framed zstd archives (FrameIndex.swift, FrameWriter.swift, FrameReader.swift): every kind of
// member through GNU tar, bsdtar and `zstd -d`; ranges read in place through the frame index;
// the stream from any member on; and damaged frames and indexes as untrusted input.

import AppboxArchive
import AppboxCore
import Foundation
import Testing

#if canImport(Glibc)
  import Glibc
#endif

/// A JPEG-looking member: its magic number, then bytes that do not compress.
private func jpegBytes(count: Int, seed: UInt64) -> [UInt8] {
  var bytes = patternBytes(count: count, seed: seed)
  bytes.replaceSubrange(0..<4, with: [0xFF, 0xD8, 0xFF, 0xE0])
  return bytes
}

/// Text that compresses about 4x.
private func textBytes(count: Int, seed: UInt64) -> [UInt8] {
  let words = [
    "lorem", "ipsum", "dolor", "sit", "amet", "archive", "frame", "backup", "restore", "note",
    "appbox", "\n", "the", "of", "a", "file",
  ]
  var state = seed | 1
  var out: [UInt8] = []
  out.reserveCapacity(count + 16)
  while out.count < count {
    state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
    out += Array(words[Int(state >> 60)].utf8)
    out.append(UInt8(ascii: state >> 40 & 7 == 0 ? "," : " "))
  }
  return Array(out.prefix(count))
}

/// The framed archive's members: the round-trip sample, plus compressible text, media large
/// enough for stored frames, and a text file large enough for frames of its own.
private func framedMembers() -> [Member] {
  let time = ArchiveTimestamp(seconds: 1_700_000_000, nanoseconds: 5)
  return sampleMembers() + [
    Member.file("Extra/notes.txt", textBytes(count: 200_000, seed: 2), modified: time),
    Member.file("Extra/photo.jpg", jpegBytes(count: 700_000, seed: 3), modified: time),
    Member.file("Extra/raw.dat", jpegBytes(count: 300_000, seed: 4), modified: time),
    Member.file("Extra/big.log", textBytes(count: 2_500_000, seed: 5), modified: time),
    Member(entry: .file(b("Extra/small.txt"), size: 10, modificationTime: time), data: b("0123456789")),
  ]
}

private struct Written {
  var offsets: [Int64]
  var dataOffsets: [Int64]
  var index: FrameIndex
  var size: Int64
}

/// Writes `members` framed; the index covers everything (it is taken after `finish`).
private func writeFramed(
  _ members: [Member], to path: String, options: FrameOptions = .standard, chunkSize: Int = 100_003
) throws -> Written {
  let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
  guard fd >= 0 else { throw POSIXFailure(call: "open", code: errno) }
  defer { close(fd) }
  let writer = try ArchiveWriter(fileDescriptor: fd, compression: .zstd, name: path, framing: options)
  let offsets = try write(members, with: writer, chunkSize: chunkSize)
  try writer.finish()
  return Written(
    offsets: offsets.headers, dataOffsets: offsets.data, index: try #require(writer.frameIndex),
    size: Int64(try lstatOf(b(path)).st_size))
}

private func archive(_ path: String, _ index: FrameIndex, size: Int64) throws -> (FramedArchive, Int32) {
  let fd = open(path, O_RDONLY | O_CLOEXEC)
  guard fd >= 0 else { throw POSIXFailure(call: "open", code: errno) }
  let framed = FramedArchive(index: index, name: path, storedSize: size) { buffer, offset in
    var done = 0
    while done < buffer.count {
      let count = pread(fd, buffer.baseAddress! + done, buffer.count - done, off_t(offset) + off_t(done))
      guard count > 0 else { break }
      done += count
    }
    return done
  }
  return (framed, fd)
}

@Suite struct FramedArchiveTests {
  @Test func everyKindOfMemberReadsBackThroughLibarchive() throws {
    try withTemporaryDirectory { dir in
      let members = framedMembers()
      let path = dir + "/framed.tar.zst"
      let written = try writeFramed(members, to: path)
      // The frames tile the file: nothing before, between or after them.
      #expect(written.index.storedEnd == written.size)
      #expect(written.index.count > 3)
      let read = try readArchive(path)
      #expect(read.count == members.count)
      for (member, got) in zip(members, read) {
        #expect(got.entry.path == member.entry.path)
        #expect(got.entry.type == member.entry.type)
        #expect(got.data == member.data, "\(member.entry.displayPath)")
      }
      // Already-compressed data went into stored frames; text into compressed ones, smaller.
      #expect(written.index.frames.contains { $0.isStored })
      #expect(written.index.frames.contains { !$0.isStored && $0.storedLength * 2 < $0.uncompressedLength })
    }
  }

  @Test func gnuTarBsdtarAndZstdReadTheFramedArchive() throws {
    try withTemporaryDirectory { dir in
      // Every member kind GNU tar writes back as it was (see GNUTarInteropTests for the names
      // that are not UTF-8), a sparse member, and the framed sample.
      let members = framedMembers().filter {
        String(validating: $0.entry.path, as: UTF8.self) != nil
          && String(validating: $0.entry.linkTarget ?? [], as: UTF8.self) != nil
      }
      var sparse = ArchiveEntry.file(b("Documents/disk.img"), size: 4 << 20)
      sparse.sparseRegions = [ArchiveDataRegion(offset: 1 << 20, length: 4096)]
      let path = dir + "/framed.tar.zst"
      let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
      let writer = try ArchiveWriter(fileDescriptor: fd, compression: .zstd, name: path, framing: .standard)
      for member in members {
        try writer.writeHeader(member.entry)
        try writer.writeData(member.data)
        try writer.finishEntry()
      }
      try writer.writeHeader(sparse)
      try writer.writeZeros(1 << 20)
      try writer.writeData(patternBytes(count: 4096, seed: 9))
      try writer.writeZeros((3 << 20) - 4096)
      try writer.finishEntry()
      try writer.finish()
      close(fd)

      for (tool, arguments) in [
        ("/usr/bin/tar", ["--zstd", "--xattrs", "--xattrs-include=user.*", "-xpf", path]),
        ("/usr/bin/bsdtar", ["-xpf", path]),
      ] {
        let out = dir + "/" + (tool as NSString).lastPathComponent
        try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: false)
        let result = try runTool(tool, arguments + ["-C", out])
        #expect(result.status == 0, "\(tool): \(result.stderr)")
        try checkExtracted(members, in: out)
        let image = try readFile(b(out + "/Documents/disk.img"))
        #expect(image.count == 4 << 20)
        #expect(Array(image[(1 << 20)..<((1 << 20) + 4096)]) == patternBytes(count: 4096, seed: 9))
      }
      let decompressed = try runTool("/usr/bin/zstd", ["-d", "-q", "-c", path])
      #expect(decompressed.status == 0, "\(decompressed.stderr)")
      try createFile(b(dir + "/plain.tar"), decompressed.stdout)
      let listing = try runTool("/usr/bin/tar", ["-tf", dir + "/plain.tar"])
      #expect(listing.status == 0)
      #expect(
        String(decoding: listing.stdout, as: UTF8.self).split(separator: "\n").count == members.count + 1)
      let test = try runTool("/usr/bin/zstd", ["-t", "-q", path])
      #expect(test.status == 0, "\(test.stderr)")
    }
  }

  @Test func rangesReadInPlaceDecodeOnlyTheFramesTheyCover() throws {
    try withTemporaryDirectory { dir in
      let members = framedMembers()
      let path = dir + "/framed.tar.zst"
      let written = try writeFramed(members, to: path)
      let (framed, fd) = try archive(path, written.index, size: written.size)
      defer { close(fd) }
      let decoder = FrameDecoder()
      for (member, offset) in zip(members, written.dataOffsets)
      where member.entry.type == .regular && !member.data.isEmpty {
        var got = [UInt8](repeating: 0, count: member.data.count)
        try got.withUnsafeMutableBytes { try decoder.read(framed, into: $0, at: offset) }
        #expect(got == member.data, "\(member.entry.displayPath)")
        // A piece from the middle, as a chunk or a restore's piece is read.
        if member.data.count > 1000 {
          var piece = [UInt8](repeating: 0, count: 777)
          try piece.withUnsafeMutableBytes { try decoder.read(framed, into: $0, at: offset + 301) }
          #expect(piece == Array(member.data[301..<1078]))
        }
      }
      // Reading again inside the frame decoded last decodes nothing.
      let small = members.firstIndex { $0.entry.path == b("Extra/small.txt") }!
      var bytes = [UInt8](repeating: 0, count: 10)
      try bytes.withUnsafeMutableBytes { try decoder.read(framed, into: $0, at: written.dataOffsets[small]) }
      let before = decoder.framesDecoded
      try bytes.withUnsafeMutableBytes {
        try decoder.read(framed, into: $0, at: written.dataOffsets[small] + 2)
      }
      #expect(decoder.framesDecoded == before)
      // The member's last 8 bytes, then the tar padding after it.
      #expect(bytes == b("23456789") + [0, 0])
      // Past the indexed frames: refused as damage, not read.
      let error = archiveError {
        var beyond = [UInt8](repeating: 0, count: 4)
        try beyond.withUnsafeMutableBytes {
          try decoder.read(framed, into: $0, at: written.index.uncompressedEnd)
        }
      }
      #expect(error?.kind == .badData)
    }
  }

  @Test func theStreamStartsAtAnyMember() throws {
    try withTemporaryDirectory { dir in
      let members = framedMembers()
      let path = dir + "/framed.tar.zst"
      let written = try writeFramed(members, to: path)
      // An index that stops before the last members, as a manifest's does: the rest is read
      // by streaming decompression.
      var partial = FrameIndex()
      let cut = written.index.frames.count / 2
      partial = try FrameIndex.decode(prefixEncoding(written.index, frames: cut))
      for verifying in [false, true] {
        for index in [written.index, partial] {
          let (framed, fd) = try archive(path, index, size: written.size)
          defer { close(fd) }
          for start in [0, 3, members.count - 3, members.count - 1] {
            let input = try FramedArchiveInput(framed, from: written.offsets[start], verifying: verifying)
            let reader = try ArchiveReader(input: input, startingAt: written.offsets[start], name: path)
            var position = start
            while let entry = try reader.nextEntry() {
              #expect(entry.path == members[position].entry.path)
              #expect(reader.headerOffset == written.offsets[position])
              // Every other member's data is skipped (seeks over whole frames).
              if position % 2 == 0 { #expect(try reader.readAllData() == members[position].data) }
              position += 1
            }
            #expect(position == members.count)
          }
        }
      }
    }
  }

  @Test func frameIndexesRoundTripAndBadOnesAreRefused() throws {
    try withTemporaryDirectory { dir in
      let written = try writeFramed(framedMembers(), to: dir + "/framed.tar.zst")
      let encoded = written.index.encoded()
      #expect(try FrameIndex.decode(encoded) == written.index)
      #expect(try FrameIndex.decode([0]) == FrameIndex())
      // Every truncation, and every single changed byte, is refused or decodes to a valid index.
      for length in 0..<encoded.count {
        #expect(throws: FrameIndexError.self) { try FrameIndex.decode(Array(encoded[0..<length])) }
      }
      for position in encoded.indices {
        for value: UInt8 in [0, 1, 0x7F, 0x80, 0xFF] {
          var damaged = encoded
          damaged[position] = value
          if let index = try? FrameIndex.decode(damaged) {
            for frame in index.frames {
              #expect(
                frame.uncompressedLength >= 1 && frame.uncompressedLength <= FrameIndex.maximumFrameLength)
            }
          }
        }
      }
      #expect(throws: FrameIndexError.self) { try FrameIndex.decode(encoded + [0]) }
      // A count larger than the bytes, a frame too long, a stored frame of the wrong length.
      #expect(throws: FrameIndexError.self) { try FrameIndex.decode([0xFF, 0xFF, 0x03]) }
      #expect(throws: FrameIndexError.self) {
        try FrameIndex.decode([1, 0x80, 0x80, 0x80, 0x80, 0x01, 0x10])
      }
      #expect(throws: FrameIndexError.self) { try FrameIndex.decode([1, 10, 0x21]) }
    }
  }

  @Test func damagedFramesAreBadDataNeverACrash() throws {
    try withTemporaryDirectory { dir in
      let members = framedMembers()
      let path = dir + "/framed.tar.zst"
      let written = try writeFramed(members, to: path)
      let original = try readFile(b(path))
      let regular = zip(members, written.dataOffsets).filter {
        $0.0.entry.type == .regular && !$0.0.data.isEmpty
      }
      func readEverything(_ bytes: [UInt8]) -> [(Bool, FailureKind?)] {
        let copy = dir + "/damaged.tar.zst"
        try? createFile(b(copy), bytes)
        guard let (framed, fd) = try? archive(copy, written.index, size: Int64(bytes.count)) else {
          return []
        }
        defer { close(fd) }
        let decoder = FrameDecoder()
        var outcomes: [(Bool, FailureKind?)] = []
        for (member, offset) in regular {
          var got = [UInt8](repeating: 0, count: member.data.count)
          do {
            try got.withUnsafeMutableBytes { try decoder.read(framed, into: $0, at: offset) }
            outcomes.append((got == member.data, nil))
          } catch let error as ArchiveError {
            outcomes.append((false, error.kind))
          } catch {
            outcomes.append((false, .io))
          }
        }
        // The stream, verified, from the start.
        do {
          let reader = try ArchiveReader(
            input: try FramedArchiveInput(framed, from: 0, verifying: true), startingAt: 0, name: copy)
          while try reader.nextEntry() != nil { _ = try reader.readAllData() }
        } catch let error as ArchiveError {
          outcomes.append((false, error.kind))
        } catch {
          outcomes.append((false, .io))
        }
        return outcomes
      }
      // Truncated at every frame boundary and inside frames.
      for frame in written.index.frames {
        for cut in [
          frame.storedOffset, frame.storedOffset + 5, frame.storedOffset + Int64(frame.storedLength) - 1,
        ] {
          for (_, kind) in readEverything(Array(original[0..<Int(cut)])) where kind != nil {
            #expect(kind == .badData)
          }
        }
      }
      // A changed byte in each frame's header, in its middle and near its end. Every failure is
      // bad data. A compressed frame carries a checksum, so its damage always shows; a stored
      // frame's header is checked, its content is not (it is what the content's SHA-256, one
      // layer up, and the archive's CRC-32C are for).
      for frame in written.index.frames {
        let header = Int64(frame.isStored ? 5 : 4)
        for position in [
          frame.storedOffset, frame.storedOffset + header, frame.storedOffset + Int64(frame.storedLength / 2),
          frame.storedEnd - 2,
        ] {
          var damaged = original
          damaged[Int(position)] ^= 0x5A
          let outcomes = readEverything(damaged)
          for (same, kind) in outcomes where kind != nil { #expect(kind == .badData && !same) }
          if !frame.isStored || position - frame.storedOffset <= header {
            #expect(
              outcomes.contains { $0.1 != nil },
              "damage at \(position) of a \(frame.isStored ? "stored" : "compressed") frame")
          }
        }
      }
    }
  }
}

/// An output that fails after `limit` bytes, recording what it took.
private final class FailingOutput: ArchiveOutput, @unchecked Sendable {
  struct Full: Error, CustomStringConvertible { var description: String { "the output is full" } }
  let limit: Int
  private(set) var taken = 0
  init(limit: Int) { self.limit = limit }
  func write(_ bytes: UnsafeRawBufferPointer) throws {
    guard taken + bytes.count <= limit else { throw Full() }
    taken += bytes.count
  }
}

@Suite struct FrameWriterTests {
  /// Where frames are cut: a named photo's data starts stored frames at its data offset, its
  /// header rides in the frame before (no frame holds only a header), text around it is
  /// compressed, and a large text member starts frames of its own.
  @Test func framesAreCutAtMembersByContent() throws {
    try withTemporaryDirectory { dir in
      let time = ArchiveTimestamp(seconds: 1_700_000_000, nanoseconds: 0)
      let members = [
        Member.file("a.txt", textBytes(count: 100_000, seed: 1), modified: time),
        Member.file("photo.jpg", jpegBytes(count: 700_000, seed: 2), modified: time),
        Member.file("b.txt", textBytes(count: 50_000, seed: 3), modified: time),
        Member.file("big.txt", textBytes(count: 900_000, seed: 4), modified: time),
      ]
      let written = try writeFramed(members, to: dir + "/cut.tar.zst")
      let frames = written.index.frames
      let photo = try #require(frames.firstIndex { $0.uncompressedOffset == written.dataOffsets[1] })
      #expect(frames[photo].isStored)
      #expect(photo > 0 && !frames[photo - 1].isStored)
      #expect(frames[photo - 1].uncompressedEnd == written.dataOffsets[1])
      #expect(frames.filter(\.isStored).map(\.uncompressedLength).reduce(0, +) >= 700_000)
      // big.txt's header starts a frame.
      #expect(frames.contains { $0.uncompressedOffset == written.offsets[3] })
      // No frame but the last holds less than a header and some data.
      #expect(
        frames.dropLast().allSatisfy { $0.uncompressedLength >= 4096 }, "\(frames.map(\.uncompressedLength))")
      // Compressed frames are at most twice the frame size; stored ones at most their bound.
      for frame in frames {
        #expect(
          frame.uncompressedLength
            <= (frame.isStored ? FrameOptions.standard.storedFrameSize : 2 * FrameOptions.standard.frameSize))
      }
    }
  }

  /// The output failing while frames are written by the workers: the writer reports the
  /// output's error, stops, and takes no more; releasing a writer with frames in flight
  /// writes nothing more either.
  @Test(arguments: [0, 10_000, 300_000, 2_000_000])
  func anOutputErrorStopsTheFramedWriter(limit: Int) throws {
    let output = FailingOutput(limit: limit)
    let writer = try ArchiveWriter(output: output, compression: .zstd, name: "failing", framing: .standard)
    let data = textBytes(count: 4 << 20, seed: 8)
    var failure: ArchiveError?
    do {
      for index in 0..<8 {
        try writer.writeHeader(.file(b("f\(index).txt"), size: Int64(data.count)))
        try writer.writeData(data)
        try writer.finishEntry()
      }
      try writer.finish()
    } catch {
      failure = error
    }
    let error = try #require(failure)
    #expect(error.message.contains("the output is full"), "\(error)")
    #expect(output.taken <= limit)
    #expect(throws: ArchiveError.self) { try writer.writeHeader(.file(b("later"), size: 0)) }

    let abandoned = FailingOutput(limit: Int.max)
    do {
      let early = try ArchiveWriter(output: abandoned, compression: .zstd, name: "early", framing: .standard)
      try early.writeHeader(.file(b("big.txt"), size: Int64(data.count)))
      try early.writeData(data)
    }
    let after = abandoned.taken
    usleep(50_000)
    #expect(abandoned.taken == after)
  }

  @Test func badFrameOptionsAreRefused() {
    let error = archiveError {
      _ = try ArchiveWriter(
        output: FailingOutput(limit: 0), compression: .zstd, name: "bad",
        framing: FrameOptions(level: 99, frameSize: 1, storedFrameSize: 1, storedMinimum: 0))
    }
    #expect(error?.kind == .invalidArgument)
    let plain = archiveError {
      _ = try ArchiveWriter(
        output: FailingOutput(limit: 0), compression: .none, name: "bad", framing: .standard)
    }
    #expect(plain?.kind == .invalidArgument)
  }
}

/// The encoding of the first `frames` frames of `index`.
private func prefixEncoding(_ index: FrameIndex, frames count: Int) throws -> [UInt8] {
  var full = index.encoded()
  // Re-encode: count, then the first frames' pairs, read back from the full encoding.
  var position = 0
  func varint() -> UInt64 {
    var value: UInt64 = 0
    var shift: UInt64 = 0
    while true {
      let byte = full[position]
      position += 1
      value |= UInt64(byte & 0x7F) << shift
      if byte & 0x80 == 0 { return value }
      shift += 7
    }
  }
  _ = varint()
  let start = position
  for _ in 0..<(count * 2) { _ = varint() }
  full = [UInt8(count)] + Array(full[start..<position])
  return full
}
