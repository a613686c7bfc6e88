// `why`: one path's backup decision, explained from the rules, the disk and the history.
//
// Three questions, each answered from one source:
// 1. Is it backed up, and by which rule? The location (the bundle, Library/Caches and tmp
//    are skipped by name at their fixed places; Documents, Library and the rest of the home
//    are backed up), then what the scanner meets on the way (LiveProbe: a symlink it does
//    not look through, an ancestor marked exclude-from-backup where it stops, an entry it
//    cannot read, a device file it refuses), then the entry's own mark (recorded without its
//    content) and its protection class (WhyHooks).
// 2. What will the next backup do? It compares the entry's stat with the parent snapshot the
//    engine would pick (the app's latest from this device) using the engine's own
//    `ChangeDetector.changes`, so the prediction names the fields that differ.
// 3. What did it cost? PathResolver finds the path in every snapshot of the app; over the
//    last N it counts the backups in which its entry changed and attributes bytes as
//    `advise` does (for a directory, everything under it, through TreeComparer).
// A path that no longer exists is answered from history; one that never existed anywhere is
// "no such file" (66).

import AppboxContainer
import AppboxCore
import Foundation

/// `why`'s answer for one path.
public struct WhyReport: Sendable {
  /// The rule that decides whether the path is backed up.
  public enum Rule: String, Sendable {
    case documents, library, preferences, home, bundle, caches, tmp
    case excluded
    case excludedAncestor = "excluded-ancestor"
    case symlinkAncestor = "symlink-ancestor"
    case withoutContent = "no-content"
    case deviceFile = "device-file"
    case unreadable
  }

  /// What the next backup does with it.
  public enum Action: String, Sendable {
    /// Read and stored (new, changed, or the first backup).
    case store
    /// Read and hashed; stored only if its content differs (a stat too recent to trust).
    case verify
    /// Not read: the parent snapshot's record stands for it.
    case reuse
    /// Recorded (name, mode, times) without content: marked, or a FIFO or socket.
    case record
    /// Never looked at.
    case skip
    /// Not in the home, so not in the next snapshot.
    case absent
    /// The backup cannot deal with it (unreadable, a device file).
    case fail
  }

  public struct Next: Sendable {
    public var action: Action
    /// The snapshot the decision compares against.
    public var since: String?
    /// The stat fields that differ from `since`'s record: size, mtime, ctime, inode, mode,
    /// type, too-recent.
    public var changed: [String]
    public var explanation: String
    /// For a directory: what happens to the files beneath it.
    public var inside: SubtreeSurvey?
  }

  public struct History: Sendable {
    /// The app's snapshots the counts cover (the last N), and how many were measured
    /// against a predecessor.
    public var snapshots: Int
    public var backups: Int
    /// In how many of them the path was recorded.
    public var present: Int
    /// In how many measured backups its entry (a directory: anything under it) changed.
    public var changes: Int
    public var bytesAdded: Int64
    public var bytesPerBackup: Int64
    /// Over the whole history: the first and last snapshot that recorded it.
    public var firstSeen: String?
    public var lastSeen: String?
    public var lastSeenTime: Date?
    public var lastChanged: String?
    /// Recorded once, but not by the latest snapshot.
    public var isGone: Bool
  }

  public var app: String
  /// The path as given (normalized), relative to the home.
  public var path: [UInt8]
  /// It is in the home now.
  public var exists: Bool
  /// "file", "directory", "symlink", "fifo", "socket" or "device": now, else as last recorded.
  public var type: String?
  public var size: Int64?
  /// Whether the next backup stores it (or, for a marked entry, records it).
  public var backedUp: Bool
  public var rule: Rule
  public var reason: String
  /// The path carrying the exclude-from-backup mark that decides, if any.
  public var excludedBy: [UInt8]?
  public var protectionClass: String?
  public var unreadable: String?
  public var next: Next
  public var history: History
  /// The whole answer as one short paragraph.
  public var summary: String
}

