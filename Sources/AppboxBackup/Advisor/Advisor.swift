// `advise`: what costs an app's backups most, read from its history in the catalog.
//
// Algorithm, over the app's last N snapshots (commit order), each measured against the one
// committed just before it (the app's very first snapshot is the baseline and costs nothing):
// 1. Walk each consecutive pair's trees together (TreeComparer): the files whose recorded
//    entry changed, and what the newer snapshot's archive spent on each (ContentAttribution).
//    Per file: in how many backups it changed, the bytes it added, in how many changes its
//    inode changed and its size stayed similar (a rewrite instead of an update in place).
// 2. Roll the files of Documents and Library up into their directories.
// 3. Walk the latest snapshot once (FindingCollector): sizes now, names that look
//    regenerable, databases, entries inside Documents marked exclude-from-backup.
// 4. Findings, each with an estimate of the bytes per backup that moving it to Library/Caches
//    would save (what it added over the measured backups, divided by their number) and the
//    command that marks it.
// Cost: proportional to what changed between snapshots, plus one walk of the latest; equal
// subtrees are never read. Nothing is written.

import AppboxCore
import AppboxCrypto
import AppboxRepository
import Foundation

/// What `advise` looks at.
public struct AdviceOptions: Sendable {
  public static let defaultLast = 20
  /// How many of the latest snapshots to read.
  public var last: Int
  /// How many entries each ranking keeps.
  public var limit: Int

  public init(last: Int = AdviceOptions.defaultLast, limit: Int = 15) {
    self.last = last
    self.limit = limit
  }
}

/// What the measured backups spent on one file or directory.
public struct PathActivity: Sendable, Equatable {
  public var path: [UInt8]
  public var isDirectory: Bool
  /// In how many of the measured backups it (or, for a directory, anything inside) changed.
  public var changes: Int
  public var bytesAdded: Int64
  public var bytesPerBackup: Int64
  /// Its size in the latest snapshot (a directory: its files'); nil when no longer there.
  public var size: Int64?
  /// For a directory, how many files it holds in the latest snapshot.
  public var files: Int?
  /// The last snapshot in which it changed.
  public var lastChanged: String?
}

/// One thing `advise` recommends changing.
public struct Finding: Sendable, Equatable {
  public enum Kind: String, Sendable {
    /// A large file that changes on most backups.
    case largeAndChanging = "large-changing-file"
    /// Data in Documents whose name or type says it can be downloaded or rebuilt.
    case regenerable = "regenerable-in-documents"
    /// A database written anew (new inode, similar size) instead of updated in place.
    case databaseRewrittenWhole = "database-rewritten-whole"
    /// Data marked exclude-from-backup that lives in Documents rather than Library/Caches.
    case excludedInDocuments = "excluded-in-documents"
  }

  public var kind: Kind
  public var path: [UInt8]
  public var isDirectory: Bool
  /// For `.regenerable`: what it looks like.
  public var regenerable: RegenerableKind?
  /// The estimated saving: bytes per backup that moving it to Library/Caches would spare.
  public var bytesPerBackup: Int64
  /// Its size now (latest snapshot); nil when unknown (an excluded folder is not listed).
  public var size: Int64?
  public var changes: Int
  public var backups: Int
  /// What was seen, in a sentence fragment ("a 4.2 MB file that changed on 9 of 10 backups").
  public var observation: String
  /// What to do.
  public var advice: String
  /// The command that marks it exclude-from-backup (nil when it already is).
  public var command: String?
}

/// One measured backup in the chart: the bytes it added per group (the chart's `groups`).
public struct ChartBar: Sendable, Equatable {
  public var snapshot: String
  public var time: Date
  public var bytes: [Int64]
}

/// Bytes added per backup, split by the directories that added most.
public struct AdviceChart: Sendable, Equatable {
  /// Group names ("Documents/Thumbnails", "Library/Preferences", "Documents (top level)" for
  /// files directly inside it, "home" for files at the top of the home, "other" last when
  /// there are more groups than shown).
  public var groups: [String]
  public var bars: [ChartBar]
}

