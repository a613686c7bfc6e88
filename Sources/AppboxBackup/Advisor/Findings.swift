// `advise`, steps 3 and 4: what the latest snapshot holds, and the findings and rankings.
//
// The latest snapshot is walked once (Documents and Library only), tree by tree: sizes per
// directory; in Documents, the topmost folder (or else the file) whose name looks
// regenerable, and every entry marked exclude-from-backup (an excluded folder is recorded
// without its content, so its size is unknown); anywhere, files named like databases.
// A finding's estimate is what its path added over the measured backups divided by their
// number: what would not have been stored had it lived in Library/Caches.

import AppboxCrypto
import AppboxRepository

/// What the latest snapshot holds that findings need.
struct FindingCollector {
  let catalog: Catalog
  /// Files and bytes under each directory of Documents and Library, in the latest snapshot.
  var directoryTotals: [[UInt8]: (files: Int, bytes: Int64)] = [:]
  var regenerable: [(path: [UInt8], kind: RegenerableKind, isDirectory: Bool, size: Int64)] = []
  var databases: [[UInt8]] = []
  var excluded: [(path: [UInt8], isDirectory: Bool, size: Int64?)] = []

  init(catalog: Catalog) { self.catalog = catalog }

  /// One directory to walk, and where its totals go.
  private struct Visit {
    var digest: Digest
    var path: [UInt8]
    var inDocuments: Bool
    /// Inside a folder that is already a regenerable finding.
    var covered: Bool
    /// Inside a folder whose name makes media in it downloaded.
    var mediaSource: Bool
    /// The visit of the directory holding this one.
    var parent: Int?
  }

  /// Walks Documents and Library of `snapshot`, noting each changed file's size now in `files`.
  /// Depth first with a stack of its own (an app can nest folders thousands deep); each
  /// directory's totals are summed into its parents' at the end, children before parents.
  mutating func walk(_ snapshot: Snapshot, files: inout [[UInt8]: FileActivity]) throws {
    let root = try catalog.tree(snapshot.rootTree)
    var visits: [Visit] = []
    var pending: [Int] = []
    for top in ["Documents", "Library"] {
      guard let entry = root.entry(named: Array(top.utf8)), entry.type == .directory else { continue }
      let isDocuments = top == "Documents"
      guard let digest = entry.digest else {
        if isDocuments { excluded.append((entry.name, true, nil)) }
        continue
      }
      pending.append(visits.count)
      visits.append(
        Visit(digest: digest, path: entry.name, inDocuments: isDocuments, covered: false, mediaSource: false))
    }
    var totals: [(files: Int, bytes: Int64)] = []
    while let index = pending.popLast() {
      let (own, subdirectories) = try visit(visits[index], index: index, files: &files)
      while totals.count < visits.count { totals.append((0, 0)) }
      totals[index] = own
      pending.append(contentsOf: (visits.count..<(visits.count + subdirectories.count)).reversed())
      visits.append(contentsOf: subdirectories)
    }
    while totals.count < visits.count { totals.append((0, 0)) }
    for index in visits.indices.reversed() {
      if let parent = visits[index].parent {
        totals[parent].files += totals[index].files
        totals[parent].bytes += totals[index].bytes
      }
      directoryTotals[visits[index].path] = totals[index]
    }
  }

  /// Reads one directory: its own files and bytes (excluded entries not counted, as in
  /// snapshot totals), and its subdirectories to visit.
  private mutating func visit(_ directory: Visit, index: Int, files: inout [[UInt8]: FileActivity]) throws
    -> ((files: Int, bytes: Int64), [Visit])
  {
    guard let data = try catalog.treeData(directory.digest) else {
      throw BackupError(.corruptCatalog, "Catalog is missing tree \(directory.digest.hex.prefix(16))")
    }
    var subdirectories: [Visit] = []
    var count = 0
    var bytes: Int64 = 0
    try data.withUnsafeBytes { buffer in
      var cursor = try TreeCursor(buffer)
      while let entry = try cursor.next() {
        let name = buffer[entry.nameRange]
        let entryPath = joinPath(directory.path, Array(name))
        if entry.isExcluded {
          // Still there, only no longer backed up: its size now, not "gone".
          if entry.type == .file, files[entryPath] != nil { files[entryPath]!.sizeNow = entry.size }
          if directory.inDocuments {
            excluded.append(
              (entryPath, entry.type == .directory, entry.type == .directory ? nil : entry.size))
          }
          continue
        }
        if entry.type == .directory {
          guard let child = entry.digest(in: buffer) else { continue }
          var covered = directory.covered
          if directory.inDocuments && !covered, let kind = NameClassifier.regenerableKind(ofDirectory: name) {
            regenerable.append((entryPath, kind, true, 0))
            covered = true
          }
          subdirectories.append(
            Visit(
              digest: child, path: entryPath, inDocuments: directory.inDocuments, covered: covered,
              mediaSource: directory.mediaSource || NameClassifier.isMediaSource(name), parent: index))
          continue
        }
        count += 1
        guard entry.type == .file else { continue }
        bytes += entry.size
        if files[entryPath] != nil { files[entryPath]!.sizeNow = entry.size }
        if directory.inDocuments && !directory.covered,
          let kind = NameClassifier.regenerableKind(ofFile: name, inMediaSource: directory.mediaSource)
        {
          regenerable.append((entryPath, kind, false, entry.size))
        }
        if NameClassifier.isDatabase(name) { databases.append(entryPath) }
      }
    }
    return ((count, bytes), subdirectories)
  }
}

