// The conformance suite, continued: streamed uploads (large ones go up in S3 multipart parts
// of 16 MiB), positional reads, concurrent writers, and what a reader can see while a writer
// works: an object whole or not at all, never part of one.

import AppboxCore
import AppboxTestSupport
import Foundation
import Synchronization
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

struct ObjectStoreStreamingConformanceTests {
  @Test(arguments: StoreKind.allCases)
  func largeObjectsStreamUpAndReadBackExactly(_ kind: StoreKind) throws {
    let subject = try StoreUnderTest(kind)
    defer { withExtendedLifetime(subject) {} }  // its directory lives as long as the test
    let store = subject.store
    // More than one S3 part, written in pieces that do not divide it.
    let bytes = patternBytes((17 << 20) + 4321, seed: 42)
    let size = try uploadInPieces(try store.upload("archives/big.tar"), bytes, piece: (1 << 20) + 7)
    #expect(size == Int64(bytes.count))
    #expect(try store.size(of: "archives/big.tar") == Int64(bytes.count))
    #expect(try store.list("archives").map(\.size) == [Int64(bytes.count)])
    let reader = try store.reader("archives/big.tar", size: Int64(bytes.count))
    #expect(fingerprint(try readAll(reader)) == fingerprint(bytes))
    #expect(fingerprint(try store.get("archives/big.tar")) == fingerprint(bytes))
    // A large object put whole.
    let whole = patternBytes(6 << 20, seed: 43)
    try store.put("manifests/big.tar", whole)
    #expect(fingerprint(try store.get("manifests/big.tar")) == fingerprint(whole))
  }

