// `why`, question 3: the path's history. PathResolver finds it in every snapshot of the app
// (so a deleted path is answered: when it was last recorded); over the last N it counts the
// backups in which its entry changed (a folder: anything under it, through TreeComparer) and
// attributes bytes as `advise` does. Then the whole answer as one paragraph.

import AppboxCore
import AppboxRepository
import Foundation

extension PathExplainer {
  func readHistory() throws -> Recorded {
    guard let repository else { return Recorded(snapshots: [], records: []) }
    return try repository.catalog.reading {
      let snapshots = try repository.catalog.snapshots(app: bundleIdentifier)
      let resolver = PathResolver(trees: TreeReader(catalog: repository.catalog), components: components)
      return Recorded(
        snapshots: snapshots, records: try snapshots.map { try resolver.record(inRoot: $0.rootTree) })
    }
  }

  func summarize(_ recorded: Recorded) throws -> WhyReport.History {
    let snapshots = recorded.snapshots
    let records = recorded.records
    let first = max(0, snapshots.count - last)
    var history = WhyReport.History(
      snapshots: snapshots.count - first, backups: 0, present: 0, changes: 0, bytesAdded: 0,
      bytesPerBackup: 0,
      firstSeen: nil, lastSeen: nil, lastSeenTime: nil, lastChanged: nil, isGone: false,
      lastUnreadable: snapshots[first...].last { wasUnreadable(path, in: $0) }?.id)
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

  func latestSeenType(_ recorded: Recorded) -> String? {
    recorded.records.last { $0.facts != nil }?.facts.map { typeName($0.type) }
  }

  // MARK: The paragraph

  func paragraph(_ report: WhyReport) -> String {
    let name = "'\(printablePath(path))'"
    var sentences: [String] = []
    let verdict: String
    switch report.rule {
    case .caches, .tmp, .excludedAncestor, .symlinkAncestor, .excluded: verdict = "is not backed up"
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
      if let unreadable = history.lastUnreadable {
        sentences.append("Snapshot \(unreadable) could not read it.")
      }
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
package func dayAndTime(_ date: Date) -> String {
  let formatter = DateFormatter()
  formatter.locale = Locale(identifier: "en_US_POSIX")
  formatter.timeZone = TimeZone(identifier: "UTC")
  formatter.dateFormat = "yyyy-MM-dd HH:mm:ss 'UTC'"
  return formatter.string(from: date)
}
