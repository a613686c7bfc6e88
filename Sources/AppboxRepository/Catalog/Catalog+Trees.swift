// The catalog's trees: each row holds a tree whole, or as a delta against another tree (its
// base, usually the previous version of the same directory), at most `maximumDeltaDepth`
// deltas away from a whole one.
//
// Why: a 1% change spread over a 100,000-file home rewrites about 700 directory trees, 3.7 MB
// whole (5.3 KB each on average) against 11 MB of new file content; as deltas they take a few
// hundred bytes each. Reading a tree resolves its chain in one recursive query and checks the
// result against the digest, so a damaged or misplaced delta never passes for the tree.
//
// Invariants: a row's `base` names a tree the catalog holds (a rebuild may insert a delta
// before its base; it resolves once both are in); `depth` is at least the number of deltas
// between a row and the whole tree its chain ends at (it can only overestimate, after a base
// was made whole), and new deltas are made only against bases of depth below the maximum.
// Nothing deletes a tree another row uses as its base: `forget` first makes such trees whole.

import AppboxCrypto
import AppboxStore

/// A tree as the catalog and manifests store it.
public struct StoredTree: Sendable, Equatable {
  public var digest: Digest
  /// The tree `data` is a delta against (`TreeDelta`); nil when `data` is the tree itself.
  public var base: Digest?
  public var data: [UInt8]

  public init(digest: Digest, base: Digest? = nil, data: [UInt8]) {
    self.digest = digest
    self.base = base
    self.data = data
  }

  /// Stores `data` (the serialization of tree `digest`) as a delta against `base` (the
  /// serialization of tree `baseDigest`, `baseDepth` deltas from a whole tree) when that is
  /// allowed and clearly smaller, else whole.
  package static func choosing(
    digest: Digest, data: [UInt8], base: (digest: Digest, data: [UInt8], depth: Int)?
  ) -> StoredTree {
    guard let base, base.depth < Catalog.maximumDeltaDepth, !base.data.isEmpty,
      let delta = try? TreeDelta.make(from: base.data, to: data),
      delta.count * 2 <= data.count
    else { return StoredTree(digest: digest, data: data) }
    return StoredTree(digest: digest, base: base.digest, data: delta)
  }
}

extension Catalog {
  /// How many deltas may separate a tree from the whole tree its chain ends at. Each one
  /// costs a row read and a copy when the tree is read (every backup reads the previous
  /// snapshot's trees); measured in Benchmarks/results/HISTORY.md.
  public static let maximumDeltaDepth = 8

  /// The serialized tree `digest` (resolving its delta chain), or nil when the catalog has no
  /// such tree. A chain that is broken, malformed or does not hash to `digest` is
  /// `.corruptCatalog`.
  public func treeData(_ digest: Digest) throws -> [UInt8]? {
    // Point lookups down the chain (cheaper than a recursive query): the deltas, newest
    // first, then the whole tree they start from.
    let statement = try database.cachedStatement("SELECT base, data FROM trees WHERE digest = ?1")
    var deltas: [[UInt8]] = []
    var current = digest
    while true {
      try current.withUnsafeBytes { try statement.bind($0, at: 1) }
      let row = try statement.first { row -> (base: Digest?, data: [UInt8]) in
        (row.isNull(0) ? nil : Digest(validating: row.blob(0)), row.blob(1))
      }
      guard let row else {
        if deltas.isEmpty { return nil }
        throw RepositoryError(
          .corruptCatalog, "Catalog tree \(digest.hex.prefix(16)) is a delta whose base is missing")
      }
      guard let base = row.base else {
        if deltas.isEmpty { return row.data }
        var data = row.data
        for delta in deltas.reversed() { data = try TreeDelta.apply(delta, to: data) }
        guard SHA256.hash(data) == digest else {
          throw RepositoryError(
            .corruptCatalog, "Catalog tree \(digest.hex.prefix(16)) does not match its digest")
        }
        return data
      }
      guard deltas.count < 64 else {
        throw RepositoryError(
          .corruptCatalog, "Catalog tree \(digest.hex.prefix(16)) has a delta chain that does not end")
      }
      deltas.append(row.data)
      current = base
    }
  }

  /// The tree `digest`, decoded; `.corruptCatalog` when missing or malformed.
  public func tree(_ digest: Digest) throws -> Tree {
    guard let data = try treeData(digest) else {
      throw RepositoryError(.corruptCatalog, "Catalog is missing tree \(digest.hex.prefix(16))")
    }
    return try Tree.decode(data)
  }

  /// Whether the tree is stored where new snapshots may rely on it: in the manifest of an
  /// archive not marked for deletion (`archives.retired`, set only in shared repositories).
  public func hasTree(_ digest: Digest) throws -> Bool {
    let statement = try database.cachedStatement(
      """
      SELECT 1 FROM trees WHERE digest = ?1
        AND NOT EXISTS (SELECT 1 FROM archives WHERE name = trees.archive AND retired IS NOT NULL)
      """)
    try digest.withUnsafeBytes { try statement.bind($0, at: 1) }
    return try statement.first { _ in true } ?? false
  }

