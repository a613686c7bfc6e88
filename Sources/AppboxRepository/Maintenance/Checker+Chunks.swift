// `check` and chunks: every chunk location must lie inside its archive (read, with
// `--read-data`, and hashed), and every content stored as chunks must have a chunk list that
// adds up to its size and whose chunks all have locations.

import AppboxArchive
import AppboxCore
import AppboxCrypto
import Glibc

/// What the catalog holds content for: digests with a blob location, chunks with a location.
struct ContentIndex {
  var blobs: SortedDigests
  var chunks: Set<Digest>
}

/// Every digest of the catalog's blob locations, in order, looked up by binary search: 32
/// bytes a content (a set would take twice that, and the locations themselves ten times).
struct SortedDigests {
  private var digests: [Digest] = []

  init(_ catalog: Catalog) throws {
    digests.reserveCapacity(try catalog.count("blobs"))
    let rows = try catalog.database.prepare("SELECT digest FROM blobs ORDER BY digest")
    while try rows.step() {
      if let digest = rows.withUnsafeBlob(0, { Digest(validating: $0) }) { digests.append(digest) }
    }
  }

  func contains(_ digest: Digest) -> Bool {
    var low = 0
    var high = digests.count
    while low < high {
      let middle = (low + high) / 2
      if digests[middle] == digest { return true }
      if digests[middle] < digest { low = middle + 1 } else { high = middle }
    }
    return false
  }
}

extension Repository {
  /// Problems with chunk locations: outside their archive (or its frames), in an archive
  /// compressed as one stream, or (with
  /// `readData`) not hashing to their digest. Adds the bytes hashed to `verified`.
  func checkChunks(_ chunks: [ChunkLocation], records: [ArchiveRecord], readData: Bool, verified: inout Int64)
    -> [String]
  {
    var problems: [String] = []
    let byName = Dictionary(records.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
    var buffer = [UInt8](repeating: 0, count: ChunkingParameters.largestStored)
    for (archive, locations) in Dictionary(grouping: chunks, by: \.archive) {
      guard let record = byName[archive] else {
        problems.append(
          "\(locations.count) chunk locations name archive '\(archive)', which the catalog lacks")
        continue
      }
      let frames: FrameIndex?
      do {
        frames = try frameIndex(of: record)
      } catch {
        problems.append("\(error)")
        continue
      }
      guard record.compression == .none || frames != nil else {
        problems.append(
          "Archive '\(archive)' is compressed as one stream, but \(locations.count) chunk locations point into it"
        )
        continue
      }
      // What the chunks may lie in: the file, or the frames before the manifest.
      let limit = frames?.uncompressedEnd ?? record.size
      // A missing archive is reported by the presence check (and only local unencrypted
      // repositories hold chunks: reading them needs the file).
      guard readsDirectly, let source = try? rangeReader(record) else { continue }
      let decoder = FrameDecoder()
      for location in locations {
        let end = location.dataOffset.addingReportingOverflow(location.size)
        guard location.size > 0, location.size <= Int64(buffer.count), location.offset < location.dataOffset,
          !end.overflow, end.partialValue <= limit
        else {
          problems.append(
            "Archive '\(archive)': chunk \(location.digest.hex.prefix(16)) lies outside the archive")
          continue
        }
        guard readData else { continue }
        let count = Int(location.size)
        let matches = buffer.withUnsafeMutableBytes { raw -> Bool in
          let slice = UnsafeMutableRawBufferPointer(rebasing: raw[0..<count])
          guard (try? source.read(into: slice, at: location.dataOffset, decoder: decoder)) != nil else {
            return false
          }
          return SHA256.hash(UnsafeRawBufferPointer(slice)) == location.digest
        }
        if matches {
          verified += location.size
        } else {
          problems.append(
            "Archive '\(archive)': chunk \(location.digest.hex.prefix(16)) does not match its SHA-256")
        }
      }
    }
    return problems
  }

  /// Why content `digest` of `size` bytes, which has no blob location, cannot be restored from
  /// chunks; nil when its chunk list is whole and every chunk has a location.
  func checkChunked(_ digest: Digest, size: Int64, contents: ContentIndex) throws -> String? {
    let list: ChunkList?
    do {
      list = try catalog.chunkList(digest, size: size)
    } catch {
      return "its chunk list is damaged (\(error))"
    }
    guard let list else { return "no archive holds its content" }
    if let missing = list.chunks.first(where: { !contents.chunks.contains($0.digest) }) {
      return "no archive holds its chunk \(missing.digest.hex.prefix(16))"
    }
    return nil
  }
}