/// Turns the activity and the latest snapshot into rankings and findings.
struct Ranking {
  let app: String
  /// The measured snapshots, in order: backup index i is `measured[i]`.
  let measured: [Snapshot]
  let files: [[UInt8]: FileActivity]
  let directories: [[UInt8]: DirectoryActivity]
  let collector: FindingCollector
  let limit: Int

  var backups: Int { measured.count }

  func perBackup(_ bytes: Int64) -> Int64 { backups > 0 ? bytes / Int64(backups) : 0 }

  func activity(ofFile path: [UInt8], _ file: FileActivity) -> PathActivity {
    PathActivity(
      path: path, isDirectory: false, changes: file.backups.count, bytesAdded: file.bytesAdded,
      bytesPerBackup: perBackup(file.bytesAdded), size: file.sizeNow, files: nil,
      lastChanged: file.backups.last.map { measured[Int($0)].id })
  }

  func activity(ofDirectory path: [UInt8], _ directory: DirectoryActivity?) -> PathActivity {
    let totals = collector.directoryTotals[path]
    return PathActivity(
      path: path, isDirectory: true, changes: directory?.backups.count ?? 0,
      bytesAdded: directory?.bytesAdded ?? 0, bytesPerBackup: perBackup(directory?.bytesAdded ?? 0),
      size: totals?.bytes, files: totals?.files, lastChanged: nil)
  }

  private func movable(_ path: [UInt8]) -> Bool {
    path.starts(with: Array("Documents/".utf8)) || path.starts(with: Array("Library/".utf8))
  }

  private static func byCost(_ a: PathActivity, _ b: PathActivity) -> Bool {
    if a.bytesAdded != b.bytesAdded { return a.bytesAdded > b.bytesAdded }
    if a.changes != b.changes { return a.changes > b.changes }
    return a.path.lexicographicallyPrecedes(b.path)
  }

  private static func byFrequency(_ a: PathActivity, _ b: PathActivity) -> Bool {
    if a.changes != b.changes { return a.changes > b.changes }
    if a.bytesAdded != b.bytesAdded { return a.bytesAdded > b.bytesAdded }
    return a.path.lexicographicallyPrecedes(b.path)
  }

  private var movableFiles: [PathActivity] {
    files.filter { movable($0.key) && !$0.value.backups.isEmpty }.map { activity(ofFile: $0.key, $0.value) }
  }

  func rankedFiles() -> [PathActivity] { Array(movableFiles.sorted(by: Self.byCost).prefix(limit)) }

  func frequentFiles() -> [PathActivity] { Array(movableFiles.sorted(by: Self.byFrequency).prefix(limit)) }

  /// Directories where more than one thing changed (a directory holding a single changing
  /// file says nothing its file does not).
  /// Directories in which more than one child changed (one that only passes a single child's
  /// changes on would repeat that child's row), and every directory in `charted`: those the
  /// chart shows as groups are always listed, so the table and the chart agree.
  func rankedDirectories(charted: Set<[UInt8]> = []) -> [PathActivity] {
    let listed = directories.filter { $0.value.changedChildren.count > 1 || charted.contains($0.key) }
    return Array(listed.map { activity(ofDirectory: $0.key, $0.value) }.sorted(by: Self.byCost).prefix(limit))
  }

