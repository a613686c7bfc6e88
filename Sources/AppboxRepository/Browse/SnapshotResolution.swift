// Naming a snapshot: everywhere a command takes a snapshot id it accepts the whole id, a
// unique prefix of it (at least `minimumPrefix` hex digits, as restic and git do), or `latest`
// (the newest snapshot of the app the command names).
//
// Algorithm: `latest` is the app's last snapshot in commit order (Catalog.snapshots). Anything
// else is lowercased; an exact id wins; otherwise every snapshot (of the app, when one is
// given) whose id starts with the text is a candidate. One candidate is the answer; none is
// "no such snapshot" (66, or 65 when the id names a snapshot whose manifest is damaged);
// several is a usage error (64) that lists each candidate with its app and time, so the user
// can type one more digit. Text that is not hex, or shorter than the minimum without being a
// whole id, is never a prefix.

import Foundation

extension Repository {
  /// How many hex digits a prefix needs at least.
  public static let minimumSnapshotPrefix = 4

  /// The snapshot `text` names: an id, a unique prefix of one (of `app`'s snapshots when `app`
  /// is given) or `latest` (which needs `app`). Unknown: `.notFound`; ambiguous or too
  /// short: `.invalidRequest`, naming the candidates.
  public func resolveSnapshot(_ text: String, app: String? = nil) throws -> Snapshot {
    if text == "latest" {
      guard let app else {
        throw RepositoryError(.invalidRequest, "'latest' needs an app (give --app APP)")
      }
      guard let last = try catalog.snapshots(app: app).last else {
        throw RepositoryError(.notFound, "No snapshots of '\(app)' in '\(path)'")
      }
      return last
    }
    let id = text.lowercased()
    if let exact = try catalog.snapshot(id: id), app.map({ $0 == exact.app }) ?? true { return exact }
    let isHex = !id.isEmpty && id.allSatisfy { $0.isHexDigit }
    if isHex && id.count < Self.minimumSnapshotPrefix {
      throw RepositoryError(
        .invalidRequest,
        "Snapshot id '\(text)' is too short: give at least \(Self.minimumSnapshotPrefix) hex digits")
    }
    let candidates = isHex ? try catalog.snapshots(app: app).filter { $0.id.hasPrefix(id) } : []
    if candidates.count == 1 { return candidates[0] }
    if candidates.count > 1 {
      let listed = candidates.map { "\($0.id) (\($0.app), \(Self.isoTime($0.time)))" }
      throw RepositoryError(
        .invalidRequest,
        "Snapshot prefix '\(text)' is ambiguous: it matches \(listed.joined(separator: ", "))")
    }
    if let unlisted = damage.unlisted.first(where: { $0.id == id || (isHex && $0.id.hasPrefix(id)) }) {
      throw RepositoryError(
        .corruptArchive,
        "Snapshot \(unlisted.id) cannot be restored: the manifest of its archive '\(unlisted.archive)' is damaged"
      )
    }
    throw RepositoryError(
      .notFound, "No snapshot '\(text)'\(app.map { " of '\($0)'" } ?? "") in '\(path)'")
  }

  static func isoTime(_ date: Date) -> String {
    let formatter = ISO8601DateFormatter()
    formatter.timeZone = TimeZone(identifier: "UTC")
    return formatter.string(from: date)
  }
}
