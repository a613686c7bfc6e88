// The catalog's chunks: where each content-defined chunk of a large file is stored, and which
// chunks make up a content that was stored as chunks.
//
// A chunk lives in an uncompressed archive, either as a member of its own
// (`.appbox/chunks/<hex digest>`, written when a large file changed in place and only some of
// its chunks were new) or inside a whole file's member (every large file stored whole has its
// chunks indexed, so the next edit of it stores only what changed). Either way its bytes are
// `size` bytes at `dataOffset` of the archive, inside the member whose header is at `offset`.
//
// A chunk list says, for a file content stored as chunks (it has no blob), which chunks make
// it up, in order. Lists come back from manifests, so `ChunkList.decode` treats them as
// untrusted: bounded counts, positive sizes, sizes that add up to the content's size.

import AppboxArchive
import AppboxCrypto
import AppboxStore

/// Where one chunk is stored.
public struct ChunkLocation: Sendable, Equatable {
  public var digest: Digest
  public var archive: String
  /// Uncompressed offset of the header of the member holding it.
  public var offset: Int64
  /// Uncompressed offset of its first byte.
  public var dataOffset: Int64
  public var size: Int64

  package init(digest: Digest, archive: String, offset: Int64, dataOffset: Int64, size: Int64) {
    self.digest = digest
    self.archive = archive
    self.offset = offset
    self.dataOffset = dataOffset
    self.size = size
  }
}

/// The chunks of a content stored as chunks, in order.
public struct ChunkList: Sendable, Equatable {
  public var chunks: [(digest: Digest, size: Int64)]

  public init(chunks: [(digest: Digest, size: Int64)]) { self.chunks = chunks }

  public static func == (a: ChunkList, b: ChunkList) -> Bool {
    a.chunks.count == b.chunks.count && zip(a.chunks, b.chunks).allSatisfy { $0 == $1 }
  }

  public var totalSize: Int64 { chunks.reduce(0) { $0 + $1.size } }

  /// The longest encoded list a manifest may carry: at the minimum chunk size (256 KiB, some
  /// 36 bytes a chunk), a content of more than 400 GB.
  static let maximumEncodedSize = 64 << 20

  /// The member path of a chunk stored on its own.
  package static func memberPath(_ digest: Digest) -> [UInt8] { Array(".appbox/chunks/\(digest.hex)".utf8) }

  /// count (digest[32] size)*
  func encoded() -> [UInt8] {
    var out = ByteWriter()
    out.varint(UInt64(chunks.count))
    for chunk in chunks {
      out.digest(chunk.digest)
      out.varint(UInt64(chunk.size))
    }
    return out.bytes
  }

  /// Parses a list of a content of `size` bytes; `.corruptCatalog` when malformed.
  static func decode(_ bytes: [UInt8], size: Int64? = nil) throws -> ChunkList {
    try bytes.withUnsafeBytes { raw in
      var input = ByteReader(raw)
      let count = try input.count(limit: raw.count / (Digest.byteCount + 1))
      var chunks: [(digest: Digest, size: Int64)] = []
      chunks.reserveCapacity(count)
      var total: Int64 = 0
      for _ in 0..<count {
        let digest = try input.digest()
        let chunkSize = try input.varint()
        guard chunkSize > 0, chunkSize <= UInt64(ChunkingParameters.largestStored) else {
          throw ByteReader.malformed("a chunk size is out of range")
        }
        total += Int64(chunkSize)
        chunks.append((digest, Int64(chunkSize)))
      }
      guard input.isAtEnd else { throw ByteReader.malformed("trailing bytes after a chunk list") }
      if let size, total != size { throw ByteReader.malformed("a chunk list does not add up to its content") }
      return ChunkList(chunks: chunks)
    }
  }
}

extension Catalog {
  public func chunk(_ digest: Digest) throws -> ChunkLocation? {
    let statement = try database.cachedStatement(
      "SELECT archive, offset, data_offset, size FROM chunks WHERE digest = ?1")
    try digest.withUnsafeBytes { try statement.bind($0, at: 1) }
    return try statement.first { row in
      ChunkLocation(
        digest: digest, archive: row.text(0) ?? "", offset: row.int64(1), dataOffset: row.int64(2),
        size: row.int64(3))
    }
  }

  public func hasChunk(_ digest: Digest) throws -> Bool {
    let statement = try database.cachedStatement("SELECT 1 FROM chunks WHERE digest = ?1")
    try digest.withUnsafeBytes { try statement.bind($0, at: 1) }
    return try statement.first { _ in true } ?? false
  }

