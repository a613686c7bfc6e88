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
// "no such file" (66). Question 1 is here, 2 in WhyNextBackup.swift, 3 in WhyHistory.swift.

import AppboxContainer
import AppboxCore
import AppboxRepository
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
    /// The last snapshot (of the last N) that could not read it (see WhyHooks).
    public var lastUnreadable: String?
  }

  public var app: String
  /// The path as given (normalized), relative to the home.
  public var path: [UInt8]
  /// It is in the home now.
  public var exists: Bool
  /// "file", "directory", "symlink", "fifo", "socket" or "device": now, else as last recorded.
  public var type: String?
  public var size: Int64?
  /// Whether the next backup stores it (a FIFO or socket: records it). False for an entry
  /// marked exclude-from-backup (its content is never stored, and a restore drops it), for
  /// one the backup skips, and when the next backup fails or refuses (a locked device: 69).
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
      try LiveProbe.inspect(
        home: $0.session.home(of: $0.app).path, components: components,
        classes: (try? $0.session.protectionClassesByKey()) ?? [:])
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
    // Stored (or, without content, recorded) by the next backup; a marked entry's content never is.
    let backedUp =
      rule != .excluded
      && ([.store, .verify, .reuse, .record].contains(next.action) || (!exists && isBackedUpRule(rule)))
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

  func isBackedUpRule(_ rule: WhyReport.Rule) -> Bool {
    [.documents, .library, .preferences, .home, .bundle, .withoutContent].contains(rule)
  }

  // MARK: 1. The rule

  /// The location's rule, then what the scanner meets on the way, then the entry itself.
  func decide(live: LiveState?, recorded: EntryFacts?, bundleName: String) -> (
    WhyReport.Rule, String, [UInt8]?
  ) {
    let top = relative.components[0]
    let second = relative.components.dropFirst().first
    // The names the scanner leaves out at their fixed places, by the scanner's own rules.
    let rules = ScanRules(bundleDirectoryName: bundleName, includeBundle: false)
    if components[0].withUnsafeBytes({ rules.skips($0, inRoot: true, inTopLibrary: false) }) {
      if components[0] == Array(bundleName.utf8) {
        return (
          .bundle,
          "it is in the app's sealed bundle, which is stored on the first backup and again only when it changes (after an update)",
          nil
        )
      }
      return (.tmp, "tmp is never backed up (the system empties it when the app is not running)", nil)
    }
    if top == "Library", components.count > 1,
      components[1].withUnsafeBytes({ rules.skips($0, inRoot: false, inTopLibrary: true) })
    {
      return (.caches, "Library/Caches is never backed up (it holds data the app can regenerate)", nil)
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
          "it carries the exclude-from-backup mark, so backups record its name and metadata but never its content, and a restore removes it",
          path
        )
      }
      if let status = live.status, status.type == .fifo || status.type == .socket {
        return (
          .withoutContent, "it is a \(typeName(status.type)): backups record it, but it has no content", nil
        )
      }
    }
    // Gone from the home (a restore drops marked files), or not installed: as last recorded.
    if live?.status == nil, let recorded, recorded.isExcluded {
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

  func prefix(_ depth: Int) -> [UInt8] {
    Array(components.prefix(depth).joined(separator: [UInt8(ascii: "/")]))
  }
}
