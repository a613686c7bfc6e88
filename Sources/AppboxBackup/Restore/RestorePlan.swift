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
import AppboxRepository

/// One thing to create, relative to the target directory, with the metadata to give it.
/// Compact on purpose: a restore plans one per file, and holds no path (a path is as long as
/// the depth, so paths would cost O(depth²) for a deep chain): only a name and a parent.
struct RestoreItem {
  /// The name: bytes `nameStart ..< nameStart + nameLength` of the plan's `names`.
  var nameStart = 0
  var nameLength: Int32 = 0
  /// The index in `RestorePlan.directories` of the directory holding it (-1: the target).
  var parent: Int32 = -1
  /// Whether it belongs to the app's data (below Documents, Library or tmp), which a restore
  /// as root gives to the app's own uid.
  var isData = false
  var permissions: UInt32
  var modificationTime: Int64
  var attributes: [ExtendedAttribute]
  var linkTarget: [UInt8]?
  /// The class the archive recorded (its protection record is not an attribute to set).
  var protectionClass: ProtectionClass

  /// An item without attributes or link target (the common case, read in place).
  init(permissions: UInt32, modificationTime: Int64) {
    self.permissions = permissions
    self.modificationTime = modificationTime
    attributes = []
    linkTarget = nil
    protectionClass = .none
  }

  init(entry: TreeEntry) {
    permissions = entry.permissions
    modificationTime = entry.modificationTime
    (attributes, protectionClass) = splitProtectionRecord(entry.extendedAttributes)
    linkTarget = entry.linkTarget
  }
}

struct RestorePlan {
  /// Every item's name, one after another.
  var names: [UInt8] = []
  /// Parents before children (depth-first, in name order).
  var directories: [RestoreItem] = []
  /// By directory: how many levels below the target it is (1: a top-level directory).
  var depths: [Int32] = []
  /// Regular files that receive content (the first path of each inode).
  var files: [RestoreItem] = []
  /// Sizes of `files`.
  var sizes: [Int64] = []
  /// Later paths of an inode: (item, index in `files` of the path they link to).
  var hardLinks: [(item: RestoreItem, primary: Int)] = []
  var symlinks: [RestoreItem] = []
  var fifos: [RestoreItem] = []
  /// For each non-empty content, the first file (index into `files`) that has it (in
  /// `chains`); the others follow through `nextWithSameContent` (-1 ends the chain).
  /// The first file with content `digest`, if any.
  func firstFile(withContent digest: Digest) -> Int32? { chains[digest]?.first }

  /// Each non-empty content and the first file with it, in no particular order.
  var contents: LazyMapSequence<[Digest: (first: Int32, last: Int32)], (digest: Digest, first: Int32)> {
    chains.lazy.map { (digest: $0.key, first: $0.value.first) }
  }

  /// Each non-empty content and the first file with it, in digest order.
  var contentsByDigest: [(digest: Digest, first: Int32)] {
    chains.map { ($0.key, $0.value.first) }.sorted { $0.digest < $1.digest }
  }
  /// For each non-empty content, its first and last file: one dictionary operation per file.
  private var chains: [Digest: (first: Int32, last: Int32)] = [:]
  /// How many distinct non-empty contents the plan has.
  var contentCount: Int { chains.count }
  /// The contents whose digest is the sparse content identity (ContentIdentity.swift).
  private(set) var sparseContents: Set<Digest> = []
  func hasSparseIdentity(_ digest: Digest) -> Bool {
    !sparseContents.isEmpty && sparseContents.contains(digest)
  }
  var nextWithSameContent: [Int32] = []
  var totalBytes: Int64 = 0
  var warnings: [String] = []

  /// The files (indexes into `files`) whose content is `digest`.
  func files(withContent digest: Digest) -> [Int] {
    var result: [Int] = []
    var next = chains[digest]?.first ?? -1
    while next >= 0 {
      result.append(Int(next))
      next = nextWithSameContent[Int(next)]
    }
    return result
  }

  /// The name of `item`.
  func name(of item: RestoreItem) -> [UInt8] {
    Array(names[item.nameStart..<(item.nameStart + Int(item.nameLength))])
  }

  /// The path of directory `index` from the target ("" for -1), built from its ancestors' names:
  /// for messages only.
  func path(ofDirectory index: Int32) -> [UInt8] {
    var parts: [[UInt8]] = []
    var current = index
    while current >= 0 {
      parts.append(name(of: directories[Int(current)]))
      current = directories[Int(current)].parent
    }
    return Array(parts.reversed().joined(separator: [UInt8(ascii: "/")]))
  }

  /// The path of `item` from the target, for messages.
  func path(of item: RestoreItem) -> [UInt8] { joinPath(path(ofDirectory: item.parent), name(of: item)) }