  @Test(arguments: StoreKind.allCases)
  func positionalReadsReturnTheBytesAtAnyOffsetInAnyOrder(_ kind: StoreKind) throws {
    let subject = try StoreUnderTest(kind)
    defer { withExtendedLifetime(subject) {} }  // its directory lives as long as the test
    let store = subject.store
    let bytes = patternBytes(10 << 20, seed: 5)
    try store.put("archives/ranged.tar", bytes)
    let reader = try store.reader("archives/ranged.tar", size: Int64(bytes.count))
    #expect(reader.size == Int64(bytes.count))
    // Forward, a jump of more than 4 MiB (S3: a new ranged request), back to the start, a short
    // jump ahead (S3: read through), and the last bytes.
    for offset in [0, 1, 4096, 9 << 20, 100, (1 << 20) + 3, (1 << 20) + 70_000, bytes.count - 10] {
      let got = try readOnce(reader, at: Int64(offset), count: 65536)
      // Reads may be short (S3 hands over what has arrived), but never empty before the end.
      #expect(!got.isEmpty, "at \(offset)")
      #expect(got == Array(bytes[offset..<(offset + got.count)]), "at \(offset)")
      var exact = [UInt8](repeating: 0, count: min(50_000, bytes.count - offset))
      try exact.withUnsafeMutableBytes { try reader.readFully(at: Int64(offset), into: $0, object: "ranged") }
      #expect(exact == Array(bytes[offset..<(offset + exact.count)]), "at \(offset)")
    }
    #expect(try readOnce(reader, at: Int64(bytes.count - 10), count: 65536).count <= 10)
    #expect(try readOnce(reader, at: Int64(bytes.count), count: 100).isEmpty)
    var past = [UInt8](repeating: 0, count: 20)
    #expect(throws: (any Error).self) {
      try past.withUnsafeMutableBytes {
        try reader.readFully(at: Int64(bytes.count - 10), into: $0, object: "ranged")
      }
    }
    #expect(fingerprint(try readAll(reader, from: 3 << 20)) == fingerprint(Array(bytes[(3 << 20)...])))
  }

  @Test(arguments: StoreKind.allCases)
  func uploadsAreInvisibleUntilCommittedAndAbortedOnesLeaveNothing(_ kind: StoreKind) throws {
    let subject = try StoreUnderTest(kind)
    let store = subject.store
    let bytes = patternBytes(300_000, seed: 9)
    do {
      let upload = try store.upload("archives/1a2b3c4d.tar")
      try bytes.withUnsafeBytes { try upload.write($0) }
      #expect(try store.get("archives/1a2b3c4d.tar") == nil)
      #expect(try store.size(of: "archives/1a2b3c4d.tar") == nil)
      #expect(try store.list("archives").isEmpty)
      var sawBeforeVisible = false
      let size = try upload.commit(beforeVisible: {
        sawBeforeVisible = true
        #expect((try? store.get("archives/1a2b3c4d.tar")) == nil)
      })
      #expect(sawBeforeVisible && size == Int64(bytes.count))
      #expect(try store.get("archives/1a2b3c4d.tar") == bytes)
    }
    do {
      let upload = try store.upload("archives/5e6f7a8b.tar")
      try bytes.withUnsafeBytes { try upload.write($0) }
      upload.abort()
    }
    #expect(try store.get("archives/5e6f7a8b.tar") == nil)
    #expect(try store.list("archives").map(\.name) == ["1a2b3c4d.tar"])
    // Nothing staged is left behind: no temp file, no multipart upload.
    if let local = store as? LocalObjectStore {
      #expect(try local.temporaryFiles(in: "archives").isEmpty)
    }
    if let s3 = store as? S3ObjectStore {
      #expect(try s3.abandonedUploads(before: .distantFuture).isEmpty)
    }
  }

  @Test(arguments: StoreKind.allCases)
  func aCommitOverAnExistingObjectLeavesOneWholeVersion(_ kind: StoreKind) throws {
    let subject = try StoreUnderTest(kind)
    defer { withExtendedLifetime(subject) {} }  // its directory lives as long as the test
    let store = subject.store
    let old = patternBytes(200_000, seed: 1)
    let new = patternBytes(150_000, seed: 2)
    try store.put("manifests/same.tar", old)
    // The local store refuses (archives are written once), S3 replaces: either way, whole.
    _ = try? uploadInPieces(try store.upload("manifests/same.tar"), new, piece: 65536)
    let now = try store.get("manifests/same.tar")
    #expect(now == old || now == new, "\(fingerprint(now))")
  }

  @Test(arguments: StoreKind.allCases)
  func concurrentPutsAllLand(_ kind: StoreKind) throws {
    let subject = try StoreUnderTest(kind)
    defer { withExtendedLifetime(subject) {} }  // its directory lives as long as the test
    let store = subject.store
    nonisolated(unsafe) let shared = store
    let failures = Mutex<[String]>([])
    // Distinct names from eight threads at once.
    DispatchQueue.concurrentPerform(iterations: 8) { worker in
      for index in 0..<4 {
        let name = "snapshots/w\(worker)-\(index)"
        do {
          try shared.put(name, patternBytes(1000 + worker * 10 + index, seed: UInt64(worker * 100 + index)))
        } catch {
          failures.withLock { $0.append("\(name): \(error)") }
        }
      }
    }
    #expect(failures.withLock { $0 } == [])
    #expect(try store.list("snapshots").count == 32)
    for worker in 0..<8 {
      for index in 0..<4 {
        let expected = patternBytes(1000 + worker * 10 + index, seed: UInt64(worker * 100 + index))
        #expect(try store.get("snapshots/w\(worker)-\(index)") == expected)
      }
    }
    // One name from eight threads at once: one of them wins, whole.
    let contents = (0..<8).map { patternBytes(100_000 + $0, seed: UInt64(1000 + $0)) }
    DispatchQueue.concurrentPerform(iterations: 8) { worker in
      do {
        try shared.put("locks/contended", contents[worker])
      } catch {
        failures.withLock { $0.append("contended \(worker): \(error)") }
      }
    }
    #expect(failures.withLock { $0 } == [])
    let final = try store.get("locks/contended")
    #expect(contents.contains { $0 == final }, "\(fingerprint(final))")
    #expect(try store.list("locks").count == 1)
  }

  @Test(arguments: StoreKind.allCases)
  func aReaderSeesAPutWholeOrNotAtAll(_ kind: StoreKind) throws {
    let subject = try StoreUnderTest(kind)
    defer { withExtendedLifetime(subject) {} }  // its directory lives as long as the test
    let store = subject.store
    nonisolated(unsafe) let shared = store
    let versions = [patternBytes(1 << 20, seed: 11), patternBytes((1 << 20) + 4096, seed: 12)]
    let fingerprints = Set(versions.map(fingerprint))
    let done = Atomic<Bool>(false)
    let seen = Mutex<(reads: Int, whole: Int, torn: [String])>((0, 0, []))
    let finished = DispatchSemaphore(value: 0)
    let reader = Thread {
      defer { finished.signal() }
      while !done.load(ordering: .acquiring) {
        let got = try? shared.get("manifests/flip.tar")
        seen.withLock { seen in
          seen.reads += 1
          guard let got else { return }
          if fingerprints.contains(fingerprint(got)) {
            seen.whole += 1
          } else {
            seen.torn.append(fingerprint(got))
          }
        }
      }
    }
    reader.start()
    while seen.withLock({ $0.reads }) == 0 { usleep(1000) }
    // Rewrite the object until the reader has met it many times while it was being replaced
    // (at least 12 rewrites, at most 400).
    var round = 0
    while round < 12 || (round < 400 && seen.withLock({ $0.whole + $0.torn.count }) < 30) {
      try store.put("manifests/flip.tar", versions[round % 2])
      round += 1
    }
    while seen.withLock({ $0.whole + $0.torn.count }) == 0 { usleep(1000) }
    done.store(true, ordering: .releasing)
    finished.wait()
    let result = seen.withLock { $0 }
    #expect(result.torn.isEmpty, "torn reads: \(result.torn.prefix(5))")
    #expect(result.whole > 0)
  }
}
