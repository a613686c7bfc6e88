// Stage 4 of a backup: compute the snapshot's trees bottom-up, each as soon as its directory
// is done.
//
// Algorithm: the archiver calls `finish` for each directory once its items and its whole
// subtree have been archived (the content reader says so, in depth-first order), so every
// subdirectory's tree is built before its parent's, and the directory can then be released:
// the trees are never all in memory, only spooled for the manifest as they are made.
// A tree is its header followed by its entries' encodings, so each directory's new
// serialization is assembled from the previous tree's bytes for every entry change detection
// reused (copied, not decoded), and fresh encodings for the rest: symlinks and FIFOs the
// scanner saw, subdirectories with their just-computed digests, files the archiver read. A
// directory whose every entry came out byte for byte as before, with the same count, keeps the
// previous digest without hashing anything: a no-change backup hashes no trees. Otherwise the
// tree is hashed; it is new when neither the catalog nor this run has it.
//
// A new tree is stored as a delta against the previous version of its directory (the tree
// the scan compared with) when that is much smaller and the chain stays short
// (`StoredTree.choosing`); its digest is that of its whole serialization either way.
//
// Invariants: an excluded directory contributes an entry without a digest and no tree; a
// file that vanished before it was read is left out; counts (files, bytes) cover the data
// only: not the bundle, not excluded items.

import AppboxCore
import AppboxCrypto
import AppboxRepository

final class TreeBuilder {
  private let catalog: Catalog
  /// The bundle's entry to put in the root tree when the bundle was not scanned.
  private let bundleEntry: TreeEntry?
  private let sink: TreeSink
  /// Trees this run stored (the catalog has the others).
  private var created: Set<Digest> = []
  /// The root tree, once the home is finished.
  private(set) var root: Digest?
  private(set) var files = 0
  private(set) var bytes: Int64 = 0
  private(set) var newTrees = 0

  init(catalog: Catalog, bundleEntry: TreeEntry?, sink: TreeSink) {
    self.catalog = catalog
    self.bundleEntry = bundleEntry
    self.sink = sink
  }

  /// The run failed: drop what is held.
  func abandon() { created.removeAll() }

  /// Builds the tree of `directory`, whose subdirectories are all finished, and gives its
  /// entry (with the tree's digest) to its parent.
  func finish(_ directory: ScannedDirectory) throws {
    defer {
      // Nothing of it is needed any more (its parent has its entry).
      directory.results = [:]
      directory.subdirectoryEntries = [:]
      directory.previousData = []
      directory.entries = []
      directory.names = []
    }
    let isRoot = directory.depth == 0
    // Excluded, or gone before it could be listed: no tree (its parent leaves it out).
    guard isRoot || !(directory.isExcluded || directory.status == nil) else {
      try giveEntry(of: directory, digest: nil)
      return
    }
    let counts = !directory.isInBundle
    var body = ByteWriter()
    var count = 0
    var reusedAll = directory.previousDigest != nil && directory.previousEntryCount == directory.entries.count
    var rootEntries: [TreeEntry] = []  // the root is assembled from values, to insert the bundle
    var sparse = false  // an entry has a sparse identity: the tree is version 2
    try directory.previousData.withUnsafeBytes { old in
      for (position, scanned) in directory.entries.enumerated() {
        let isCounted = counts && scanned.type != .directory
        if scanned.isReused, let previous = scanned.previous {
          if isCounted && !previous.isExcluded {
            files += 1
            if previous.type == .file { bytes += previous.size }
          }
          count += 1
          sparse = sparse || previous.hasSparseIdentity
          if isRoot {
            rootEntries.append(
              try Tree.materialize(try TreeCursor.entry(at: previous.range, in: old), in: old))
          } else {
            body.bytes.append(contentsOf: old[previous.range])
          }
          continue
        }
        guard let entry = freshEntry(directory, Int32(position), scanned) else {
          reusedAll = false
          continue
        }
        if isCounted && !entry.isExcluded {
          files += 1
          if entry.type == .file { bytes += entry.size }
        }
        count += 1
        sparse = sparse || entry.hasSparseIdentity
        if isRoot {
          rootEntries.append(entry)
          reusedAll = false
          continue
        }
        let start = body.bytes.count
        Tree.encode(entry, into: &body)
        if reusedAll {
          let fresh = body.bytes[start...]
          reusedAll = scanned.previous.map { fresh.elementsEqual(old[$0.range]) } ?? false
        }
      }
    }
    if reusedAll, let previous = directory.previousDigest {
      try giveEntry(of: directory, digest: previous)
      return
    }
    let data: [UInt8]
    if isRoot {
      data = Tree(entries: withBundle(rootEntries)).encoded()
    } else {
      var out = ByteWriter()
      out.bytes.reserveCapacity(body.bytes.count + 10)
      Tree.encodeHeader(count: count, sparse: sparse, into: &out)
      out.bytes.append(contentsOf: body.bytes)
      data = out.bytes
    }
    let digest = SHA256.hash(data)
    if digest != directory.previousDigest, !created.contains(digest), !(try catalog.hasTree(digest)) {
      created.insert(digest)
      var base: (digest: Digest, data: [UInt8], depth: Int)?
      if let previous = directory.previousDigest, !directory.previousData.isEmpty,
        let depth = try catalog.treeDepth(previous)
      {
        base = (previous, directory.previousData, depth)
      }
      try sink.add(StoredTree.choosing(digest: digest, data: data, base: base))
      newTrees += 1
    }
    try giveEntry(of: directory, digest: digest)
  }

