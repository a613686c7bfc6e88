// The manifest: the last member of every archive, `.appbox/manifest`, so that the catalog can
// be rebuilt from the archives alone.
//
// It holds the snapshot's catalog row (absent in an archive `forget` wrote to keep content
// alive), the trees first stored with this archive (whole, or as deltas against an earlier
// tree), the locations of the blobs whose content this archive holds, the chunks first stored
// in it, the chunk lists of contents stored as chunks, and for a framed archive the index of
// its frames. Format (version 4 when it names chunks in earlier archives, else 3 for a framed
// archive and 2 for any other), integers as LEB128 varints:
//   "APPBOXMF" 0x04 (or 0x03, 0x02)
//   fieldCount (key value)*                  snapshot fields: UTF-8 strings, except the
//                                            unreadable and torn paths (raw bytes joined
//                                            by NUL)
//   treeCount (digest[32] 0|1 [base[32]] dataLen data)*     1: data is a delta against base
//   blobCount (digest[32] offset size pathLen path dataOffset+1)*   0: no direct data offset
//   chunkCount (digest[32] offset dataOffset size)*
//   listCount (digest[32] listLen list)*
//   [foreignCount (archiveLen archive digest[32] offset dataOffset size)*]
//                                            version 4: chunks that lie in earlier archives,
//                                            inside whole members, found by this backup (a large
//                                            file's first edit in place is compared with the
//                                            version an earlier archive holds whole: the edit
//                                            then stores only the chunks it changed)
//   [framesLen frames]                       version 3: the frame index (FrameIndex.swift) of
//                                            everything before this member, which starts a
//                                            frame of its own; version 4: 0|1, then 1: it
//   sha256[32] of everything before it
// Version 1 (before deltas, data offsets and chunks) had only whole trees and blobs without
// data offsets; version 2 has no frame index. Both are still read, and an archive that is not
// framed still gets version 2. Decoding (ManifestDecoder.swift, the one parser, record by
// record as the bytes are read) treats the bytes as untrusted: every length is bounded, every
// whole tree must hash to its digest (a delta is checked when it is resolved, against its
// base), every chunk list must parse, and the trailing checksum must match.

import AppboxArchive
import AppboxCrypto
import Foundation

