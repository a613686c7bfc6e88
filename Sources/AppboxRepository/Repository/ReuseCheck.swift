// The check a long backup makes on a shared store before it commits (see Forgetter.swift for
// the protocol): every archive its new snapshot reuses something from (a content or a tree
// stored earlier) must still be committed and not marked for deletion.

import AppboxCore
import AppboxCrypto

/// A backup reused content from an archive a concurrent `forget` has since marked.
package struct ReusedContentMarked: Error, CustomStringConvertible {
  var archives: [String]
  package var description: String {
    "a forget marked \(archives.count) archive\(archives.count == 1 ? "" : "s") this backup reuses content from "
      + "(\(archives.prefix(3).joined(separator: ", "))); backing up again without them"
  }
}

extension Repository {
  package func checkReusedContent(of snapshot: Snapshot, manifest: some ManifestContent) throws {
    let marked = Set(try store.list("garbage").map(\.name))
    let committed = Set(try store.list("manifests").map(\.name))
    var newTrees: [Digest: StoredTree] = [:]
    try manifest.forEachTree { tree in if newTrees[tree.digest] == nil { newTrees[tree.digest] = tree } }
    var newBlobs: Set<Digest> = []
    try manifest.forEachBlob { newBlobs.insert($0.digest) }
    var referenced: Set<String> = []
    // A new tree may be a delta against a tree stored earlier: reading it needs that tree's
    // chain, and every archive along it.
    func treeBytes(_ digest: Digest, depth: Int = 0) throws -> [UInt8] {
      if let fresh = newTrees[digest] {
        guard let base = fresh.base else { return fresh.data }
        guard depth < 64 else {
          throw RepositoryError(
            .corruptCatalog, "Tree \(digest.hex.prefix(16)) has a delta chain that does not end")
        }
        return try TreeDelta.apply(fresh.data, to: treeBytes(base, depth: depth + 1))
      }
      let chain = try catalog.treeChain(digest)
      guard !chain.isEmpty, let stored = try catalog.treeData(digest) else {
        throw RepositoryError(.corruptCatalog, "Catalog is missing tree \(digest.hex.prefix(16))")
      }
      for link in chain { referenced.insert(link.archive) }
      return stored
    }
    var seen: Set<Digest> = []
    var stack = [snapshot.rootTree]
    while let digest = stack.popLast() {
      guard seen.insert(digest).inserted else { continue }
      let data = try treeBytes(digest)
      for entry in try Tree.decode(data).entries where !entry.isExcluded {
        if entry.type == .directory, let child = entry.digest { stack.append(child) }
        if entry.type == .file, entry.size > 0, let content = entry.digest, !newBlobs.contains(content),
          let location = try catalog.blob(content)
        {
          referenced.insert(location.archive)
        }
      }
    }
    let lost = referenced.filter { marked.contains($0) || !committed.contains($0) }.sorted()
    if !lost.isEmpty { throw ReusedContentMarked(archives: lost) }
  }
}