/// Everything `advise` found.
public struct AdviceReport: Sendable {
  public var app: String
  /// The snapshots read, oldest first.
  public var snapshots: [Snapshot]
  /// How many of them were measured against a predecessor.
  public var backups: Int
  /// Data bytes (not the bundle) the measured backups added.
  public var bytesAdded: Int64
  /// Files of Documents and Library, by bytes per backup, then change frequency.
  public var files: [PathActivity]
  /// The same files by change frequency, then bytes.
  public var frequentlyChanged: [PathActivity]
  /// Directories of Documents and Library (those where more than one thing changed), ranked
  /// like `files`.
  public var directories: [PathActivity]
  /// Findings, largest saving first; excluded data in Documents last.
  public var findings: [Finding]
  public var chart: AdviceChart
}

extension Repository {
  /// Reads `app`'s last `options.last` snapshots and ranks what costs its backups most.
  /// An app with no snapshots is `.notFound`.
  public func advise(app: String, options: AdviceOptions = AdviceOptions()) throws -> AdviceReport {
    guard options.last >= 1 else { throw BackupError(.invalidRequest, "--last must be at least 1") }
    return try catalog.reading {
      let history = try catalog.snapshots(app: app)
      guard !history.isEmpty else {
        throw BackupError(.notFound, "No snapshots of '\(app)' in '\(path)'")
      }
      return try Advisor(catalog: catalog, app: app, history: history, options: options).run()
    }
  }
}

/// What the measured backups did to one file.
struct FileActivity {
  /// Indices (into the measured backups) of the backups in which it changed.
  var backups: [Int32] = []
  var bytesAdded: Int64 = 0
  /// Changes that replaced an earlier entry (not first appearances).
  var replacements = 0
  var inodeChanges = 0
  var similarSizeReplacements = 0
  /// Its size in the latest snapshot; nil when it is not there.
  var sizeNow: Int64?
}

/// Directory totals: from the measured backups, and from the latest snapshot.
struct DirectoryActivity {
  var backups = BackupSet()
  var bytesAdded: Int64 = 0
  /// Names directly inside that changed (more than one: the directory is worth listing).
  var changedChildren: Set<[UInt8]> = []
}

/// A small set of backup indices.
struct BackupSet {
  private var words: [UInt64] = []
  private(set) var count = 0

  mutating func insert(_ index: Int32) {
    let word = Int(index) >> 6
    if word >= words.count { words += [UInt64](repeating: 0, count: word - words.count + 1) }
    let bit = UInt64(1) << UInt64(index & 63)
    if words[word] & bit == 0 {
      words[word] |= bit
      count += 1
    }
  }
}

struct Advisor {
  let catalog: Catalog
  let app: String
  let history: [Snapshot]
  let options: AdviceOptions

  /// Large enough that storing it on most backups is worth a finding.
  static let largeFileBytes: Int64 = 1_000_000
  /// Regenerable-looking data smaller than this that adds nothing is not worth a finding.
  static let regenerableMinimumBytes: Int64 = 64_000
  static let chartGroups = 6

  func run() throws -> AdviceReport {
    let first = max(0, history.count - options.last)
    let window = Array(history[first...])
    let trees = TreeReader(catalog: catalog)
    let comparer = TreeComparer(trees: trees)
    var files: [[UInt8]: FileActivity] = [:]
    var bars: [(snapshot: Snapshot, groups: [[UInt8]: Int64])] = []
    var measured: Int32 = 0
    for index in max(first, 1)..<max(history.count, 1) {
      let previous = history[index - 1]
      let current = history[index]
      var attribution = ContentAttribution(catalog: catalog, snapshot: current)
      var groups: [[UInt8]: Int64] = [:]
      try comparer.changes(
        from: previous.rootTree, to: current.rootTree, under: [],
        skipTop: Array(current.bundleDirectoryName.utf8)
      ) { change in
        let bytes = try attribution.bytesAdded(by: change)
        files[change.path, default: FileActivity()].record(change, bytes: bytes, backup: measured)
        groups[chartGroup(of: change.path), default: 0] += bytes
      }
      trees.advance()
      bars.append((current, groups))
      measured += 1
    }
    let backups = Int(measured)
    var directories: [[UInt8]: DirectoryActivity] = [:]
    let slash = UInt8(ascii: "/")
    for (path, activity) in files where isMovable(path) {
      var start = path.startIndex
      while let end = path[start...].firstIndex(of: slash) {
        let child = Array(path[(end + 1)...].prefix { $0 != slash })
        directories[Array(path[..<end]), default: DirectoryActivity()].add(activity, child: child)
        start = end + 1
      }
    }
    let latest = window[window.count - 1]
    var collector = FindingCollector(catalog: catalog)
    try collector.walk(latest, files: &files)

    let report = Ranking(
      app: app, measured: bars.map(\.snapshot), files: files, directories: directories,
      collector: collector, limit: options.limit)
    let chart = chart(bars)
    return AdviceReport(
      app: app, snapshots: window, backups: backups,
      bytesAdded: files.values.reduce(0) { $0 + $1.bytesAdded },
      files: report.rankedFiles(), frequentlyChanged: report.frequentFiles(),
      directories: report.rankedDirectories(charted: Set(chart.keys)), findings: report.findings(),
      chart: chart.chart)
  }

