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
  /// The name: bytes `nameStart ..< nameStart + nameLength` of the plan's `directoryNames`
  /// (a directory) or `names` (anything else).
  var nameStart: Int32 = 0
  var nameLength: Int32 = 0
  /// The index in `RestorePlan.directories` of the directory holding it (-1: the target).
  var parent: Int32 = -1
  var permissions: UInt32
  var modificationTime: Int64
  /// What few entries have (attributes, a link target), kept aside: 40 bytes an item.
  private var extra: Extra?
  /// The class the archive recorded (its protection record is not an attribute to set).
  var protectionClass: ProtectionClass
  /// Whether it belongs to the app's data (below Documents, Library or tmp), which a restore
  /// as root gives to the app's own uid.
  var isData = false
  /// Whether it is one of the plan's directories (its name is in `directoryNames`).
  var isDirectory = false

  private final class Extra: Sendable {
    let attributes: [ExtendedAttribute]
    let linkTarget: [UInt8]?
    init(attributes: [ExtendedAttribute], linkTarget: [UInt8]?) {
      self.attributes = attributes
      self.linkTarget = linkTarget
    }
  }

  var attributes: [ExtendedAttribute] { extra?.attributes ?? [] }
  var linkTarget: [UInt8]? { extra?.linkTarget }

  /// An item without attributes or link target (the common case, read in place).
  init(permissions: UInt32, modificationTime: Int64) {
    self.permissions = permissions
    self.modificationTime = modificationTime
    protectionClass = .none
  }

  init(entry: TreeEntry) {
    permissions = entry.permissions
    modificationTime = entry.modificationTime
    let (attributes, protectionClass) = splitProtectionRecord(entry.extendedAttributes)
    self.protectionClass = protectionClass
    if !attributes.isEmpty || entry.linkTarget != nil {
      extra = Extra(attributes: attributes, linkTarget: entry.linkTarget)
    }
  }
}

/// The file a hard link points to: written in this batch or an earlier one, so it is known by
/// its directory and name (the names of earlier batches' files are gone).
struct LinkPrimary {
  var parent: Int32
  var name: [UInt8]
}

/// One batch of a restore (RestorePlanner): the directories found so far, and the files,
/// links and other entries of this batch, with what is needed to give them their content.
struct RestorePlan {
  /// Every directory's name, one after another (shared by the batches of a restore).
  var directoryNames: [UInt8] = []
  /// Parents before children (depth-first, in name order): every directory found so far.
  var directories: [RestoreItem] = []
  /// By directory: how many levels below the target it is (1: a top-level directory).
  var depths: [Int32] = []
  /// The directories found while planning this batch (created before its files).
  var newDirectories: Range<Int> = 0..<0
  /// The names of this batch's files, links, symlinks and FIFOs, one after another.
  var names: [UInt8] = []
  /// Regular files that receive content (the first path of each inode).
  var files: [RestoreItem] = []
  /// Sizes of `files`.
  var sizes: [Int64] = []
  /// Later paths of an inode: (item, the first path of that inode, which receives content).
  var hardLinks: [(item: RestoreItem, primary: LinkPrimary)] = []
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
  fileprivate var chains: [Digest: (first: Int32, last: Int32)] = [:]
  /// How many distinct non-empty contents the plan has.
  var contentCount: Int { chains.count }
  /// The contents whose digest is the sparse content identity (ContentIdentity.swift).
  fileprivate(set) var sparseContents: Set<Digest> = []
  func hasSparseIdentity(_ digest: Digest) -> Bool {
    !sparseContents.isEmpty && sparseContents.contains(digest)
  }
  var nextWithSameContent: [Int32] = []
  /// The bytes of this batch's files.
  var totalBytes: Int64 = 0
  var warnings: [String] = []

  /// How many entries this batch creates (files, links, symlinks, FIFOs; not directories).
  var entryCount: Int { files.count + hardLinks.count + symlinks.count + fifos.count }

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
    let range = Int(item.nameStart)..<(Int(item.nameStart) + Int(item.nameLength))
    return Array(item.isDirectory ? directoryNames[range] : names[range])
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

  /// The whole of subtree `root` as one plan (see RestorePlanner for the arguments): for
  /// callers that restore little (a bundle) and tests.
  init(
    catalog: Catalog, root: Digest, skippingTopLevel: Set<[UInt8]> = [], dataTopLevel: [String] = [],
    overlay: [Digest: [UInt8]] = [:]
  ) throws {
    let planner = RestorePlanner(
      catalog: catalog, root: root, skippingTopLevel: skippingTopLevel, dataTopLevel: dataTopLevel,
      overlay: overlay, batchFiles: Int.max)
    self = try planner.next() ?? RestorePlan()
  }

  init() {}
}

/// Plans the restore of subtree `root` in batches, so that what a restore holds follows the
/// batch size and the directories, not the file count: a batch is the next directories of a
/// depth-first walk in name order whose files add up to at least `batchFiles` (a directory
/// is never split: one with more files makes a larger batch). Directories are kept from batch
/// to batch (every batch may put files into one found earlier, and their metadata is applied
/// at the very end); so are the first paths of inodes with more than one link, which later
/// paths become hard links to. At the top, entries named in `skippingTopLevel` are left out;
/// entries at or below the top-level names `dataTopLevel` are marked as the app's data. Trees
/// in `overlay` are read from it before the catalog (a partial restore's pruned trees).
final class RestorePlanner {
  /// Files per batch: about 30 MB of plan (names, items, content chains and locations).
  static let defaultBatchFiles = 1 << 17