extension DeviceSession {
  /// Explains the backup decision for `path` (relative to the home) of the installed `app`,
  /// from the disk and, when there is one, the repository's history of the app.
  public func whyBackup(
    _ path: String, of app: AppRecord, repository: Repository?, last: Int = AdviceOptions.defaultLast
  ) throws -> WhyReport {
    let explainer = try PathExplainer(
      path: path, bundleIdentifier: app.bundleIdentifier, installed: (self, app), repository: repository,
      last: last)
    return try explainer.explain()
  }
}

extension Repository {
  /// Explains `path` of an app that is not installed (any more), from history alone.
  public func whyBackup(
    _ path: String, ofUninstalled bundleIdentifier: String, last: Int = AdviceOptions.defaultLast
  )
    throws -> WhyReport
  {
    let explainer = try PathExplainer(
      path: path, bundleIdentifier: bundleIdentifier, installed: nil, repository: self, last: last)
    return try explainer.explain()
  }
}

/// One `why` question, answered.
struct PathExplainer {
  let relative: RelativePath
  let components: [[UInt8]]
  let path: [UInt8]
  let bundleIdentifier: String
  let installed: (session: DeviceSession, app: AppRecord)?
  let repository: Repository?
  let last: Int

  init(
    path: String, bundleIdentifier: String, installed: (DeviceSession, AppRecord)?, repository: Repository?,
    last: Int
  ) throws {
    relative = try RelativePath(validating: path)
    components = relative.components.map { Array($0.utf8) }
    self.path = Array(relative.description.utf8)
    self.bundleIdentifier = bundleIdentifier
    self.installed = installed
    self.repository = repository
    self.last = max(1, last)
  }

  /// What the history says, per snapshot.
  struct Recorded {
    var snapshots: [Snapshot]
    var records: [PathRecord]
  }

  func explain() throws -> WhyReport {
    let recorded = try readHistory()
    let history = try summarize(recorded)
    let live = try installed.map {
      try LiveProbe.inspect(home: $0.session.home(of: $0.app).path, components: components)
    }
    let exists = live?.status != nil
    let blockedOnTheWay = live?.symlinkAncestor != nil || live?.unreadable != nil
    if !exists && !blockedOnTheWay && history.firstSeen == nil {
      let home = installed == nil ? "" : "in the home of \(bundleIdentifier), and "
      throw ContainerError(
        .fileNotFound,
        "No file or folder '\(printablePath(path))' \(home)no snapshot of \(bundleIdentifier) recorded one")
    }
    let latestRecord = recorded.records.last?.facts
    let bundleName =
      installed?.app.bundleDirectoryName ?? recorded.snapshots.last?.bundleDirectoryName ?? ""
    var (rule, reason, excludedBy) = decide(live: live, recorded: latestRecord, bundleName: bundleName)
    if let protection = live?.protectionClass, rule != .caches, rule != .tmp {
      reason += "; its protection class is \(protection)"
    }
    var next = try predict(rule: rule, live: live, recorded: recorded, bundleName: bundleName)
    if let installed, let live, live.status?.type == .directory,
      [.store, .reuse, .verify].contains(next.action),
      rule != .bundle
    {
      next.inside = try survey(installed, recorded: recorded)
      if let inside = next.inside { next.explanation += "; inside it, " + Self.describe(inside) }
    }
    let backedUp =
      [.store, .verify, .reuse, .record].contains(next.action) || (!exists && isBackedUpRule(rule))
    let type = live?.status.map { typeName($0.type) } ?? latestSeenType(recorded)
    let size = live?.status.map(\.size) ?? recorded.records.last(where: { $0.facts != nil })?.facts?.size
    var report = WhyReport(
      app: bundleIdentifier, path: path, exists: exists, type: type, size: size, backedUp: backedUp,
      rule: rule,
      reason: reason, excludedBy: excludedBy, protectionClass: live?.protectionClass,
      unreadable: live?.unreadable, next: next, history: history, summary: "")
    report.summary = paragraph(report)
    return report
  }

  private func isBackedUpRule(_ rule: WhyReport.Rule) -> Bool {
    [.documents, .library, .preferences, .home, .bundle, .excluded, .withoutContent].contains(rule)
  }

  // MARK: 1. The rule