  /// The trees tree `digest` is read from, itself first, then its delta chain's bases to the
  /// whole tree, with the archive whose manifest carries each: reading the tree needs all of
  /// them. Empty when the catalog has no such tree.
  public func treeChain(_ digest: Digest) throws -> [(digest: Digest, archive: String)] {
    let statement = try database.cachedStatement("SELECT base, archive FROM trees WHERE digest = ?1")
    var chain: [(digest: Digest, archive: String)] = []
    var current: Digest? = digest
    while let tree = current, chain.count <= 64 {
      try tree.withUnsafeBytes { try statement.bind($0, at: 1) }
      guard
        let row = try statement.first({ row in
          (base: row.isNull(0) ? nil : Digest(validating: row.blob(0)), archive: row.text(1) ?? "")
        })
      else { break }
      chain.append((tree, row.archive))
      current = row.base
    }
    return chain
  }

  /// The row of tree `digest` as stored (whole or a delta), or nil.
  public func storedTree(_ digest: Digest) throws -> StoredTree? {
    let statement = try database.cachedStatement("SELECT base, data FROM trees WHERE digest = ?1")
    try digest.withUnsafeBytes { try statement.bind($0, at: 1) }
    return try statement.first { row in
      StoredTree(
        digest: digest, base: row.isNull(0) ? nil : Digest(validating: row.blob(0)), data: row.blob(1))
    }
  }

  /// The trees `archive`'s manifest carries, as stored (whole or deltas).
  public func storedTrees(inArchive archive: String) throws -> [StoredTree] {
    try database.all("SELECT digest, base, data FROM trees WHERE archive = ?1", .text(archive)) { row in
      guard let digest = Digest(validating: row.blob(0)) else {
        throw RepositoryError(.corruptCatalog, "Catalog row of a tree of '\(archive)' is malformed")
      }
      return StoredTree(
        digest: digest, base: row.isNull(1) ? nil : Digest(validating: row.blob(1)), data: row.blob(2))
    }
  }

  /// How many deltas tree `digest` is from a whole tree (an upper bound), or nil.
  public func treeDepth(_ digest: Digest) throws -> Int? {
    let statement = try database.cachedStatement("SELECT depth FROM trees WHERE digest = ?1")
    try digest.withUnsafeBytes { try statement.bind($0, at: 1) }
    return try statement.first { $0.int(0) }
  }

  /// Adds a whole tree unless present; returns whether it was added.
  @discardableResult
  public func insertTree(_ digest: Digest, data: [UInt8], archive: String) throws -> Bool {
    try insertTree(StoredTree(digest: digest, data: data), archive: archive)
  }

  /// Adds a tree as stored (whole or a delta) unless present; returns whether it was added.
  /// A whole tree replaces a delta already stored for the same digest (a catalog rebuilt from
  /// archives meets a tree `forget` made whole after the delta's base went). A delta whose base
  /// is not (yet) in the catalog gets the maximum depth, so no new delta is made against it.
  @discardableResult
  public func insertTree(_ tree: StoredTree, archive: String) throws -> Bool {
    var depth = 0
    if let base = tree.base {
      depth = try treeDepth(base).map { min($0 + 1, Catalog.maximumDeltaDepth) } ?? Catalog.maximumDeltaDepth
    }
    let statement = try database.cachedStatement(
      """
      INSERT INTO trees(digest, data, archive, base, depth) VALUES (?1, ?2, ?3, ?4, ?5)
      ON CONFLICT(digest) DO UPDATE SET data = excluded.data, archive = excluded.archive, base = NULL, depth = 0
      WHERE excluded.base IS NULL AND trees.base IS NOT NULL
      """)
    try tree.digest.withUnsafeBytes { try statement.bind($0, at: 1) }
    try statement.bind(tree.data, at: 2)
    try statement.bind(archive, at: 3)
    if let base = tree.base {
      try base.withUnsafeBytes { try statement.bind($0, at: 4) }
    } else {
      try statement.bindNull(at: 4)
    }
    try statement.bind(depth, at: 5)
    try statement.execute()
    return database.changes > 0
  }

  /// Rewrites tree `digest` whole (its data unchanged), now carried by `archive`'s manifest:
  /// what `forget` does before the tree's base goes.
  public func storeWhole(_ digest: Digest, archive: String) throws {
    guard let data = try treeData(digest) else {
      throw RepositoryError(.corruptCatalog, "Catalog is missing tree \(digest.hex.prefix(16))")
    }
    try database.execute(
      "UPDATE trees SET data = ?1, base = NULL, depth = 0, archive = ?2 WHERE digest = ?3", .blob(data),
      .text(archive), .blob(digest.bytes))
  }

  /// The trees in `trees` stored as deltas against a tree outside `trees`: they must be made
  /// whole before the trees outside are deleted.
  public func deltasWithBaseOutside(_ trees: Set<Digest>) throws -> [Digest] {
    try database.all("SELECT digest, base FROM trees WHERE base IS NOT NULL") { row in
      (Digest(validating: row.blob(0)), Digest(validating: row.blob(1)))
    }
    .compactMap { digest, base in
      guard let digest, trees.contains(digest), let base, !trees.contains(base) else { return nil }
      return digest
    }
  }

  /// Bytes of tree rows as stored, and how many of them are deltas (for reports and tests).
  public func treeStorage() throws -> (trees: Int, deltas: Int, bytes: Int64) {
    try database.first(
      "SELECT count(*), count(base), coalesce(sum(length(data)), 0) FROM trees"
    ) { (Int($0.int64(0)), Int($0.int64(1)), $0.int64(2)) } ?? (0, 0, 0)
  }
}
