// `appbox-bench frame-choices`: the measurements behind FrameOptions.standard (the zstd level,
// the frame size, stored frames for media): CPU time per byte and bytes stored for each kind of
// content of the mixed profile (MixedContent.swift), written as members through ArchiveWriter's
// framer into memory (no disk, so the machine's I/O and load weigh little: CPU time, not wall
// time), then read back in place by FrameDecoder, all of it in order (as a restore) and 4 KiB
// pieces at random (as `dump` of small files or a chunk's neighbours).

import AppboxArchive
import AppboxTestSupport
import Foundation
import Glibc

private final class MemoryOutput: ArchiveOutput {
  var bytes: [UInt8] = []
  func write(_ buffer: UnsafeRawBufferPointer) throws { bytes.append(contentsOf: buffer) }
}

private func cpuSeconds() -> Double {
  var time = timespec()
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &time)
  return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
}

/// The content of one kind, and how it is cut into members.
private struct ContentSample {
  var label: String
  var bytes: [UInt8]
  var memberSize: Int
  var name: String
}

func frameChoices() throws -> String {
  let dir = TemporaryDirectory("frame-choices")
  let writer = ContentWriter(seed: 77, profile: .mixed)
  let size = 48 << 20
  func load(_ kind: ContentClass, _ file: String) throws -> [UInt8] {
    try writer.write(dir.url(file), size: size, kind: kind)
    return Array(try Data(contentsOf: URL(fileURLWithPath: dir.url(file))))
  }
  let text = try load(.text, "text.txt")
  let records = try load(.records, "records.dat")
  let media = try load(.media, "media.jpg")
  let samples = [
    ContentSample(label: "text, 16 KiB files", bytes: text, memberSize: 16 << 10, name: "note.txt"),
    ContentSample(
      label: "records, 1 MiB chunks", bytes: records, memberSize: 1 << 20, name: ".appbox/chunks/c"),
    ContentSample(label: "records, 16 KiB files", bytes: records, memberSize: 16 << 10, name: "row.dat"),
    ContentSample(
      label: "media named .jpg (stored frames)", bytes: media, memberSize: 4 << 20, name: "clip.jpg"),
    ContentSample(
      label: "media, unnamed (zstd tries, then stored)", bytes: media, memberSize: 4 << 20, name: "clip"),
  ]
  let choices: [(String, FrameOptions)] = [
    (
      "level 1, 512 KiB",
      FrameOptions(level: 1, frameSize: 512 << 10, storedFrameSize: 4 << 20, storedMinimum: 64 << 10)
    ),
    (
      "level 3, 512 KiB",
      FrameOptions(level: 3, frameSize: 512 << 10, storedFrameSize: 4 << 20, storedMinimum: 64 << 10)
    ),
    (
      "level -1, 512 KiB",
      FrameOptions(level: -1, frameSize: 512 << 10, storedFrameSize: 4 << 20, storedMinimum: 64 << 10)
    ),
    (
      "level -5, 512 KiB",
      FrameOptions(level: -5, frameSize: 512 << 10, storedFrameSize: 4 << 20, storedMinimum: 64 << 10)
    ),
    (
      "level 1, 128 KiB",
      FrameOptions(level: 1, frameSize: 128 << 10, storedFrameSize: 4 << 20, storedMinimum: 64 << 10)
    ),
    (
      "level 1, 256 KiB",
      FrameOptions(level: 1, frameSize: 256 << 10, storedFrameSize: 4 << 20, storedMinimum: 64 << 10)
    ),
    (
      "level 1, 1 MiB",
      FrameOptions(level: 1, frameSize: 1 << 20, storedFrameSize: 4 << 20, storedMinimum: 64 << 10)
    ),
    (
      "level 3, 1 MiB",
      FrameOptions(level: 3, frameSize: 1 << 20, storedFrameSize: 4 << 20, storedMinimum: 64 << 10)
    ),
  ]
  var lines = [
    "| content | frames | stored / input | write: CPU ns per byte | read all in order: ns per byte | one 4 KiB read at random: µs |",
    "|---|---|---:|---:|---:|---:|",
  ]
  for sample in samples {
    for (label, options) in choices {
      if sample.label.hasPrefix("media") && label != "level 1, 512 KiB" && label != "level 3, 512 KiB" {
        continue
      }
      // Best of three for the times; the bytes are the same every time.
      var writeTimes: [Double] = []
      var readTimes: [Double] = []
      var randomTimes: [Double] = []
      var storedBytes = 0
      var frameCount = 0
      for _ in 0..<3 {
        let output = MemoryOutput()
        output.bytes.reserveCapacity(sample.bytes.count + (1 << 20))
        var dataOffsets: [Int64] = []
        let start = cpuSeconds()
        let archive = try ArchiveWriter(output: output, compression: .zstd, name: "memory", framing: options)
        var offset = 0
        var number = 0
        while offset < sample.bytes.count {
          let count = min(sample.memberSize, sample.bytes.count - offset)
          try archive.writeHeader(.file(Array("\(sample.name)-\(number)".utf8), size: Int64(count)))
          dataOffsets.append(archive.uncompressedOffset)
          try sample.bytes[offset..<(offset + count)].withUnsafeBytes { try archive.writeData($0) }
          try archive.finishEntry()
          offset += count
          number += 1
        }
        try archive.endFrame()
        let index = archive.frameIndex!
        try archive.finish()
        writeTimes.append(cpuSeconds() - start)
        storedBytes = output.bytes.count
        frameCount = index.count
        let stored = output.bytes
        let framed = FramedArchive(index: index, name: "memory", storedSize: Int64(stored.count)) {
          buffer, at in
          let count = min(buffer.count, stored.count - Int(at))
          guard count > 0 else { return 0 }
          stored.withUnsafeBytes {
            buffer.baseAddress!.copyMemory(from: $0.baseAddress! + Int(at), byteCount: count)
          }
          return count
        }
        let decoder = FrameDecoder()
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 4 << 20, alignment: 64)
        defer { buffer.deallocate() }
        let readStart = cpuSeconds()
        for (position, dataOffset) in dataOffsets.enumerated() {
          let count = min(sample.memberSize, sample.bytes.count - position * sample.memberSize)
          try decoder.read(
            framed, into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<count]), at: dataOffset)
        }
        readTimes.append(cpuSeconds() - readStart)
        var random = SeededRandom(seed: 5)
        let reads = 400
        let randomStart = cpuSeconds()
        for _ in 0..<reads {
          let member = random.below(dataOffsets.count)
          let count = min(4096, min(sample.memberSize, sample.bytes.count - member * sample.memberSize))
          // A fresh decoder each time: nothing is cached, as for one file read alone.
          try FrameDecoder().read(
            framed, into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<count]), at: dataOffsets[member])
        }
        randomTimes.append((cpuSeconds() - randomStart) / Double(reads))
      }
      let ratio = Double(storedBytes) / Double(sample.bytes.count)
      let write = writeTimes.min()! / Double(sample.bytes.count) * 1e9
      let read = readTimes.min()! / Double(sample.bytes.count) * 1e9
      let one = randomTimes.min()! * 1e6
      lines.append(
        "| \(sample.label) | \(label) (\(frameCount) frames) | \(String(format: "%.3f", ratio)) | \(String(format: "%.2f", write)) | \(String(format: "%.2f", read)) | \(String(format: "%.0f", one)) |"
      )
      progress(
        "frame choices: \(sample.label), \(label): \(String(format: "%.3f", ratio)), write \(String(format: "%.2f", write)) ns/B"
      )
    }
  }
  return lines.joined(separator: "\n") + "\n"
}