  /// The location's rule, then what the scanner meets on the way, then the entry itself.
  private func decide(live: LiveState?, recorded: EntryFacts?, bundleName: String) -> (
    WhyReport.Rule, String, [UInt8]?
  ) {
    let top = relative.components[0]
    let second = relative.components.dropFirst().first
    if top == "tmp" {
      return (.tmp, "tmp is never backed up (the system empties it when the app is not running)", nil)
    }
    if top == "Library" && second == "Caches" {
      return (.caches, "Library/Caches is never backed up (it holds data the app can regenerate)", nil)
    }
    if top == bundleName {
      return (
        .bundle,
        "it is in the app's sealed bundle, which is stored on the first backup and again only when it changes (after an update)",
        nil
      )
    }
    if let live {
      if let depth = live.symlinkAncestor {
        let link = prefix(depth)
        return (
          .symlinkAncestor,
          "'\(printablePath(link))' is a symbolic link: backups record the link itself and never look through it",
          nil
        )
      }
      if let depth = live.nonDirectoryAncestor {
        return (.home, "'\(printablePath(prefix(depth)))' is not a folder, so nothing can be inside it", nil)
      }
      if let depth = live.excludedAncestor {
        let folder = prefix(depth)
        return (
          .excludedAncestor,
          "it is inside '\(printablePath(folder))', which is marked exclude-from-backup: backups record that folder and do not look inside",
          folder
        )
      }
      if let status = live.status {
        switch status.type {
        case .characterDevice, .blockDevice, .unknown:
          return (.deviceFile, "it is a device file, which does not belong in a home: backups refuse it", nil)
        default: break
        }
      }
      if let reason = live.unreadable {
        let what = live.unreadableAt.map { "'\(printablePath(prefix($0)))'" } ?? "it"
        return (.unreadable, "\(what) cannot be read (\(reason))", nil)
      }
      if live.isExcluded {
        return (
          .excluded,
          "it carries the exclude-from-backup mark, so backups record its name and metadata but not its content",
          path
        )
      }
      if let status = live.status, status.type == .fifo || status.type == .socket {
        return (
          .withoutContent, "it is a \(typeName(status.type)): backups record it, but it has no content", nil
        )
      }
    } else if let recorded, recorded.isExcluded {
      return (
        .excluded, "it carried the exclude-from-backup mark, so backups recorded it without its content", path
      )
    }
    switch (top, second) {
    case ("Documents", _):
      return (.documents, "it is in Documents, where the user's documents and app data are backed up", nil)
    case ("Library", "Preferences"):
      return (.preferences, "it is in Library/Preferences, and preferences are backed up", nil)
    case ("Library", _):
      return (.library, "it is in Library, which is backed up except Library/Caches", nil)
    default:
      return (
        .home, "everything in the home is backed up except the bundle, Library/Caches and tmp", nil
      )
    }
  }

  private func prefix(_ depth: Int) -> [UInt8] {
    Array(components.prefix(depth).joined(separator: [UInt8(ascii: "/")]))
  }

  // MARK: 2. The next backup