  /// Adds chunk locations (those whose digest has none); `declaredBy`: the archive whose
  /// manifest records them, when it is not the one holding them.
  public func insertChunks(_ chunks: [ChunkLocation], declaredBy: String? = nil) throws {
    guard !chunks.isEmpty else { return }
    let statement = try database.cachedStatement(
      "INSERT OR IGNORE INTO chunks(digest, archive, offset, data_offset, size, declared) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
    )
    for chunk in chunks {
      try chunk.digest.withUnsafeBytes { try statement.bind($0, at: 1) }
      try statement.bind(chunk.archive, at: 2)
      try statement.bind(chunk.offset, at: 3)
      try statement.bind(chunk.dataOffset, at: 4)
      try statement.bind(chunk.size, at: 5)
      if let declaredBy { try statement.bind(declaredBy, at: 6) } else { try statement.bindNull(at: 6) }
      try statement.execute()
    }
  }

  /// Whether some chunk location lies in the member whose header is at `offset` of `archive`
  /// (a whole file whose chunks are indexed).
  public func hasChunks(inMemberAt offset: Int64, of archive: String) throws -> Bool {
    let statement = try database.cachedStatement(
      "SELECT 1 FROM chunks WHERE archive = ?1 AND offset = ?2 LIMIT 1")
    try statement.bind(archive, at: 1)
    try statement.bind(offset, at: 2)
    return try statement.first { _ in true } ?? false
  }

  /// The chunk locations the manifests of `archives` record in other archives.
  public func chunks(declaredBy archives: Set<String>) throws -> [ChunkLocation] {
    try archives.sorted().flatMap { name in
      try database.all(
        "SELECT digest, archive, offset, data_offset, size FROM chunks WHERE declared = ?1", .text(name),
        map: Self.chunkLocation)
    }
  }

  /// A row of `digest, archive, offset, data_offset, size`.
  private static func chunkLocation(_ row: Statement) -> ChunkLocation {
    ChunkLocation(
      digest: Digest(validating: row.blob(0)) ?? Digest(bytes: [UInt8](repeating: 0, count: 32)),
      archive: row.text(1) ?? "", offset: row.int64(2), dataOffset: row.int64(3), size: row.int64(4))
  }

  /// Inserts the foreign chunk locations waiting for their archives (manifests read out of
  /// order) whose archives the catalog now has. The others keep waiting with `keepingUnknown`
  /// (more manifests are to come), else are dropped (their archives are gone: `forget` moved
  /// what stayed live).
  public func settleForeignChunks(keepingUnknown: Bool = false) throws {
    var known: [String: Bool] = [:]
    var waiting: [(chunk: ChunkLocation, declarer: String)] = []
    for (chunk, declarer) in pendingForeignChunks {
      let present = try known[chunk.archive] ?? (archive(named: chunk.archive) != nil)
      known[chunk.archive] = present
      if present {
        try insertChunks([chunk], declaredBy: declarer)
      } else if keepingUnknown {
        waiting.append((chunk, declarer))
      }
    }
    pendingForeignChunks = waiting
  }

  /// Every chunk location, optionally only those in `archive`, by offset.
  public func chunks(inArchive archive: String? = nil) throws -> [ChunkLocation] {
    let map = Self.chunkLocation
    if let archive {
      return try database.all(
        "SELECT digest, archive, offset, data_offset, size FROM chunks WHERE archive = ?1 ORDER BY data_offset",
        .text(archive), map: map)
    }
    return try database.all(
      "SELECT digest, archive, offset, data_offset, size FROM chunks ORDER BY archive, data_offset", map: map)
  }

  /// The chunk list of content `digest`, or nil when it was not stored as chunks.
  public func chunkList(_ digest: Digest, size: Int64? = nil) throws -> ChunkList? {
    let statement = try database.cachedStatement("SELECT list FROM chunk_lists WHERE digest = ?1")
    try digest.withUnsafeBytes { try statement.bind($0, at: 1) }
    guard let bytes = try statement.first({ $0.blob(0) }) else { return nil }
    return try ChunkList.decode(bytes, size: size)
  }

  /// Adds the chunk list of content `digest`, carried by `archive`'s manifest, unless it has one.
  public func insertChunkList(_ digest: Digest, _ list: ChunkList, archive: String) throws {
    let statement = try database.cachedStatement(
      "INSERT OR IGNORE INTO chunk_lists(digest, list, archive) VALUES (?1, ?2, ?3)")
    try digest.withUnsafeBytes { try statement.bind($0, at: 1) }
    try statement.bind(list.encoded(), at: 2)
    try statement.bind(archive, at: 3)
    try statement.execute()
  }

