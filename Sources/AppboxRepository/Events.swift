// Engines never print: they report these events to an injected observer. The CLI renders
// them (a progress bar on a terminal, warnings as lines); tests collect them.

import AppboxCore
import Synchronization

/// Something an engine reports while it works.
public enum EngineEvent: Sendable, Equatable {
  /// An operation on an app began ("backup", "restore", "export", "import", "forget", "check").
  case started(operation: String, app: String?)
  /// The scan finished: entries seen, and how many files and bytes must be read or written.
  case planned(entries: Int, files: Int, bytes: Int64)
  /// Files and bytes done so far (cumulative since `planned`).
  case progress(files: Int, bytes: Int64)
  /// Something the user should know that does not stop the operation.
  case warning(path: String?, message: String)
  /// A named stage began ("archive", "sync", "commit"): for timing traces.
  case stage(String)
  /// A phase people are shown began (progress bars name it). Phases are coarser than stages.
  case phase(Phase)
  /// The operation completed.
  case finished(operation: String, app: String?)
}

/// The phases of an operation, in the order they come, as progress displays name them.
/// backup: scanning, archiving, committing; restore: planning, writing, verifying,
/// installing (the bundle, when the app was absent), swapping (making the new data durable
/// and putting it in place); export: scanning, writing; import: checking, writing, swapping;
/// check: verifying.
public enum Phase: String, Sendable, Equatable, CaseIterable {
  case scanning, archiving, committing, planning, checking, writing, verifying, installing, swapping
}

/// Receives engine events. Called from the engine's threads (one at a time per engine run),
/// so implementations must be cheap and thread-safe.
public protocol EngineObserver: AnyObject, Sendable {
  func engine(_ event: EngineEvent)
}

/// An observer that ignores everything.
public final class SilentObserver: EngineObserver {
  public init() {}
  public func engine(_ event: EngineEvent) {}
}

/// An observer that keeps every event, for tests and for summaries.
public final class RecordingObserver: EngineObserver, Sendable {
  private let stored = Mutex<[EngineEvent]>([])
  public init() {}
  public func engine(_ event: EngineEvent) { stored.withLock { $0.append(event) } }
  public var events: [EngineEvent] { stored.withLock { $0 } }
  public var warnings: [String] {
    events.compactMap { if case .warning(_, let message) = $0 { return message } else { return nil } }
  }
}