  private func predict(rule: WhyReport.Rule, live: LiveState?, recorded: Recorded, bundleName: String) throws
    -> WhyReport.Next
  {
    func next(_ action: WhyReport.Action, _ since: Snapshot?, _ changed: [String], _ text: String)
      -> WhyReport.Next
    {
      WhyReport.Next(action: action, since: since?.id, changed: changed, explanation: text, inside: nil)
    }
    func next(_ action: WhyReport.Action, _ text: String) -> WhyReport.Next { next(action, nil, [], text) }
    guard let installed else {
      return next(.absent, "\(bundleIdentifier) is not installed, so there is no next backup of it")
    }
    let history = recorded.snapshots
    switch rule {
    case .tmp, .caches:
      return next(.skip, "not read: the backup skips \(rule == .tmp ? "tmp" : "Library/Caches") by name")
    case .symlinkAncestor: return next(.skip, "not read: only the link is recorded")
    case .excludedAncestor:
      return next(.skip, "not read: the backup stops at the marked folder")
    case .deviceFile: return next(.fail, "the backup stops with an error at it")
    case .unreadable: return next(.fail, unreadableConsequence(live?.unreadable ?? "unreadable"))
    default: break
    }
    guard let live, let status = live.status else {
      let lastSeen = recorded.records.lastIndex { $0.facts != nil }.map { history[$0] }
      let seen = lastSeen.map { " (last recorded by snapshot \($0.id) of \(dayAndTime($0.time)))" } ?? ""
      return next(.absent, "it is not in the home now, so the next snapshot will not have it\(seen)")
    }
    switch rule {
    case .excluded:
      return next(.record, "recorded with its mark (name, mode, times); its content is not read")
    case .bundle:
      let app = installed.app
      if let holder = history.last(where: {
        $0.seal == app.seal && $0.bundleDirectoryName == app.bundleDirectoryName
      }) {
        return next(
          .reuse, holder, [],
          "not read: snapshot \(holder.id) already holds this version of the bundle (same seal), so its record is reused"
        )
      }
      return next(
        .store,
        history.isEmpty
          ? "the first backup stores the bundle"
          : "the bundle changed since the last snapshot (a new seal): it is read and stored again")
    default: break
    }
    let device = installed.session.identity.udid
    let stores: WhyReport.Action = status.type == .fifo || status.type == .socket ? .record : .store
    guard let parent = history.last(where: { $0.device == device }) ?? history.last else {
      return next(stores, "the next backup is the app's first, a full one: it reads and stores everything")
    }
    guard parent.device == device else {
      return next(
        stores, parent, [],
        "the latest snapshot (\(parent.id)) was taken on another device, whose inodes and ctimes mean nothing here: everything is read again"
      )
    }
    let record = recorded.records[history.lastIndex { $0.id == parent.id }!]
    let kind = typeName(status.type)
    switch record {
    case .present(let previous):
      let trustedBefore = Int64(parent.time.timeIntervalSince1970 * 1e9)
      let changes = ChangeDetector.changes(status, previous: previous.treeEntry, trustedBefore: trustedBefore)
      let names = Self.names(of: changes)
      if changes.isEmpty {
        let contentNote = status.type == .directory ? " (its entries are still listed)" : ""
        return next(
          .reuse, parent, [],
          "unchanged since snapshot \(parent.id): its size, mtime, ctime, inode and mode match, so it is not read and that snapshot's record is reused\(contentNote)"
        )
      }
      if changes == .tooRecent && status.type == .directory {
        return next(
          .verify, parent, names,
          "the folder's stat matches snapshot \(parent.id) but is too recent to trust, so its attributes are read again"
        )
      }
      if changes == .tooRecent {
        let window = ChangeDetector.racyWindowNanoseconds / 1_000_000
        return next(
          .verify, parent, names,
          "its stat matches snapshot \(parent.id), but it changed less than \(window) ms before that snapshot started, so it is read and hashed again and stored only if its content differs"
        )
      }
      let fields = Self.describe(changes)
      switch status.type {
      case .regular:
        let store =
          status.size > Int64(ContentReader.wholeReadLimit)
          ? "read and stored again"
          : "read, and stored unless the repository already holds the same content"
        return next(
          .store, parent, names, "changed since snapshot \(parent.id) (\(fields) differ): it will be \(store)"
        )
      case .directory:
        return next(
          .store, parent, names,
          "the folder changed since snapshot \(parent.id) (\(fields) differ): its entry is recorded again"
        )
      case .fifo, .socket:
        return next(
          .record, parent, names,
          "changed since snapshot \(parent.id) (\(fields) differ): recorded again, without content")
      default:
        return next(
          .store, parent, names,
          "the \(kind) changed since snapshot \(parent.id) (\(fields) differ): recorded again")
      }
    case .absent, .insideNonDirectory:
      return next(
        stores, parent, [],
        "new since snapshot \(parent.id), which did not have it: it will be \(status.type == .regular ? "read and stored" : "recorded")"
      )
    case .insideExcluded(let depth):
      return next(
        stores, parent, [],
        "snapshot \(parent.id) did not look inside '\(printablePath(prefix(depth)))' (marked exclude-from-backup then): it will be read and stored"
      )
    }
  }