  /// Documents and Library: what a developer can move or mark.
  func isMovable(_ path: [UInt8]) -> Bool {
    path.starts(with: Array("Documents/".utf8)) || path.starts(with: Array("Library/".utf8))
  }

  /// The chart's group for a changed file: its first two components when it lies deeper
  /// ("Documents/Thumbnails"), its top directory when directly inside one ("Documents"), and
  /// "home" for files at the top of the home.
  func chartGroup(of path: [UInt8]) -> [UInt8] {
    let parts = path.split(separator: UInt8(ascii: "/"), maxSplits: 2, omittingEmptySubsequences: false)
    switch parts.count {
    case 0, 1: return Array("home".utf8)
    case 2: return Array(parts[0])
    default: return Array(parts[0]) + [UInt8(ascii: "/")] + Array(parts[1])
    }
  }

  /// The chart, and the paths of the groups it shows by name (directories, and "home").
  func chart(_ bars: [(snapshot: Snapshot, groups: [[UInt8]: Int64])]) -> (
    chart: AdviceChart, keys: [[UInt8]]
  ) {
    var totals: [[UInt8]: Int64] = [:]
    for bar in bars { for (group, bytes) in bar.groups { totals[group, default: 0] += bytes } }
    let ranked = totals.filter { $0.value > 0 }.sorted {
      $0.value != $1.value ? $0.value > $1.value : $0.key.lexicographicallyPrecedes($1.key)
    }
    let shown = ranked.count > Self.chartGroups ? Array(ranked.prefix(Self.chartGroups - 1)) : ranked
    let hasOther = ranked.count > shown.count
    let keys = shown.map(\.key)
    var names = keys.map {
      $0.contains(UInt8(ascii: "/")) || $0 == Array("home".utf8)
        ? printablePath($0) : printablePath($0) + " (top level)"
    }
    if hasOther { names.append("other") }
    let chart = AdviceChart(
      groups: names,
      bars: bars.map { bar in
        var bytes = keys.map { bar.groups[$0] ?? 0 }
        if hasOther { bytes.append(bar.groups.filter { !keys.contains($0.key) }.values.reduce(0, +)) }
        return ChartBar(snapshot: bar.snapshot.id, time: bar.snapshot.time, bytes: bytes)
      })
    return (chart, keys)
  }
}

extension FileActivity {
  mutating func record(_ change: FileChange, bytes: Int64, backup: Int32) {
    backups.append(backup)
    bytesAdded += bytes
    guard let old = change.old else { return }
    replacements += 1
    if old.inode != change.new.inode { inodeChanges += 1 }
    let small = min(old.size, change.new.size)
    let large = max(old.size, change.new.size)
    if large == 0 || small * 3 >= large * 2 { similarSizeReplacements += 1 }
  }
}

extension DirectoryActivity {
  mutating func add(_ file: FileActivity, child: [UInt8]) {
    for backup in file.backups { backups.insert(backup) }
    bytesAdded += file.bytesAdded
    if changedChildren.count < 2 { changedChildren.insert(child) }
  }
}
