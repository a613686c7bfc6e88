// A flag one thread raises to stop others, which they check or sleep on.

/// Cancellation shared between threads: `cancel()` raises it once (with an optional reason),
/// `isCancelled` checks it, and `sleep(seconds:)` waits for it or the time, whichever comes
/// first (a periodic worker's pause that `cancel()` cuts short).
public final class CancellationToken: Sendable {
  private struct State {
    var cancelled = false
    var reason: (any Error)?
  }
  private let monitor = Monitor(State())

  public init() {}

  /// Raises the flag and wakes every sleeper; the first reason given is kept.
  public func cancel(_ reason: (any Error)? = nil) {
    monitor.withLock { state in
      if !state.cancelled { state.reason = reason }
      state.cancelled = true
      monitor.broadcast()
    }
  }

  public var isCancelled: Bool { monitor.withLock { $0.cancelled } }

  /// Why it was cancelled (nil when not, or when no reason was given).
  public var reason: (any Error)? { monitor.withLock { $0.reason } }

  /// Sleeps `seconds` or until cancelled; true when cancelled.
  @discardableResult
  public func sleep(seconds: Double) -> Bool {
    monitor.withLock(waitingWhile: { !$0.cancelled }, timeout: seconds) { state, _ in state.cancelled }
  }
}