  /// Every chunk list: content digest, list and the archive whose manifest carries it.
  public func chunkLists() throws -> [(digest: Digest, list: ChunkList, archive: String)] {
    try database.all("SELECT digest, list, archive FROM chunk_lists") { row in
      guard let digest = Digest(validating: row.blob(0)) else {
        throw RepositoryError(.corruptCatalog, "Catalog row of a chunk list is malformed")
      }
      return (digest, try ChunkList.decode(row.blob(1)), row.text(2) ?? "")
    }
  }
}

extension Catalog {
  /// Adds what `manifest` (archive `archive`'s) records: its trees as stored (whole or deltas),
  /// blob locations, chunk locations and chunk lists. Returns how many trees were new. The
  /// caller holds a transaction and inserts the archive and snapshot rows.
  @discardableResult
  func ingest(_ manifest: some ManifestContent, archive: String) throws -> Int {
    let ingest = CatalogIngest(self, archive: archive)
    try manifest.forEachRecord(ingest)
    try ingest.finish()
    return ingest.newTrees
  }
}

/// Adds a manifest's records to the catalog as they are handed over (from a backup's spool, or
/// from `ManifestDecoder` as the manifest is read). Blob and chunk locations go in batches (blobs
/// sorted by digest inside `insertBlobs`, so the rows go into the B-tree in order): a million never sit in
/// memory. Call `finish` after the last record. The caller holds a transaction, and, when the
/// records come from a manifest being read, commits it only once the decoder has returned (its
/// checksum matched); a decoder's error rolls it back. (Chunk locations keep the manifest's
/// order: of two copies of one chunk, the first stays its location, as before.)
final class CatalogIngest: ManifestConsumer {
  static let batch = 1 << 14
  private let catalog: Catalog
  private let archive: String
  private var blobs: [BlobLocation] = []
  private var chunks: [ChunkLocation] = []
  /// Chunks the manifest records in other archives.
  private var foreign: [ChunkLocation] = []
  /// Trees this ingest added (not already in the catalog).
  private(set) var newTrees = 0
  /// The snapshot row the manifest carries (its snapshot object is the one inserted).
  private(set) var snapshot: Snapshot?

  init(_ catalog: Catalog, archive: String) {
    self.catalog = catalog
    self.archive = archive
  }

  func snapshot(_ snapshot: Snapshot?) throws { self.snapshot = snapshot }

  func tree(_ tree: StoredTree) throws {
    if try catalog.insertTree(tree, archive: archive) { newTrees += 1 }
  }

  func blob(_ blob: BlobLocation) throws {
    blobs.append(blob)
    if blobs.count == Self.batch { try flushBlobs() }
  }

  func chunk(_ chunk: ChunkLocation) throws {
    chunks.append(chunk)
    if chunks.count == Self.batch { try flushChunks() }
  }

  func chunkList(_ digest: Digest, _ list: ChunkList) throws {
    try catalog.insertChunkList(digest, list, archive: archive)
  }

  func foreignChunk(_ chunk: ChunkLocation) throws { foreign.append(chunk) }

  func frames(_ index: FrameIndex) throws {
    try catalog.insertFrames(index, archive: archive)
  }

  /// Inserts what is still batched. Foreign chunks go last (a chunk the archive holds itself
  /// keeps that location), and only into archives the catalog has; the others wait for the
  /// final `Catalog.settleForeignChunks` (a rebuild may read a manifest before an older one).
  func finish() throws {
    try flushBlobs()
    try flushChunks()
    catalog.pendingForeignChunks += foreign.map { ($0, archive) }
    foreign = []
    try catalog.settleForeignChunks(keepingUnknown: true)
  }

  private func flushBlobs() throws {
    try catalog.insertBlobs(blobs)
    blobs.removeAll(keepingCapacity: true)
  }

  private func flushChunks() throws {
    try catalog.insertChunks(chunks)
    chunks.removeAll(keepingCapacity: true)
  }
}

extension Catalog {
  /// Every archive name some row (a snapshot, blob, tree, chunk or chunk list) refers to.
  public func namedArchives() throws -> Set<String> {
    var names: Set<String> = []
    for table in ["snapshots", "blobs", "trees", "chunks", "chunk_lists"] {
      for name in try database.all("SELECT DISTINCT archive FROM \(table)", map: { $0.text(0) ?? "" }) {
        names.insert(name)
      }
    }
    for name in try database.all(
      "SELECT DISTINCT declared FROM chunks WHERE declared IS NOT NULL", map: { $0.text(0) ?? "" })
    {
      names.insert(name)
    }
    return names
  }
}
