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

import AppboxContainer
import AppboxCore
import AppboxCrypto

/// One thing to create, relative to the target directory, with the metadata to give it.
/// Compact on purpose: a restore plans one per file.
struct RestoreItem {
  var path: [UInt8]
  /// The index in `RestorePlan.directories` of the directory holding it (-1: the target).
  var parent: Int32 = -1
  /// Where its name starts in `path`.
  var nameStart: Int32 = 0
  /// Whether it belongs to the app's data (below Documents, Library or tmp), which a restore
  /// as root gives to the app's own uid.
  var isData = false
  var permissions: UInt32
  var modificationTime: Int64
  var attributes: [ExtendedAttribute]
  var linkTarget: [UInt8]?
  /// The class the archive recorded (its protection record is not an attribute to set).
  var protectionClass: ProtectionClass

  var name: [UInt8] { Array(path[Int(nameStart)...]) }

  init(path: [UInt8], entry: TreeEntry) {
    self.path = path
    permissions = entry.permissions
    modificationTime = entry.modificationTime
    (attributes, protectionClass) = splitProtectionRecord(entry.extendedAttributes)
    linkTarget = entry.linkTarget
  }
}

struct RestorePlan {
  /// Parents before children.
  var directories: [RestoreItem] = []
  /// Regular files that receive content (the first path of each inode).
  var files: [RestoreItem] = []
  /// Sizes of `files`.
  var sizes: [Int64] = []
  /// Later paths of an inode: (item, index in `files` of the path they link to).
  var hardLinks: [(item: RestoreItem, primary: Int)] = []
  var symlinks: [RestoreItem] = []
  var fifos: [RestoreItem] = []
  /// For each non-empty content, the first file (index into `files`) that has it; the others
  /// follow through `nextWithSameContent` (-1 ends the chain).
  var firstWithContent: [Digest: Int32] = [:]
  var nextWithSameContent: [Int32] = []
  var totalBytes: Int64 = 0
  var warnings: [String] = []

  /// The files (indexes into `files`) whose content is `digest`.
  func files(withContent digest: Digest) -> [Int] {
    var result: [Int] = []
    var next = firstWithContent[digest] ?? -1
    while next >= 0 {
      result.append(Int(next))
      next = nextWithSameContent[Int(next)]
    }
    return result
  }

  /// Plans the subtree `root`. At the top, entries named in `skippingTopLevel` are left out;
  /// entries at or below the top-level names `dataTopLevel` are marked as the app's data.
  init(
    catalog: Catalog, root: Digest, skippingTopLevel: Set<[UInt8]> = [], dataTopLevel: [String] = []
  ) throws {
    var inodes: [UInt64: Int] = [:]
    var lastWithContent: [Digest: Int32] = [:]
    let data = Set(dataTopLevel.map { Array($0.utf8) })
    var stack: [(digest: Digest, path: [UInt8], index: Int32, isData: Bool)] = [(root, [], -1, false)]
    while let (digest, path, index, isData) = stack.popLast() {
      let tree = try catalog.tree(digest)
      var subdirectories: [(digest: Digest, path: [UInt8], index: Int32, isData: Bool)] = []
      for entry in tree.entries where !entry.isExcluded {
        if path.isEmpty && skippingTopLevel.contains(entry.name) { continue }
        var item = RestoreItem(path: joinPath(path, entry.name), entry: entry)
        item.parent = index
        item.nameStart = Int32(item.path.count - entry.name.count)
        item.isData = isData || (path.isEmpty && data.contains(entry.name))
        switch entry.type {
        case .directory:
          guard let child = entry.digest else { continue }
          subdirectories.append((child, item.path, Int32(directories.count), item.isData))
          directories.append(item)
        case .file:
          if entry.linkCount > 1, let primary = inodes[entry.inode] {
            hardLinks.append((item, primary))
            continue
          }
          let index = Int32(files.count)
          if entry.linkCount > 1 { inodes[entry.inode] = files.count }
          nextWithSameContent.append(-1)
          if entry.size > 0, let content = entry.digest {
            if let last = lastWithContent[content] {
              nextWithSameContent[Int(last)] = index
            } else {
              firstWithContent[content] = index
            }
            lastWithContent[content] = index
          }
          files.append(item)
          sizes.append(entry.size)
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
