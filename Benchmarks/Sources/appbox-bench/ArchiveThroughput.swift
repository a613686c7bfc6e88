// `appbox-bench archive-throughput`: how fast ArchiveWriter writes one 200 MiB member, next
// to plain write(2), bsdtar and GNU tar (`make bench` runs it). A measurement, not a test:
// it checks that the archive is complete and prints the times.

import AppboxArchive
import AppboxTestSupport
import Foundation
import Glibc

private let totalBytes = 200 * 1024 * 1024
private let chunkBytes = 64 * 1024

private func seconds(_ body: () throws -> Void) rethrows -> Double {
  let start = DispatchTime.now().uptimeNanoseconds
  try body()
  return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
}

/// The fastest of three runs.
private func best(_ run: () throws -> Double) rethrows -> Double {
  try (0..<3).map { _ in try run() }.min()!
}

func archiveThroughput() throws -> String {
  let dir = TemporaryDirectory("throughput")
  var lines = ["| writing one 200 MiB member | seconds | MiB/s |", "|---|---:|---:|"]
  func report(_ label: String, _ elapsed: Double) {
    let rate = Double(totalBytes) / 1_048_576 / elapsed
    lines.append("| \(label) | \(String(format: "%.3f", elapsed)) | \(String(format: "%.1f", rate)) |")
    progress("archive throughput: \(label): \(String(format: "%.3f", elapsed)) s")
  }
  // 4 MiB of random bytes, cycled: more than zstd's default window, so it cannot just point back.
  var generator = SystemRandomNumberGenerator()
  let pool = (0..<(64 * chunkBytes)).map { _ in UInt8.random(in: 0...255, using: &generator) }
  let chunks = (0..<64).map { Array(pool[($0 * chunkBytes)..<(($0 + 1) * chunkBytes)]) }
  let source = dir.url("source.bin")
  let output = dir.url("out.tar")

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
      try writer.writeHeader(.file(Array("source.bin".utf8), size: Int64(totalBytes)))
      for index in 0..<(totalBytes / chunkBytes) {
        try chunks[index % 64].withUnsafeBytes { try writer.writeData($0) }
      }
      try writer.finish()
    }
  }

  report("write(2) of the bytes alone, no archive", try best { try fromMemory(nil) })
  guard rename(output, source) == 0 else { fail("cannot rename \(output)") }
  report("ArchiveWriter none, from memory", try best { try fromMemory(ArchiveCompression.none) })
  var st = stat()
  guard stat(output, &st) == 0, st.st_size == Int64(totalBytes) + 512 + 1024 else {
    fail("the archive of 200 MiB has the wrong size")
  }
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
      try writer.writeHeader(.file(Array("source.bin".utf8), size: Int64(totalBytes)))
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
      ["--format", "pax", "-cf", output, "-C", dir.path, "source.bin"]
    ),
    (
      "GNU tar --format=pax -cf", "/usr/bin/tar",
      ["--format=pax", "-cf", output, "-C", dir.path, "source.bin"]
    ),
    (
      "bsdtar --zstd --format pax -cf", "/usr/bin/bsdtar",
      ["--zstd", "--format", "pax", "-cf", output + ".zst", "-C", dir.path, "source.bin"]
    ),
  ] where FileManager.default.isExecutableFile(atPath: tool) {
    var status: Int32 = 0
    let elapsed = try best { try seconds { status = try runProcess(tool, arguments).status } }
    guard status == 0 else { fail("\(label) failed with status \(status)") }
    report(label, elapsed)
  }
  return lines.joined(separator: "\n") + "\n"
}