/// A manifest in memory: what a small one holds, or what `forget` writes. Large ones are never
/// held like this: a backup spools its manifest (ManifestSpool.swift), readers decode it as it
/// is read (ManifestDecoder.swift).
package struct Manifest {
  package static let memberPath = Array(".appbox/manifest".utf8)
  package static let keychainMemberPath = Array(".appbox/keychain".utf8)
  static let magic = Array("APPBOXMF".utf8)

  package var snapshot: Snapshot?
  var trees: [StoredTree]
  var blobs: [BlobLocation]
  package var chunks: [ChunkLocation] = []
  package var chunkLists: [(digest: Digest, list: ChunkList)] = []
  /// Chunks this archive's backup indexed inside earlier archives (version 4).
  package var foreignChunks: [ChunkLocation] = []
  /// The frames before the manifest member, for a framed archive.
  package var frames: FrameIndex? = nil

  /// The longest archive name a foreign chunk record may carry.
  static let maximumArchiveNameLength = 255

  /// The longest frame index a manifest may carry (some 2 million frames: a terabyte).
  static let maximumFramesLength = 16 << 20

  func encoded() -> [UInt8] {
    var result: [UInt8] = []
    result.reserveCapacity(encodedSize)
    encode { result.append(contentsOf: $0) }
    return result
  }

  /// The length of `encoded()`, computed without encoding.
  package var encodedSize: Int {
    var treeBytes = 0
    for tree in trees {
      treeBytes +=
        Digest.byteCount + 1 + (tree.base == nil ? 0 : Digest.byteCount) + Self.dataSize(tree.data.count)
    }
    var blobBytes = 0
    for blob in blobs { blobBytes += Self.encodedSize(of: blob) }
    return Self.encodedSize(
      snapshot: snapshot, treeCount: trees.count, treeBytes: treeBytes, blobCount: blobs.count,
      blobBytes: blobBytes, chunks: chunks, chunkLists: chunkLists, foreignChunks: foreignChunks,
      frames: frames)
  }

  /// Hands the encoding to `sink` in pieces of about 64 KiB, so a manifest of a large
  /// snapshot (one blob per file) never has to sit in memory whole.
  package func encode(_ sink: (UnsafeRawBufferPointer) throws -> Void) rethrows {
    try Self.encode(
      snapshot: snapshot, treeCount: trees.count,
      trees: { piece in
        var out = ByteWriter()
        for tree in trees {
          Self.encode(tree, into: &out)
          if out.bytes.count >= 64 << 10 {
            try out.bytes.withUnsafeBytes { try piece($0) }
            out.bytes.removeAll(keepingCapacity: true)
          }
        }
        try out.bytes.withUnsafeBytes { try piece($0) }
      },
      blobCount: blobs.count,
      blobs: { piece in
        var out = ByteWriter()
        for blob in blobs {
          Self.encode(blob, into: &out)
          if out.bytes.count >= 64 << 10 {
            try out.bytes.withUnsafeBytes { try piece($0) }
            out.bytes.removeAll(keepingCapacity: true)
          }
        }
        try out.bytes.withUnsafeBytes { try piece($0) }
      }, chunks: chunks, chunkLists: chunkLists, foreignChunks: foreignChunks, frames: frames, sink)
  }

  private static func dataSize(_ count: Int) -> Int { ByteWriter.varintSize(UInt64(count)) + count }

  static func encodedSize(of blob: BlobLocation) -> Int {
    Digest.byteCount + ByteWriter.varintSize(UInt64(blob.offset)) + ByteWriter.varintSize(UInt64(blob.size))
      + dataSize(blob.path.count) + ByteWriter.varintSize(UInt64(blob.dataOffset.map { $0 + 1 } ?? 0))
  }

  /// The length of an encoding whose trees and blobs take `treeBytes` and `blobBytes`.
  static func encodedSize(
    snapshot: Snapshot?, treeCount: Int, treeBytes: Int, blobCount: Int, blobBytes: Int,
    chunks: [ChunkLocation], chunkLists: [(digest: Digest, list: ChunkList)], foreignChunks: [ChunkLocation],
    frames: FrameIndex?
  ) -> Int {
    var size = magic.count + 1
    let fields = snapshot.map(Manifest.fields) ?? []
    size += ByteWriter.varintSize(UInt64(fields.count))
    for (key, value) in fields { size += dataSize(key.utf8.count) + dataSize(value.count) }
    size += ByteWriter.varintSize(UInt64(treeCount)) + treeBytes
    size += ByteWriter.varintSize(UInt64(blobCount)) + blobBytes
    size += ByteWriter.varintSize(UInt64(chunks.count))
    func located(_ chunk: ChunkLocation) -> Int {
      Digest.byteCount + ByteWriter.varintSize(UInt64(chunk.offset))
        + ByteWriter.varintSize(UInt64(chunk.dataOffset)) + ByteWriter.varintSize(UInt64(chunk.size))
    }
    for chunk in chunks { size += located(chunk) }
    size += ByteWriter.varintSize(UInt64(chunkLists.count))
    for list in chunkLists { size += Digest.byteCount + dataSize(list.list.encoded().count) }
    if !foreignChunks.isEmpty {
      size += ByteWriter.varintSize(UInt64(foreignChunks.count)) + 1
      for chunk in foreignChunks { size += dataSize(chunk.archive.utf8.count) + located(chunk) }
    }
    if let frames { size += dataSize(frames.encoded().count) }
    return size + Digest.byteCount
  }

  /// One tree as the manifest records it.
  static func encode(_ tree: StoredTree, into out: inout ByteWriter) {
    out.digest(tree.digest)
    if let base = tree.base {
      out.byte(1)
      out.digest(base)
    } else {
      out.byte(0)
    }
    out.data(tree.data)
  }

  /// One blob location as the manifest records it (its archive is the manifest's).
  static func encode(_ blob: BlobLocation, into out: inout ByteWriter) {
    out.digest(blob.digest)
    out.varint(UInt64(blob.offset))
    out.varint(UInt64(blob.size))
    out.data(blob.path)
    out.varint(UInt64(blob.dataOffset.map { $0 + 1 } ?? 0))
  }

  /// The whole encoding, with the trees' and blobs' encodings coming from `trees` and `blobs`
  /// (each hands its pieces to the function it is given).
  static func encode(
    snapshot: Snapshot?, treeCount: Int,
    trees: ((UnsafeRawBufferPointer) throws -> Void) throws -> Void, blobCount: Int,
    blobs: ((UnsafeRawBufferPointer) throws -> Void) throws -> Void, chunks: [ChunkLocation],
    chunkLists: [(digest: Digest, list: ChunkList)], foreignChunks: [ChunkLocation], frames: FrameIndex?,
    _ sink: (UnsafeRawBufferPointer) throws -> Void
  ) rethrows {
    try withoutActuallyEscaping(sink) { sink in
      try encode(
        snapshot: snapshot, treeCount: treeCount, trees: trees, blobCount: blobCount, blobs: blobs,
        chunks: chunks, chunkLists: chunkLists, foreignChunks: foreignChunks, frames: frames, escaping: sink)
    }
  }

  private static func encode(
    snapshot: Snapshot?, treeCount: Int,
    trees: ((UnsafeRawBufferPointer) throws -> Void) throws -> Void, blobCount: Int,
    blobs: ((UnsafeRawBufferPointer) throws -> Void) throws -> Void, chunks: [ChunkLocation],
    chunkLists: [(digest: Digest, list: ChunkList)], foreignChunks: [ChunkLocation], frames: FrameIndex?,
    escaping sink: @escaping (UnsafeRawBufferPointer) throws -> Void
  ) throws {
    let hasher = SHA256Hasher()
    func pass(_ piece: UnsafeRawBufferPointer) throws {
      hasher.update(piece)
      try sink(piece)
    }
    var out = ByteWriter()
    func flush(force: Bool = false) throws {
      guard force || out.bytes.count >= 64 << 10 else { return }
      try out.bytes.withUnsafeBytes { try pass($0) }
      out.bytes.removeAll(keepingCapacity: true)
    }
    out.bytes.append(contentsOf: Manifest.magic)
    out.byte(foreignChunks.isEmpty ? (frames == nil ? 2 : 3) : 4)
    let fields = snapshot.map(Manifest.fields) ?? []
    out.varint(UInt64(fields.count))
    for (key, value) in fields {
      out.data(Array(key.utf8))
      out.data(value)
    }
    out.varint(UInt64(treeCount))
    try flush(force: true)
    try trees(pass)
    out.varint(UInt64(blobCount))
    try flush(force: true)
    try blobs(pass)
    out.varint(UInt64(chunks.count))
    func located(_ chunk: ChunkLocation) {
      out.digest(chunk.digest)
      out.varint(UInt64(chunk.offset))
      out.varint(UInt64(chunk.dataOffset))
      out.varint(UInt64(chunk.size))
    }
    for chunk in chunks {
      located(chunk)
      try flush()
    }
    out.varint(UInt64(chunkLists.count))
    for list in chunkLists {
      out.digest(list.digest)
      out.data(list.list.encoded())
      try flush()
    }
    if !foreignChunks.isEmpty {
      out.varint(UInt64(foreignChunks.count))
      for chunk in foreignChunks {
        out.data(Array(chunk.archive.utf8))
        located(chunk)
        try flush()
      }
      out.byte(frames == nil ? 0 : 1)
    }
    if let frames { out.data(frames.encoded()) }
    try flush(force: true)
    try hasher.finalize().withUnsafeBytes { try sink($0) }
  }

  private static func fields(_ snapshot: Snapshot) -> [(String, [UInt8])] {
    var fields: [(String, String)] = [
      ("id", snapshot.id), ("app", snapshot.app), ("device", snapshot.device),
      ("container", snapshot.containerID),
      ("version", snapshot.version), ("bundle", snapshot.bundleDirectoryName), ("seal", snapshot.seal),
      ("time", String(snapshot.time.timeIntervalSince1970)), ("kind", snapshot.kind.rawValue),
      ("root", snapshot.rootTree.hex), ("files", String(snapshot.files)), ("bytes", String(snapshot.bytes)),
      ("bytesAdded", String(snapshot.bytesAdded)), ("warnings", String(snapshot.warnings)),
    ]
    if let tag = snapshot.tag { fields.append(("tag", tag)) }
    if let team = snapshot.team { fields.append(("team", team)) }
    if let parent = snapshot.parent { fields.append(("parent", parent)) }
    if let offset = snapshot.keychainOffset { fields.append(("keychain", String(offset))) }
    if snapshot.unreadable > 0 { fields.append(("unreadable", String(snapshot.unreadable))) }
    var result = fields.map { ($0.0, Array($0.1.utf8)) }
    if !snapshot.unreadablePaths.isEmpty {
      result.append(("unreadablePaths", Snapshot.joinedPaths(snapshot.unreadablePaths)))
    }
    if snapshot.torn > 0 {
      result.append(("torn", Array(String(snapshot.torn).utf8)))
      result.append(("tornPaths", Snapshot.joinedPaths(snapshot.tornPaths)))
    }
    return result
  }

  /// Parses a manifest read whole from archive `archive` (a small one: a snapshot object's, or
  /// a test's). Large ones are read in pieces by `ManifestDecoder`, which this uses too.
  static func decode(_ bytes: [UInt8], archive: String) throws -> Manifest {
    let collector = ManifestCollector()
    try ManifestDecoder.decode(RecordReader(MemoryReader(bytes)), archive: archive, into: collector)
    return collector.manifest
  }

  /// Hands every record to `consumer`, in the order they are encoded.
  package func forEachRecord(_ consumer: some ManifestConsumer) throws {
    try consumer.snapshot(snapshot)
    for tree in trees { try consumer.tree(tree) }
    for blob in blobs { try consumer.blob(blob) }
    for chunk in chunks { try consumer.chunk(chunk) }
    for (digest, list) in chunkLists { try consumer.chunkList(digest, list) }
    for chunk in foreignChunks { try consumer.foreignChunk(chunk) }
    if let frames { try consumer.frames(frames) }
  }

  /// One tree record (a whole tree is checked against its digest; a delta when resolved).
  static func decodeTree(_ input: inout ByteReader, version: UInt8, bad: (String) -> RepositoryError) throws
    -> StoredTree
  {
    let digest = try input.digest()
    var base: Digest?
    if version >= 2 {
      switch try input.byte() {
      case 0: break
      case 1: base = try input.digest()
      default: throw bad("tree \(digest.hex.prefix(16)) has a bad form")
      }
    }
    let data = try input.data(limit: TreeDelta.maximumLength)
    guard base != nil || SHA256.hash(data) == digest else {
      throw bad("tree \(digest.hex.prefix(16)) does not match its digest")
    }
    return StoredTree(digest: digest, base: base, data: data)
  }

  /// One blob location record, of archive `archive`.
  static func decodeBlob(
    _ input: inout ByteReader, version: UInt8, archive: String, bad: (String) -> RepositoryError
  ) throws -> BlobLocation {
    let digest = try input.digest()
    let offset = Int64(bitPattern: try input.varint())
    let size = Int64(bitPattern: try input.varint())
    let path = try input.data(limit: 1 << 16)
    guard offset >= 0, size > 0 else { throw bad("a blob location is out of range") }
    var dataOffset: Int64?
    if version >= 2 {
      let encoded = try input.varint()
      if encoded > 0 {
        guard encoded - 1 > UInt64(offset), encoded - 1 <= UInt64(Int64.max) else {
          throw bad("a blob location is out of range")
        }
        dataOffset = Int64(encoded - 1)
      }
    }
    return BlobLocation(
      digest: digest, archive: archive, offset: offset, path: path, size: size, dataOffset: dataOffset)
  }

  /// One chunk location record, of archive `archive`.
  static func decodeChunk(_ input: inout ByteReader, archive: String, bad: (String) -> RepositoryError) throws
    -> ChunkLocation
  {
    let digest = try input.digest()
    let offset = try input.varint()
    let dataOffset = try input.varint()
    let size = try input.varint()
    guard dataOffset > offset, dataOffset <= UInt64(Int64.max) - size, size > 0,
      size <= UInt64(ChunkingParameters.largestStored)
    else { throw bad("a chunk location is out of range") }
    return ChunkLocation(
      digest: digest, archive: archive, offset: Int64(offset), dataOffset: Int64(dataOffset),
      size: Int64(size))
  }

  /// One foreign chunk record (version 4): a chunk in another archive, named by the record.
  static func decodeForeignChunk(_ input: inout ByteReader, archive: String, bad: (String) -> RepositoryError)
    throws -> ChunkLocation
  {
    let name = String(decoding: try input.data(limit: maximumArchiveNameLength), as: UTF8.self)
    guard !name.isEmpty, name != archive, !name.contains("/"), !name.hasPrefix(".") else {
      throw bad("a foreign chunk names a bad archive")
    }
    return try decodeChunk(&input, archive: name, bad: bad)
  }

  /// The snapshot row the fields (raw values by key) describe.
  static func snapshot(_ rawFields: [String: [UInt8]], archive: String, bad: (String) -> RepositoryError)
    throws -> Snapshot
  {
    let fields = rawFields.mapValues { String(decoding: $0, as: UTF8.self) }
    func field(_ key: String) throws -> String {
      guard let value = fields[key] else { throw bad("the snapshot field '\(key)' is missing") }
      return value
    }
    guard let time = Double(try field("time")), let kind = SnapshotKind(rawValue: try field("kind")),
      let root = Digest(hex: try field("root")), let files = Int(try field("files")),
      let bytes = Int64(try field("bytes")), let added = Int64(try field("bytesAdded")),
      let warnings = Int(try field("warnings"))
    else { throw bad("a snapshot field is malformed") }
    var snapshot = Snapshot(
      id: try field("id"), app: try field("app"), device: try field("device"),
      containerID: try field("container"),
      version: try field("version"), bundleDirectoryName: try field("bundle"), seal: try field("seal"),
      time: Date(timeIntervalSince1970: time), kind: kind, tag: fields["tag"], parent: fields["parent"],
      rootTree: root, files: files, bytes: bytes, bytesAdded: added, archive: archive,
      keychainOffset: fields["keychain"].flatMap { Int64($0) }, warnings: warnings, team: fields["team"])
    if let count = fields["unreadable"] {
      guard let unreadable = Int(count), unreadable >= 0 else { throw bad("a snapshot field is malformed") }
      snapshot.unreadable = unreadable
      snapshot.unreadablePaths = Snapshot.splitPaths(rawFields["unreadablePaths"] ?? [])
    }
    if let count = fields["torn"] {
      guard let torn = Int(count), torn >= 0 else { throw bad("a snapshot field is malformed") }
      snapshot.torn = torn
      snapshot.tornPaths = Snapshot.splitPaths(rawFields["tornPaths"] ?? [])
    }
    return snapshot
  }
}

