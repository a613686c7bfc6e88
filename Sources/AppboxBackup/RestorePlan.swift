// Restore, step 1: turn a snapshot's trees into a list of things to create.
//
// Algorithm: walk the trees from a root digest (the whole data of a snapshot minus its
// bundle entry, or only the bundle's subtree), depth first in name order. Directories come
// out parents first; regular files are grouped by inode (entries recorded with a link count
// above one and the same inode were hard links to each other in the home) so that the first
// path of each group receives the content and the others become links to it; content is
// indexed by digest so one archive member can feed every file that has those bytes.
//
// Invariants: tree names were validated on decoding (no `/`, `.`, `..` or NUL), so every
// joined path stays beneath the target; excluded entries and sockets are left out (sockets
// cannot be recreated; a warning says so).

import AppboxCore
import AppboxCrypto

/// One thing to create, relative to the target directory.
struct RestoreItem {
  var path: [UInt8]
  var entry: TreeEntry
}

struct RestorePlan {
  /// Parents before children.
  var directories: [RestoreItem] = []
  /// Regular files that receive content (the first path of each inode).
  var files: [RestoreItem] = []
  /// Later paths of an inode: (item, index in `files` of the path they link to).
  var hardLinks: [(item: RestoreItem, primary: Int)] = []
  var symlinks: [RestoreItem] = []
  var fifos: [RestoreItem] = []
  /// Files (indexes into `files`) by content digest, for non-empty files.
  var filesByDigest: [Digest: [Int]] = [:]
  var totalBytes: Int64 = 0
  var warnings: [String] = []

  /// Plans the subtree `root`. At the top, entries named in `skippingTopLevel` are left out.
  init(catalog: Catalog, root: Digest, skippingTopLevel: Set<[UInt8]> = []) throws {
    var inodes: [UInt64: Int] = [:]
    var stack: [(digest: Digest, path: [UInt8])] = [(root, [])]
    while let (digest, path) = stack.popLast() {
      let tree = try catalog.tree(digest)
      var subdirectories: [(digest: Digest, path: [UInt8])] = []
      for entry in tree.entries where !entry.isExcluded {
        if path.isEmpty && skippingTopLevel.contains(entry.name) { continue }
        let item = RestoreItem(path: joinPath(path, entry.name), entry: entry)
        switch entry.type {
        case .directory:
          guard let child = entry.digest else { continue }
          directories.append(item)
          subdirectories.append((child, item.path))
        case .file:
          if entry.linkCount > 1, let primary = inodes[entry.inode] {
            hardLinks.append((item, primary))
            continue
          }
          if entry.linkCount > 1 { inodes[entry.inode] = files.count }
          if entry.size > 0, let content = entry.digest {
            filesByDigest[content, default: []].append(files.count)
          }
          files.append(item)
          totalBytes += entry.size
        case .symlink:
          symlinks.append(item)
        case .fifo:
          fifos.append(item)
        case .socket:
          warnings.append("'\(display(item.path))' was a socket, which cannot be restored")
        }
      }
      stack.append(contentsOf: subdirectories.reversed())
    }
  }
}