  private let catalog: Catalog
  private let overlay: [Digest: [UInt8]]
  private let skippingTopLevel: Set<[UInt8]>
  private let data: Set<[UInt8]>
  private let batchFiles: Int
  /// The trees still to read: (digest, index of their directory, whether they are app data).
  private var stack: [(digest: Digest, index: Int32, isData: Bool)]
  /// Directories found so far (their names, items and depths).
  private var directoryNames: [UInt8] = []
  private var directories: [RestoreItem] = []
  private var depths: [Int32] = []
  /// The first path of each inode with more than one link, by inode.
  private var primaries: [UInt64: LinkPrimary] = [:]
  private(set) var batches = 0
  /// Whether a batch is still to come (the walk has trees left to read).
  var hasMore: Bool { !stack.isEmpty }
  /// How many directories the batches so far hold.
  var directoryCount: Int { directories.count }

  init(
    catalog: Catalog, root: Digest, skippingTopLevel: Set<[UInt8]> = [], dataTopLevel: [String] = [],
    overlay: [Digest: [UInt8]] = [:], batchFiles: Int = RestorePlanner.defaultBatchFiles
  ) {
    self.catalog = catalog
    self.overlay = overlay
    self.skippingTopLevel = skippingTopLevel
    data = Set(dataTopLevel.map { Array($0.utf8) })
    self.batchFiles = max(1, batchFiles)
    stack = [(root, -1, false)]
  }

  /// The next batch, or nil when the walk is done (the first call always gives one, empty
  /// for an empty subtree).
  func next() throws -> RestorePlan? {
    guard !stack.isEmpty || batches == 0 else { return nil }
    batches += 1
    var plan = RestorePlan()
    let firstNew = directories.count
    // The directories move into the plan while it is built and back afterwards, so that
    // appending to them never copies them.
    swap(&plan.directoryNames, &directoryNames)
    swap(&plan.directories, &directories)
    swap(&plan.depths, &depths)
    defer {
      directoryNames = plan.directoryNames
      directories = plan.directories
      depths = plan.depths
    }
    if batchFiles < Int.max {
      // A batch fills up to its size and a directory more: no doubling of the tables on the way.
      plan.files.reserveCapacity(batchFiles)
      plan.sizes.reserveCapacity(batchFiles)
      plan.nextWithSameContent.reserveCapacity(batchFiles)
      plan.chains.reserveCapacity(batchFiles)
    }
    while plan.entryCount < batchFiles, let (digest, index, isData) = stack.popLast() {
      try read(digest, index: index, isData: isData, into: &plan)
    }
    plan.newDirectories = firstNew..<plan.directories.count
    return plan
  }

  /// Adds the entries of tree `digest` (directory `index` of the plan) to `plan`, and its
  /// subdirectories to the walk.
  private func read(_ digest: Digest, index: Int32, isData: Bool, into plan: inout RestorePlan) throws {
    guard let treeData = try overlay[digest] ?? catalog.treeData(digest) else {
      throw BackupError(.corruptCatalog, "Catalog is missing tree \(digest.hex.prefix(16))")
    }
    let isTop = index < 0
    let depth = isTop ? 1 : plan.depths[Int(index)] + 1
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
        item.nameLength = Int32(name.count)
        item.parent = index
        item.isData = isData || (isTop && data.contains(Array(name)))
        if encoded.type == .directory {
          guard let child = encoded.digest(in: buffer) else { continue }
          item.isDirectory = true
          item.nameStart = Int32(plan.directoryNames.count)
          plan.directoryNames.append(contentsOf: name)
          subdirectories.append((child, Int32(plan.directories.count), item.isData))
          plan.directories.append(item)
          plan.depths.append(depth)
          continue
        }
        item.nameStart = Int32(plan.names.count)
        plan.names.append(contentsOf: name)
        switch encoded.type {
        case .directory:
          break
        case .file:
          if encoded.linkCount > 1 {
            if let primary = primaries[encoded.inode] {
              plan.hardLinks.append((item, primary))
              continue
            }
            primaries[encoded.inode] = LinkPrimary(parent: index, name: Array(name))
          }
          let fileIndex = Int32(plan.files.count)
          plan.nextWithSameContent.append(-1)
          if encoded.size > 0, let content = encoded.digest(in: buffer) {
            // One lookup: the chain is created or extended in place.
            var previousLast: Int32 = -1
            modify(&plan.chains[content, default: (fileIndex, -1)]) {
              previousLast = $0.last
              $0.last = fileIndex
            }
            if previousLast >= 0 { plan.nextWithSameContent[Int(previousLast)] = fileIndex }
            if encoded.hasSparseIdentity { plan.sparseContents.insert(content) }
          }
          plan.files.append(item)
          plan.sizes.append(encoded.size)
          plan.totalBytes += encoded.size
        case .symlink:
          plan.symlinks.append(item)
        case .fifo:
          plan.fifos.append(item)
        case .socket:
          plan.warnings.append("'\(display(plan.path(of: item)))' was a socket, which cannot be restored")
        }
      }
    }
    stack.append(contentsOf: subdirectories.reversed())
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