  /// The survey of a live directory against the snapshot the next backup compares with.
  private func survey(_ installed: (session: DeviceSession, app: AppRecord), recorded: Recorded) throws
    -> SubtreeSurvey
  {
    let device = installed.session.identity.udid
    let home = installed.session.home(of: installed.app).path
    let parentIndex = recorded.snapshots.lastIndex { $0.device == device }
    guard let repository, let parentIndex else {
      return try LiveProbe.survey(
        home: home, components: components, previous: nil, trees: nil, trustedBefore: 0)
    }
    let parent = recorded.snapshots[parentIndex]
    let previous = recorded.records[parentIndex].facts.flatMap { $0.type == .directory ? $0.digest : nil }
    return try repository.catalog.reading {
      try LiveProbe.survey(
        home: home, components: components, previous: previous,
        trees: TreeReader(catalog: repository.catalog),
        trustedBefore: Int64(parent.time.timeIntervalSince1970 * 1e9))
    }
  }

  /// "3 of 34 files will be read (60.0 KB): 1 new, 2 changed; 31 are unchanged and not read".
  static func describe(_ survey: SubtreeSurvey) -> String {
    var text: String
    if survey.files == 0 {
      text = "there are no files"
    } else if survey.added + survey.changed == 0 {
      text = "none of its \(counted(survey.files, "file")) changed, so none is read"
    } else {
      let parts = [(survey.added, "new"), (survey.changed, "changed")].filter { $0.0 > 0 }.map {
        "\($0.0) \($0.1)"
      }
      text =
        "\(survey.added + survey.changed) of \(counted(survey.files, "file")) will be read (\(formattedByteCount(survey.bytesToRead)), "
        + parts.joined(separator: " and ") + ")"
      if survey.unchanged > 0 { text += "; \(survey.unchanged) unchanged and not read" }
    }
    if survey.isPartial { text += " (not counting folders nested too deep to open)" }
    if survey.excludedFolders > 0 {
      text += " (\(counted(survey.excludedFolders, "folder")) marked exclude-from-backup not looked into)"
    }
    return text
  }

  static func names(of changes: StatChanges) -> [String] {
    let all: [(StatChanges, String)] = [
      (.type, "type"), (.size, "size"), (.modificationTime, "mtime"), (.changeTime, "ctime"),
      (.inode, "inode"),
      (.mode, "mode"), (.tooRecent, "too-recent"),
    ]
    return all.filter { changes.contains($0.0) }.map(\.1)
  }

  /// "size, mtime and ctime".
  static func describe(_ changes: StatChanges) -> String {
    let words = names(of: changes.subtracting(.tooRecent)).map { $0 == "type" ? "its type" : $0 }
    guard words.count > 1 else { return words.first ?? "nothing" }
    return words.dropLast().joined(separator: ", ") + " and " + words.last!
  }

  // MARK: 3. History

  private func readHistory() throws -> Recorded {
    guard let repository else { return Recorded(snapshots: [], records: []) }
    return try repository.catalog.reading {
      let snapshots = try repository.catalog.snapshots(app: bundleIdentifier)
      let resolver = PathResolver(trees: TreeReader(catalog: repository.catalog), components: components)
      return Recorded(
        snapshots: snapshots, records: try snapshots.map { try resolver.record(inRoot: $0.rootTree) })
    }
  }

  private func summarize(_ recorded: Recorded) throws -> WhyReport.History {
    let snapshots = recorded.snapshots
    let records = recorded.records
    let first = max(0, snapshots.count - last)
    var history = WhyReport.History(
      snapshots: snapshots.count - first, backups: 0, present: 0, changes: 0, bytesAdded: 0,
      bytesPerBackup: 0,
      firstSeen: nil, lastSeen: nil, lastSeenTime: nil, lastChanged: nil, isGone: false)
    for (snapshot, record) in zip(snapshots, records) where record.facts != nil {
      if history.firstSeen == nil { history.firstSeen = snapshot.id }
      history.lastSeen = snapshot.id
      history.lastSeenTime = snapshot.time
    }
    history.isGone = history.lastSeen != nil && records.last?.facts == nil
    guard let repository, !snapshots.isEmpty else { return history }
    let catalog = repository.catalog
    try catalog.reading {
      let trees = TreeReader(catalog: catalog)
      let comparer = TreeComparer(trees: trees)
      for index in first..<snapshots.count {
        if records[index].facts != nil { history.present += 1 }
        guard index > 0 else { continue }
        history.backups += 1
        guard let new = records[index].facts else { continue }
        let old = records[index - 1].facts
        var attribution = ContentAttribution(catalog: catalog, snapshot: snapshots[index])
        var changed = false
        if new.type == .directory {
          guard let digest = new.digest else { continue }
          let previous = old.flatMap { $0.type == .directory ? $0.digest : nil }
          try comparer.changes(from: previous, to: digest, under: path) { change in
            changed = true
            history.bytesAdded += try attribution.bytesAdded(by: change)
          }
          trees.advance()
        } else if new != old {
          changed = true
          let previous = old.flatMap { $0.type == .directory ? nil : $0 }
          history.bytesAdded += try attribution.bytesAdded(
            by: FileChange(path: path, new: new, old: previous))
        }
        if changed {
          history.changes += 1
          history.lastChanged = snapshots[index].id
        }
      }
    }
    history.bytesPerBackup = history.backups > 0 ? history.bytesAdded / Int64(history.backups) : 0
    return history
  }

