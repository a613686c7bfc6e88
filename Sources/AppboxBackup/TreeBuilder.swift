// Stage 4a of a backup: compute the snapshot's trees bottom-up.
//
// Algorithm: directories are visited in reverse scan order, which puts every child before
// its parent (a child is numbered when its parent is listed). A tree is its header followed
// by its entries' encodings, so each directory's new serialization is assembled from the
// previous tree's bytes for every entry change detection reused (copied, not decoded), and
// fresh encodings for the rest: symlinks and FIFOs the scanner saw, subdirectories with
// their just-computed digests, files the archiver read. A directory whose every entry came
// out byte for byte as before, with the same count, keeps the previous digest without
// hashing anything: a no-change backup hashes no trees. Otherwise the tree is hashed; it is
// new when neither the catalog nor this run has it.
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

struct TreeBuildResult {
  var root: Digest
  /// Trees the catalog does not have yet, children before parents, as they will be stored.
  var newTrees: [StoredTree]
  var files: Int
  var bytes: Int64
}

struct TreeBuilder {
  let plan: ArchivePlan
  let results: [FileResult?]
  let catalog: Catalog
  /// The bundle's entry to put in the root tree when the bundle was not scanned.
  let bundleEntry: TreeEntry?

  func build() throws -> TreeBuildResult {
    let directories = plan.directories
    var digests = [Digest?](repeating: nil, count: directories.count)
    var newTrees: [StoredTree] = []
    var created: Set<Digest> = []
    var files = 0
    var bytes: Int64 = 0
    for index in stride(from: directories.count - 1, through: 0, by: -1) {
      let directory = directories[index]
      // Excluded, or gone before it could be listed: no tree (its parent leaves it out).
      if directory.isExcluded || directory.status == nil && index != 0 { continue }
      let counts = !directory.isInBundle
      var body = ByteWriter()
      var count = 0
      var reusedAll =
        directory.previousDigest != nil && directory.previousEntryCount == directory.entries.count
      var rootEntries: [TreeEntry] = []  // the root is assembled from values, to insert the bundle
      try directory.previousData.withUnsafeBytes { old in
        for (position, scanned) in directory.entries.enumerated() {
          let isCounted = counts && scanned.type != .directory
          if scanned.isReused, let previous = scanned.previous {
            if isCounted && !previous.isExcluded {
              files += 1
              if previous.type == .file { bytes += previous.size }
            }
            count += 1
            if index == 0 {
              rootEntries.append(
                try Tree.materialize(try TreeCursor.entry(at: previous.range, in: old), in: old))
            } else {
              body.bytes.append(contentsOf: old[previous.range])
            }
            continue
          }
          guard let entry = try freshEntry(index, position, scanned, digests: digests) else {
            reusedAll = false
            continue
          }
          if isCounted && !entry.isExcluded {
            files += 1
            if entry.type == .file { bytes += entry.size }
          }
          count += 1
          if index == 0 {
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
        digests[index] = previous
        continue
      }
      let data: [UInt8]
      if index == 0 {
        data = Tree(entries: withBundle(rootEntries)).encoded()
      } else {
        var out = ByteWriter()
        out.bytes.reserveCapacity(body.bytes.count + 10)
        Tree.encodeHeader(count: count, into: &out)
        out.bytes.append(contentsOf: body.bytes)
        data = out.bytes
      }
      let digest = SHA256.hash(data)
      digests[index] = digest
      if digest != directory.previousDigest, !created.contains(digest), !(try catalog.hasTree(digest)) {
        created.insert(digest)
        var base: (digest: Digest, data: [UInt8], depth: Int)?
        if let previous = directory.previousDigest, !directory.previousData.isEmpty,
          let depth = try catalog.treeDepth(previous)
        {
          base = (previous, directory.previousData, depth)
        }
        newTrees.append(StoredTree.choosing(digest: digest, data: data, base: base))
      }
    }
    guard let root = digests[0] else { throw BackupError(.corruptCatalog, "The home itself was not scanned") }
    return TreeBuildResult(root: root, newTrees: newTrees, files: files, bytes: bytes)
  }

  /// The entry for something change detection could not reuse; nil when it is left out.
  private func freshEntry(_ index: Int, _ position: Int, _ scanned: ScannedEntry, digests: [Digest?]) throws
    -> TreeEntry?
  {
    let name = plan.directories[index].name(of: scanned)
    switch scanned.type {
    case .directory:
      guard let child = scanned.child, let status = plan.directories[child].status else { return nil }
      var entry = TreeEntry(name: name, status: status, type: .directory)
      entry.extendedAttributes = plan.directories[child].attributes
      entry.isExcluded = plan.directories[child].isExcluded
      entry.digest = entry.isExcluded ? nil : digests[child]
      return entry
    case .file:
      guard let item = plan.fileItems[index << 32 | position], let result = results[item], !result.vanished
      else { return nil }
      var entry = TreeEntry(name: name, status: result.status, type: .file)
      entry.extendedAttributes = result.attributes
      entry.isExcluded = result.isExcluded
      entry.digest = result.isExcluded ? nil : result.digest
      return entry
    case .symlink:
      var entry = TreeEntry(name: name, status: scanned.status, type: .symlink)
      entry.linkTarget = scanned.linkTarget ?? []
      return entry
    case .fifo, .socket:
      return TreeEntry(name: name, status: scanned.status, type: scanned.type)
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
