// Throughput of writing one 200 MiB member, printed for comparison with plain write(2), bsdtar and
// GNU tar. Informational only: it asserts that the archives are complete, not how fast they were
// made (other tests run in parallel on the same two cores and disk).

import AppboxArchive
import Foundation
import Testing

#if canImport(Glibc)
  import Glibc
#endif

private let totalBytes = 200 * 1024 * 1024
private let chunkBytes = 64 * 1024

private func seconds(_ body: () throws -> Void) rethrows -> Double {
  var start = timespec()
  var end = timespec()
  clock_gettime(CLOCK_MONOTONIC, &start)
  try body()
  clock_gettime(CLOCK_MONOTONIC, &end)
  return Double(end.tv_sec - start.tv_sec) + Double(end.tv_nsec - start.tv_nsec) / 1e9
}

/// The fastest of three runs: the machine is shared with the other tests.
private func best(_ run: () throws -> Double) rethrows -> Double {
  try (0..<3).map { _ in try run() }.min()!
}

private func readRandom(count: Int) throws -> [UInt8] {
  let fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC)
  defer { close(fd) }
  var bytes = [UInt8](repeating: 0, count: count)
  var done = 0
  while done < count {
    let got = bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress! + done, count - done) }
    guard got > 0 else { throw POSIXFailure(call: "read", code: errno) }
    done += got
  }
  return bytes
}

private func report(_ label: String, _ elapsed: Double) {
  let rate = Double(totalBytes) / 1_048_576 / elapsed
  print(
    "throughput: \(label.padding(toLength: 44, withPad: " ", startingAt: 0)) \(String(format: "%6.3f", elapsed)) s  \(String(format: "%7.1f", rate)) MiB/s"
  )
}

@Suite struct ArchiveThroughputTests {
  @Test func writing200MiBIn64KiBChunks() throws {
    try withTemporaryDirectory { dir in
      // 4 MiB of random bytes, cycled: more than zstd's default window, so it cannot just point back.
      let pool = try readRandom(count: 64 * chunkBytes)
      let chunks = (0..<64).map { Array(pool[($0 * chunkBytes)..<(($0 + 1) * chunkBytes)]) }
      let source = dir + "/source.bin"
      let output = dir + "/out.tar"

      func fromMemory(_ compression: ArchiveCompression?) throws -> Double {
        let fd = open(output, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        defer { close(fd) }
        return try seconds {
          guard let compression else {
            for index in 0..<(totalBytes / chunkBytes) {
              _ = chunks[index % 64].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            }
            return
          }
          let writer = try ArchiveWriter(fileDescriptor: fd, compression: compression)
          try writer.writeHeader(.file(b("source.bin"), size: Int64(totalBytes)))
          for index in 0..<(totalBytes / chunkBytes) {
            try chunks[index % 64].withUnsafeBytes { try writer.writeData($0) }
          }
          try writer.finish()
        }
      }

      report("write(2) of the bytes alone, no archive", try best { try fromMemory(nil) })
      try FileManager.default.moveItem(atPath: output, toPath: source)
      report("ArchiveWriter none, from memory", try best { try fromMemory(ArchiveCompression.none) })
      #expect(try lstatOf(b(output)).st_size == Int64(totalBytes) + 512 + 1024)
      report("ArchiveWriter gzip (level 6), from memory", try fromMemory(.gzip))
      report("ArchiveWriter zstd (level 3), from memory", try best { try fromMemory(.zstd) })

      // Same work as the tar programs: read the file in 64 KiB chunks and archive it.
      let fromFile = try best {
        try seconds {
          let input = open(source, O_RDONLY | O_CLOEXEC)
          let fd = open(output, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
          defer {
            close(input)
            close(fd)
          }
          let writer = try ArchiveWriter(fileDescriptor: fd, compression: .none)
          try writer.writeHeader(.file(b("source.bin"), size: Int64(totalBytes)))
          let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: chunkBytes, alignment: 16)
          defer { buffer.deallocate() }
          while true {
            let count = read(input, buffer.baseAddress, chunkBytes)
            if count <= 0 { break }
            try writer.writeData(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
          }
          try writer.finish()
        }
      }
      report("ArchiveWriter none, reading the file", fromFile)

      for (label, tool, arguments) in [
        (
          "bsdtar --format pax -cf", "/usr/bin/bsdtar",
          ["--format", "pax", "-cf", output, "-C", dir, "source.bin"]
        ),
        (
          "GNU tar --format=pax -cf", "/usr/bin/tar",
          ["--format=pax", "-cf", output, "-C", dir, "source.bin"]
        ),
        (
          "bsdtar --zstd --format pax -cf", "/usr/bin/bsdtar",
          ["--zstd", "--format", "pax", "-cf", output + ".zst", "-C", dir, "source.bin"]
        ),
      ] where FileManager.default.isExecutableFile(atPath: tool) {
        var result: ToolResult?
        let elapsed = try best { try seconds { result = try runTool(tool, arguments) } }
        #expect(result?.status == 0, "\(label): \(result?.stderr ?? "")")
        report(label, elapsed)
      }
    }
  }
}
