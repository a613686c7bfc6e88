// `why`, question 2: what the next backup will do with the path, decided as the engine
// decides it: the parent snapshot the engine would pick (the app's latest from this device),
// then `ChangeDetector.changes` between the live stat and the parent's record, naming the
// fields that differ. For a folder, every file beneath it is surveyed the same way.

import AppboxContainer
import AppboxCore
import AppboxRepository
import Foundation

extension PathExplainer {
  func predict(rule: WhyReport.Rule, live: LiveState?, recorded: Recorded, bundleName: String) throws
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
    default: break
    }
    // The backup's own check before it reads anything: a locked device with protected data
    // in the home refuses the whole backup, whatever this path is.
    if let refusal = lockedRefusal(installed.session, installed.app) {
      return next(.fail, "the next backup refuses to start (exit 69): \(refusal)")
    }
    switch rule {
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
          status.size >= ChunkingParameters.threshold && !changes.contains(.type)
          ? "read, and only its chunks the repository lacks are stored (it is chunked: an edit in place costs the chunks it touched)"
          : status.size > Int64(ContentReader.wholeReadLimit)
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
  func survey(_ installed: (session: DeviceSession, app: AppRecord), recorded: Recorded) throws
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
    if survey.isPartial { text += " (not counting folders that could not be opened)" }
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
}