  private func latestSeenType(_ recorded: Recorded) -> String? {
    recorded.records.last { $0.facts != nil }?.facts.map { typeName($0.type) }
  }

  // MARK: The paragraph

  private func paragraph(_ report: WhyReport) -> String {
    let name = "'\(printablePath(path))'"
    var sentences: [String] = []
    let verdict: String
    switch report.rule {
    case .caches, .tmp, .excludedAncestor, .symlinkAncestor: verdict = "is not backed up"
    case .excluded: verdict = "is recorded without its content"
    case .deviceFile, .unreadable: verdict = "cannot be backed up"
    default: verdict = report.exists || report.history.lastSeen != nil ? "is backed up" : "would be backed up"
    }
    let nowWhat = report.exists ? "" : (report.history.isGone ? " (it is gone from the home)" : "")
    sentences.append("\(name)\(nowWhat) \(verdict): \(report.reason).")
    sentences.append("Next backup: \(report.next.explanation).")
    let history = report.history
    if history.snapshots == 0 {
      sentences.append(
        repository == nil
          ? "There is no backup repository yet." : "There are no snapshots of \(bundleIdentifier) yet.")
    } else if history.lastSeen == nil {
      sentences.append("None of the \(counted(history.snapshots, "snapshot")) recorded it.")
    } else {
      var text = "Over the last \(counted(history.snapshots, "snapshot")) it "
      if history.backups == 0 {
        text += "was recorded once (the first backup stores everything)"
      } else if history.changes == 0 {
        text += "did not change in any of the \(counted(history.backups, "backup")) measured"
      } else {
        text += "changed in \(history.changes) of \(counted(history.backups, "backup"))"
        if history.bytesAdded > 0 {
          text +=
            ", adding \(formattedByteCount(history.bytesAdded)) (\(formattedByteCount(history.bytesPerBackup)) per backup)"
        }
        if let changed = history.lastChanged { text += "; last changed in snapshot \(changed)" }
      }
      sentences.append(text + ".")
      if history.isGone, let lastSeen = history.lastSeen, let time = history.lastSeenTime {
        sentences.append(
          "It was last recorded by snapshot \(lastSeen) of \(dayAndTime(time)), and is gone since.")
      }
    }
    return sentences.joined(separator: " ")
  }
}

/// The name `why` uses for a kind of file system object.
func typeName(_ type: FileType) -> String {
  switch type {
  case .regular: return "file"
  case .directory: return "directory"
  case .symlink: return "symlink"
  case .fifo: return "fifo"
  case .socket: return "socket"
  case .characterDevice, .blockDevice, .unknown: return "device"
  }
}

func typeName(_ type: TreeEntryType) -> String {
  switch type {
  case .file: return "file"
  case .directory: return "directory"
  case .symlink: return "symlink"
  case .fifo: return "fifo"
  case .socket: return "socket"
  }
}

/// "2025-01-31 14:05 UTC".
func dayAndTime(_ date: Date) -> String {
  let formatter = DateFormatter()
  formatter.locale = Locale(identifier: "en_US_POSIX")
  formatter.timeZone = TimeZone(identifier: "UTC")
  formatter.dateFormat = "yyyy-MM-dd HH:mm:ss 'UTC'"
  return formatter.string(from: date)
}