  /// Plans the subtree `root`. At the top, entries named in `skippingTopLevel` are left out;
  /// entries at or below the top-level names `dataTopLevel` are marked as the app's data.
  /// `expectedFiles` sizes the tables (the snapshot's file count, when known). Trees in
  /// `overlay` are read from it before the catalog (a partial restore's pruned trees).
  init(
    catalog: Catalog, root: Digest, skippingTopLevel: Set<[UInt8]> = [], dataTopLevel: [String] = [],
    expectedFiles: Int = 0, overlay: [Digest: [UInt8]] = [:]
  ) throws {
    chains.reserveCapacity(expectedFiles)
    files.reserveCapacity(expectedFiles)
    sizes.reserveCapacity(expectedFiles)
    nextWithSameContent.reserveCapacity(expectedFiles)
    var inodes: [UInt64: Int] = [:]
    let data = Set(dataTopLevel.map { Array($0.utf8) })
    var stack: [(digest: Digest, index: Int32, isData: Bool)] = [(root, -1, false)]
    while let (digest, index, isData) = stack.popLast() {
      guard let treeData = try overlay[digest] ?? catalog.treeData(digest) else {
        throw BackupError(.corruptCatalog, "Catalog is missing tree \(digest.hex.prefix(16))")
      }
      let isTop = index < 0
      let depth = isTop ? 1 : depths[Int(index)] + 1
      var subdirectories: [(digest: Digest, index: Int32, isData: Bool)] = []
      // Read in place: an entry is materialized only where it has attributes or a target.
      try treeData.withUnsafeBytes { buffer in
        var cursor = try TreeCursor(buffer)
        while let encoded = try cursor.next() {
          if encoded.isExcluded { continue }
          let name = buffer[encoded.nameRange]
          if isTop && skippingTopLevel.contains(Array(name)) { continue }
          var item: RestoreItem
          if encoded.tailRange.count > (encoded.hasDigest ? Digest.byteCount : 0) + 1 {
            item = RestoreItem(entry: try Tree.materialize(encoded, in: buffer))
          } else {
            item = RestoreItem(permissions: encoded.permissions, modificationTime: encoded.modificationTime)
          }
          item.nameStart = names.count
          item.nameLength = Int32(name.count)
          names.append(contentsOf: name)
          item.parent = index
          item.isData = isData || (isTop && data.contains(Array(name)))
          switch encoded.type {
          case .directory:
            guard let child = encoded.digest(in: buffer) else {
              names.removeLast(name.count)
              continue
            }
            subdirectories.append((child, Int32(directories.count), item.isData))
            directories.append(item)
            depths.append(depth)
          case .file:
            if encoded.linkCount > 1, let primary = inodes[encoded.inode] {
              hardLinks.append((item, primary))
              continue
            }
            let fileIndex = Int32(files.count)
            if encoded.linkCount > 1 { inodes[encoded.inode] = files.count }
            nextWithSameContent.append(-1)
            if encoded.size > 0, let content = encoded.digest(in: buffer) {
              // One lookup: the chain is created or extended in place.
              var previousLast: Int32 = -1
              modify(&chains[content, default: (fileIndex, -1)]) {
                previousLast = $0.last
                $0.last = fileIndex
              }
              if previousLast >= 0 { nextWithSameContent[Int(previousLast)] = fileIndex }
              if encoded.hasSparseIdentity { sparseContents.insert(content) }
            }
            files.append(item)
            sizes.append(encoded.size)
            totalBytes += encoded.size
          case .symlink:
            symlinks.append(item)
          case .fifo:
            fifos.append(item)
          case .socket:
            warnings.append("'\(display(path(of: item)))' was a socket, which cannot be restored")
          }
        }
      }
      stack.append(contentsOf: subdirectories.reversed())
    }
  }
}

/// Runs `body` on `value` in place (with a dictionary's `subscript(_:default:)`, one lookup).
@inline(__always)
func modify<T>(_ value: inout T, _ body: (inout T) -> Void) { body(&value) }

/// A position among a plan's directories, as a `DirectoryCursor` beneath the target: moving
/// to a directory costs its distance in the tree from the current one, so the depth-first
/// orders a restore works in cost O(entries) whatever the depth.
final class PlanCursor {
  private let cursor: DirectoryCursor
  /// The plan's directory at each level of the cursor.
  private var onPath: [Int32] = []

  init(target: FileDescriptor) { cursor = DirectoryCursor(base: target) }

  deinit { cursor.closeAll() }

  /// An open descriptor of directory `index` of `plan` (-1: the target); the cursor owns it,
  /// and it stays valid until the next move. `leaving` runs on each directory the move goes
  /// up from, as it leaves it.
  func directory(
    _ index: Int32, in plan: RestorePlan, leaving: ((Int32, FileDescriptor) throws -> Void)? = nil
  ) throws -> FileDescriptor {
    var chain: [Int32] = []
    var common = index
    while common >= 0 {
      let depth = Int(plan.depths[Int(common)])
      if depth <= onPath.count && onPath[depth - 1] == common { break }
      chain.append(common)
      common = plan.directories[Int(common)].parent
    }
    try ascend(toDepth: common < 0 ? 0 : Int(plan.depths[Int(common)]), leaving: leaving)
    for next in chain.reversed() {
      try cursor.descend(plan.name(of: plan.directories[Int(next)]))
      onPath.append(next)
    }
    return cursor.current
  }

  /// Goes up to `depth` levels below the target, running `leaving` on each directory left.
  func ascend(toDepth depth: Int, leaving: ((Int32, FileDescriptor) throws -> Void)? = nil) throws {
    while onPath.count > depth {
      let index = onPath.removeLast()
      try cursor.ascend { fd in try leaving?(index, fd) }
    }
  }

  func closeAll() {
    cursor.closeAll()
    onPath.removeAll()
  }
}