  func findings() -> [Finding] {
    var result: [Finding] = []
    var claimed: [[UInt8]] = []
    func isClaimed(_ path: [UInt8]) -> Bool {
      claimed.contains { path == $0 || (path.starts(with: $0) && path[$0.count] == UInt8(ascii: "/")) }
    }
    for candidate in collector.regenerable {
      let activity =
        candidate.isDirectory
        ? self.activity(ofDirectory: candidate.path, directories[candidate.path])
        : files[candidate.path].map { self.activity(ofFile: candidate.path, $0) }
          ?? PathActivity(
            path: candidate.path, isDirectory: false, changes: 0, bytesAdded: 0, bytesPerBackup: 0,
            size: candidate.size, files: nil, lastChanged: nil)
      let size = activity.size ?? candidate.size
      guard activity.bytesAdded > 0 || size >= Advisor.regenerableMinimumBytes else { continue }
      let what =
        candidate.isDirectory
        ? "a folder of \(counted(activity.files ?? 0, "file")), \(formattedByteCount(size)),"
        : "a \(formattedByteCount(size)) file"
      let cost =
        activity.bytesAdded > 0
        ? ", adding \(formattedByteCount(activity.bytesPerBackup)) per backup (changed on \(activity.changes) of \(backups))"
        : "; it adds to every full backup and restore"
      result.append(
        finding(
          .regenerable, activity, size: size, regenerable: candidate.kind,
          observation: "\(what) that looks like \(candidate.kind.rawValue) by its name\(cost)",
          advice:
            "regenerable data belongs in Library/Caches, which is never backed up; move it there, or mark it exclude-from-backup"
        ))
      claimed.append(candidate.path)
    }
    for path in collector.databases {
      guard let file = files[path], let size = file.sizeNow, file.replacements >= 2,
        file.inodeChanges * 4 >= file.replacements * 3,
        file.similarSizeReplacements * 4 >= file.replacements * 3
      else { continue }
      let activity = activity(ofFile: path, file)
      result.append(
        finding(
          .databaseRewrittenWhole, activity, size: size,
          observation:
            "a \(formattedByteCount(size)) database written anew on \(file.inodeChanges) of \(file.replacements) changes (a new inode, a similar size), adding \(formattedByteCount(activity.bytesPerBackup)) per backup",
          advice:
            "update it in place (SQLite's own journal or WAL) instead of writing a new file over it; if the app can rebuild it, keep it in Library/Caches"
        ))
      claimed.append(path)
    }
    for (path, file) in files where movable(path) && !isClaimed(path) {
      guard let size = file.sizeNow, size >= Advisor.largeFileBytes, file.backups.count >= 2,
        file.backups.count * 2 > backups
      else { continue }
      let activity = activity(ofFile: path, file)
      result.append(
        finding(
          .largeAndChanging, activity, size: size,
          observation:
            "a \(formattedByteCount(size)) file that changed on \(activity.changes) of \(backups) backups, adding \(formattedByteCount(activity.bytesPerBackup)) per backup",
          advice:
            "every change stores it whole again; if the app can rebuild or download it, keep it in Library/Caches or mark it exclude-from-backup, else split it so a change rewrites less"
        ))
    }
    for entry in collector.excluded {
      let activity = PathActivity(
        path: entry.path, isDirectory: entry.isDirectory, changes: 0, bytesAdded: 0, bytesPerBackup: 0,
        size: entry.size, files: nil, lastChanged: nil)
      result.append(
        finding(
          .excludedInDocuments, activity, size: entry.size, command: false,
          observation: "marked exclude-from-backup, but kept in Documents",
          advice:
            "Documents is for what the user makes (and file sharing shows it); data the app can rebuild belongs in Library/Caches, which is never backed up"
        ))
    }
    return result.sorted { a, b in
      if (a.kind == .excludedInDocuments) != (b.kind == .excludedInDocuments) {
        return b.kind == .excludedInDocuments
      }
      if a.bytesPerBackup != b.bytesPerBackup { return a.bytesPerBackup > b.bytesPerBackup }
      if (a.size ?? 0) != (b.size ?? 0) { return (a.size ?? 0) > (b.size ?? 0) }
      return a.path.lexicographicallyPrecedes(b.path)
    }
  }

  private func finding(
    _ kind: Finding.Kind, _ activity: PathActivity, size: Int64?, regenerable: RegenerableKind? = nil,
    command: Bool = true, observation: String, advice: String
  ) -> Finding {
    Finding(
      kind: kind, path: activity.path, isDirectory: activity.isDirectory, regenerable: regenerable,
      bytesPerBackup: activity.bytesPerBackup, size: size, changes: activity.changes, backups: backups,
      observation: observation, advice: advice,
      // `exclude` takes its path as text: a name that is not UTF-8 gets no command.
      command: command && String(validating: activity.path, as: UTF8.self) != nil
        ? shellCommand([Array("appbox".utf8), Array("exclude".utf8), Array(app.utf8), activity.path]) : nil)
  }
}
