// A thread running one closure, joined for what it returned or threw. The body is `sending`
// (not `@Sendable`): it may take non-Sendable values along (a reader, an upload, a C handle),
// which the caller then no longer touches, and `join()` hands its result back the same way.

import Foundation
import Glibc

/// A thread running one closure; `join()` waits for it and returns its result or rethrows its
/// error. Joining again returns the same (a result is handed out once: later joins get nil,
/// see `join()`).
public final class WorkerThread<Result>: Sendable {
  private struct Outcome {
    var done = false
    var value: Result?
    var failure: (any Error)?
  }
  private let outcome = Monitor(Outcome())

  /// Starts `body` on a thread named `name` with a 1 MiB stack.
  public init(name: String, _ body: sending @escaping () throws -> sending Result) {
    let outcome = self.outcome
    let start = ThreadStart(name: name) {
      let ending: Outcome
      do { ending = Outcome(done: true, value: try body()) } catch { ending = Outcome(done: true, failure: error) }
      outcome.withLock(handing: ending) { state, ending in
        state = ending
        outcome.broadcast()
      }
    }
    start.launch()
  }

  /// Waits for the thread to finish; returns what the body returned (once: nil on later
  /// joins) or rethrows its error (on every join).
  @discardableResult
  public func join() throws -> sending Result? {
    let (value, failure) = outcome.withLock(waitingWhile: { !$0.done }) { state in
      defer { state.value = nil }
      return (state.value, state.failure)
    }
    if let failure { throw failure }
    return value
  }
}

extension WorkerThread where Result == Void {
  /// Waits for the thread to finish; rethrows its error.
  public func join() throws {
    let _: Void? = try join()
  }
}

/// The closure a new pthread runs, kept alive across `pthread_create` by an unmanaged
/// reference: the one place a closure crosses to another thread unchecked, which is sound
/// because the closure was `sending` and only the new thread calls it.
private final class ThreadStart {
  let name: String
  let body: () -> Void
  init(name: String, _ body: @escaping () -> Void) {
    self.name = name
    self.body = body
  }

  func launch() {
    var attributes = pthread_attr_t()
    pthread_attr_init(&attributes)
    defer { pthread_attr_destroy(&attributes) }
    pthread_attr_setstacksize(&attributes, 1 << 20)
    var thread = pthread_t()
    let context = Unmanaged.passRetained(self).toOpaque()
    let status = pthread_create(
      &thread, &attributes,
      { context in
        let start = Unmanaged<ThreadStart>.fromOpaque(context!).takeRetainedValue()
        Thread.current.name = start.name
        start.body()
        return nil
      }, context)
    guard status == 0 else {
      Unmanaged<ThreadStart>.fromOpaque(context).release()
      fatalError("pthread_create failed (\(status)): no thread for \(name)")
    }
    pthread_detach(thread)
  }
}