/// Builds a `Manifest` from the records it is handed.
final class ManifestCollector: ManifestConsumer {
  private(set) var manifest = Manifest(snapshot: nil, trees: [], blobs: [])

  func snapshot(_ snapshot: Snapshot?) throws { manifest.snapshot = snapshot }
  func tree(_ tree: StoredTree) throws { manifest.trees.append(tree) }
  func blob(_ blob: BlobLocation) throws { manifest.blobs.append(blob) }
  func chunk(_ chunk: ChunkLocation) throws { manifest.chunks.append(chunk) }
  func chunkList(_ digest: Digest, _ list: ChunkList) throws { manifest.chunkLists.append((digest, list)) }
  func foreignChunk(_ chunk: ChunkLocation) throws { manifest.foreignChunks.append(chunk) }
  func frames(_ index: FrameIndex) throws { manifest.frames = index }
}

/// A member for appbox's own data (`.appbox/...`), private to the owner.
package func metadataMember(_ path: [UInt8], size: Int, time: Date) -> ArchiveEntry {
  let seconds = time.timeIntervalSince1970
  return ArchiveEntry.file(
    path, size: Int64(size), permissions: 0o600,
    modificationTime: ArchiveTimestamp(seconds: Int64(seconds), nanoseconds: 0))
}