  /// Hands the finished directory's entry to its parent (the root's digest is the snapshot's).
  private func giveEntry(of directory: ScannedDirectory, digest: Digest?) throws {
    if directory.depth == 0 {
      root = digest
      return
    }
    guard let parent = directory.parent else {
      throw BackupError(.corruptCatalog, "The directory '\(display(directory.name))' outlived its parent")
    }
    guard let status = directory.status else { return }  // gone: left out
    var entry = TreeEntry(name: directory.name, status: status, type: .directory)
    entry.extendedAttributes = directory.attributes
    entry.isExcluded = directory.isExcluded
    entry.digest = directory.isExcluded ? nil : digest
    parent.subdirectoryEntries[directory.position] = entry
  }

  /// The entry for something change detection could not reuse; nil when it is left out.
  private func freshEntry(_ directory: ScannedDirectory, _ position: Int32, _ scanned: ScannedEntry)
    -> TreeEntry?
  {
    switch scanned.type {
    case .directory:
      return directory.subdirectoryEntries[position]
    case .file:
      guard let result = directory.results[position], !result.vanished else { return nil }
      var entry = TreeEntry(name: directory.name(of: scanned), status: result.status, type: .file)
      entry.extendedAttributes = result.attributes
      entry.isExcluded = result.isExcluded
      entry.digest = result.isExcluded ? nil : result.digest
      entry.hasSparseIdentity = !result.isExcluded && result.isSparseIdentity
      return entry
    case .symlink:
      var entry = TreeEntry(name: directory.name(of: scanned), status: scanned.status, type: .symlink)
      entry.linkTarget = scanned.linkTarget ?? []
      return entry
    case .fifo, .socket:
      return TreeEntry(name: directory.name(of: scanned), status: scanned.status, type: scanned.type)
    }
  }

  /// The root's entries with the bundle's, when it was not scanned, in name order.
  private func withBundle(_ entries: [TreeEntry]) -> [TreeEntry] {
    guard let bundleEntry else { return entries }
    var result = entries.filter { $0.name != bundleEntry.name }
    let position = result.firstIndex { !$0.name.lexicographicallyPrecedes(bundleEntry.name) } ?? result.count
    result.insert(bundleEntry, at: position)
    return result
  }
}
