// Stage 4a of a backup: compute the snapshot's trees bottom-up.
//
// Algorithm: directories are visited in reverse scan order, which puts every child before
// its parent (a child is numbered when its parent is listed). Each directory's entries are
// assembled from what change detection reused, what the scanner saw (symlinks, FIFOs,
// subdirectories with their just-computed digests) and what the archiver read (changed
// files). A directory whose every entry is the previous snapshot's, with the same count, has
// the previous digest without serializing anything: a no-change backup hashes no trees.
// Otherwise the tree is serialized and hashed; it is new when neither the catalog nor this
// run has it.
//
// Invariants: an excluded directory contributes an entry without a digest and no tree; a
// file that vanished before it was read is left out; counts (files, bytes) cover the data
// only: not the bundle, not excluded items.

import AppboxCore
import AppboxCrypto

struct TreeBuildResult {
  var root: Digest
  /// Trees the catalog does not have yet, children before parents.
  var newTrees: [(digest: Digest, data: [UInt8])]
  var files: Int
  var bytes: Int64
}

struct TreeBuilder {
  let plan: ArchivePlan
  let results: [Int: FileResult]
  let catalog: Catalog
  /// The bundle's entry to put in the root tree when the bundle was not scanned.
  let bundleEntry: TreeEntry?
  let bundleDirectoryName: [UInt8]

  func build() throws -> TreeBuildResult {
    let directories = plan.directories
    var digests = [Digest?](repeating: nil, count: directories.count)
    var newTrees: [(digest: Digest, data: [UInt8])] = []
    var created: Set<Digest> = []
    var files = 0
    var bytes: Int64 = 0
    for index in stride(from: directories.count - 1, through: 0, by: -1) {
      let directory = directories[index]
      if directory.isExcluded { continue }
      let counts = !isBundle(directory.path)
      var entries: [TreeEntry] = []
      entries.reserveCapacity(directory.entries.count + 1)
      var reusedAll = directory.previousDigest != nil && directory.previousEntryCount == directory.entries.count
      for (position, scanned) in directory.entries.enumerated() {
        var entry: TreeEntry
        if let reused = scanned.reused {
          entry = reused
        } else {
          switch scanned.type {
          case .directory:
            guard let child = scanned.child, let status = directories[child].status else { continue }
            entry = TreeEntry(name: scanned.name, status: status, type: .directory)
            entry.extendedAttributes = directories[child].attributes
            entry.isExcluded = directories[child].isExcluded
            entry.digest = entry.isExcluded ? nil : digests[child]
            if entry != scanned.previous { reusedAll = false }
          case .file:
            reusedAll = false
            guard let item = plan.fileItems[index << 32 | position], let result = results[item], !result.vanished
            else { continue }
            entry = TreeEntry(name: scanned.name, status: result.status, type: .file)
            entry.extendedAttributes = result.attributes
            entry.isExcluded = result.isExcluded
            entry.digest = result.isExcluded ? nil : result.digest
          case .symlink:
            reusedAll = false
            entry = TreeEntry(name: scanned.name, status: scanned.status, type: .symlink)
            entry.linkTarget = scanned.linkTarget ?? []
          case .fifo, .socket:
            reusedAll = false
            entry = TreeEntry(name: scanned.name, status: scanned.status, type: scanned.type)
          }
        }
        if counts && entry.type != .directory && !entry.isExcluded {
          files += 1
          if entry.type == .file { bytes += entry.size }
        }
        entries.append(entry)
      }
      if index == 0, let bundleEntry {
        reusedAll = false
        let insertAt = entries.firstIndex { !$0.name.lexicographicallyPrecedes(bundleEntry.name) } ?? entries.count
        if insertAt < entries.count && entries[insertAt].name == bundleEntry.name {
          entries[insertAt] = bundleEntry
        } else {
          entries.insert(bundleEntry, at: insertAt)
        }
      }
      if reusedAll, let previous = directory.previousDigest {
        digests[index] = previous
        continue
      }
      let (data, digest) = Tree(entries: entries).encodedWithDigest()
      digests[index] = digest
      if digest != directory.previousDigest, !created.contains(digest), !(try catalog.hasTree(digest)) {
        created.insert(digest)
        newTrees.append((digest, data))
      }
    }
    guard let root = digests[0] else { throw BackupError(.corruptCatalog, "The home itself was not scanned") }
    return TreeBuildResult(root: root, newTrees: newTrees, files: files, bytes: bytes)
  }

  private func isBundle(_ path: [UInt8]) -> Bool {
    guard path.count >= bundleDirectoryName.count, path.starts(with: bundleDirectoryName) else { return false }
    return path.count == bundleDirectoryName.count || path[bundleDirectoryName.count] == UInt8(ascii: "/")
  }
}
