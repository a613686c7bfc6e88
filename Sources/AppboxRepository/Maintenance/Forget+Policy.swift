// `forget` by retention policy: the decisions come from RetentionPolicy (a pure function of
// the snapshots), the dropping and reclaiming from Forgetter.swift, unchanged.
//
// The decisions are made on the app's snapshots as the catalog holds them once `forget` holds
// its locks and has synced (so a snapshot another device committed meanwhile is decided on
// too); a dry run makes them on the catalog as opened, takes no exclusive lock and changes
// nothing.

import Foundation

/// What `forget` with a policy decided, and (unless it was a dry run) what it did.
public struct PolicyForgetReport: Sendable {
  /// Every snapshot of the app, newest first, with whether it stays and why.
  public var decisions: [RetentionDecision]
  /// nil for a dry run.
  public var report: ForgetReport?
}

extension Repository {
  /// Applies `policy` to `app`'s snapshots: with `dryRun`, only says what would go and stay.
  public func forget(
    app: String, policy: RetentionPolicy, dryRun: Bool, observer: EngineObserver = SilentObserver()
  ) throws -> PolicyForgetReport {
    guard !policy.isEmpty else {
      throw RepositoryError(
        .invalidRequest,
        "give a policy: --keep-last, --keep-hourly, --keep-daily, --keep-weekly, --keep-monthly, "
          + "--keep-yearly N, --keep-within DURATION or --keep-tag T")
    }
    if dryRun {
      return PolicyForgetReport(decisions: policy.apply(to: try catalog.snapshots(app: app)), report: nil)
    }
    var decisions: [RetentionDecision] = []
    let report = try forget(app: app, observer: observer) { history in
      decisions = policy.apply(to: history)
      let removed = Set(decisions.filter { !$0.keep }.map(\.snapshot.id))
      return (history.filter { removed.contains($0.id) }, history.filter { !removed.contains($0.id) })
    }
    return PolicyForgetReport(decisions: decisions, report: report)
  }
}
