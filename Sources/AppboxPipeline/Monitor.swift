// AppboxPipeline: the threading tools of appbox's pipelines (the backup and restore engines,
// the S3 streaming upload, sealing, the prune lock's refresher): a monitor that holds the state
// it guards, a thread one joins, a bounded hand-off queue, a pool of buffers and a
// cancellation token. Stages run on plain threads, not Swift concurrency: each is a tight loop
// of blocking system calls, and each C handle (SQLite connection, libarchive object, hash
// context, curl handle) must stay on one thread.
//
// Owns: how threads meet (locking, waiting, handing values over, stopping). Imports the system
// only (AppboxCore at most); it must not import storage, engines, crypto or any C library
// module, so that every module with a pipeline (S3, storage, the engines) can sit on it.
//
// Every type here is checked `Sendable` with its state behind a `Monitor` or a `Mutex`, save
// the Monitor itself (see below). Non-Sendable values cross threads only as `sending` values
// (Swift 6 region isolation): the queue's `push`, the thread's body and its result.

import Glibc

/// A pthread mutex and condition variable with the state they guard (a monitor, as
/// `Synchronization.Mutex` is a mutex with its value). The state is reached only inside
/// `withLock`, whose body may first wait: `waitingWhile` is asked (with the lock held) whether
/// to wait, and the thread sleeps on the condition until a `broadcast()` (or the timeout) and
/// asks again. Each question and the body are accesses of their own, so no access to the state
/// spans a wait.
///
/// `@unchecked Sendable`, the one in this module, for a documented reason: the pthread objects
/// live in memory of their own (allocated once, never moved: a pthread_mutex_t must keep its
/// address, which a stored property passed with `&` does not promise), and Swift cannot check
/// raw pointers. The state behind them is reached only with the mutex held, and enters and
/// leaves as `sending` values, as with `Mutex`.
public final class Monitor<State>: @unchecked Sendable {
  private let mutex: UnsafeMutablePointer<pthread_mutex_t>
  private let condition: UnsafeMutablePointer<pthread_cond_t>
  private let state: UnsafeMutablePointer<State>

  public init(_ initial: sending State) {
    mutex = .allocate(capacity: 1)
    mutex.initialize(to: pthread_mutex_t())
    condition = .allocate(capacity: 1)
    condition.initialize(to: pthread_cond_t())
    state = .allocate(capacity: 1)
    state.initialize(to: initial)
    pthread_mutex_init(mutex, nil)
    // Timed waits count on the monotonic clock: setting the wall clock does not move them.
    var attributes = pthread_condattr_t()
    pthread_condattr_init(&attributes)
    pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
    pthread_cond_init(condition, &attributes)
    pthread_condattr_destroy(&attributes)
  }

  deinit {
    pthread_cond_destroy(condition)
    pthread_mutex_destroy(mutex)
    state.deinitialize(count: 1)
    state.deallocate()
    condition.deinitialize(count: 1)
    condition.deallocate()
    mutex.deinitialize(count: 1)
    mutex.deallocate()
  }

  /// Runs `body` on the state with the lock held.
  public func withLock<Result, Failure: Error>(
    _ body: (inout sending State) throws(Failure) -> sending Result
  ) throws(Failure) -> sending Result {
    pthread_mutex_lock(mutex)
    defer { pthread_mutex_unlock(mutex) }
    return try body(&state.pointee)
  }

  /// Waits (lock released) while `blocked` says so, then runs `body` with the lock held.
  /// `blocked` may change the state (mark a waiter, say) and `broadcast()`.
  public func withLock<Result, Failure: Error>(
    waitingWhile blocked: (inout sending State) -> Bool,
    _ body: (inout sending State) throws(Failure) -> sending Result
  ) throws(Failure) -> sending Result {
    pthread_mutex_lock(mutex)
    defer { pthread_mutex_unlock(mutex) }
    while blocked(&state.pointee) { pthread_cond_wait(condition, mutex) }
    return try body(&state.pointee)
  }

  /// As `withLock(_:)`, handing `value` to `body` (to be stored in the state, say): a
  /// `sending` value a closure captured would count as the caller's, passed it stays its own.
  public func withLock<Value, Result, Failure: Error>(
    handing value: sending Value,
    _ body: (inout sending State, sending Value) throws(Failure) -> sending Result
  ) throws(Failure) -> sending Result {
    pthread_mutex_lock(mutex)
    defer { pthread_mutex_unlock(mutex) }
    return try body(&state.pointee, value)
  }

  /// As `withLock(waitingWhile:_:)`, handing `value` to `body` once the wait is over.
  public func withLock<Value, Result, Failure: Error>(
    handing value: sending Value, waitingWhile blocked: (inout sending State) -> Bool,
    _ body: (inout sending State, sending Value) throws(Failure) -> sending Result
  ) throws(Failure) -> sending Result {
    pthread_mutex_lock(mutex)
    defer { pthread_mutex_unlock(mutex) }
    while blocked(&state.pointee) { pthread_cond_wait(condition, mutex) }
    return try body(&state.pointee, value)
  }

  /// As `withLock(waitingWhile:_:)`, waiting at most `timeout` seconds in all; `body` learns
  /// whether the time ran out (then `blocked` may still hold). A timeout that is NaN or not
  /// positive waits not at all; an infinite or huge one (past a year) waits without a limit.
  public func withLock<Result, Failure: Error>(
    waitingWhile blocked: (inout sending State) -> Bool, timeout: Double,
    _ body: (inout sending State, _ timedOut: Bool) throws(Failure) -> sending Result
  ) throws(Failure) -> sending Result {
    let deadline = Self.deadline(after: timeout)
    pthread_mutex_lock(mutex)
    defer { pthread_mutex_unlock(mutex) }
    var timedOut = false
    while blocked(&state.pointee) {
      guard var deadline else {
        pthread_cond_wait(condition, mutex)
        continue
      }
      if pthread_cond_timedwait(condition, mutex, &deadline) == ETIMEDOUT {
        timedOut = blocked(&state.pointee)
        break
      }
    }
    return try body(&state.pointee, timedOut)
  }

  /// Wakes every waiter. Call with the lock held (inside `withLock` or `blocked`).
  public func broadcast() { pthread_cond_broadcast(condition) }

  /// The monotonic time `seconds` from now; nil for no limit.
  private static func deadline(after seconds: Double) -> timespec? {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    guard seconds > 0 else { return now }  // also NaN
    guard seconds < 365 * 86_400 else { return nil }  // also inf
    let whole = Int(seconds)
    var nanoseconds = now.tv_nsec + Int((seconds - Double(whole)) * 1e9)
    var secondsPart = now.tv_sec + whole
    if nanoseconds >= 1_000_000_000 {
      nanoseconds -= 1_000_000_000
      secondsPart += 1
    }
    return timespec(tv_sec: secondsPart, tv_nsec: nanoseconds)
  }
}

extension Monitor where State == Void {
  /// A monitor guarding no state of its own (a lock and a condition).
  public convenience init() { self.init(()) }
}

extension Monitor where State == Void {
  // For owners that keep the guarded state in properties of their own (and so are
  // `@unchecked Sendable` themselves): lock, wait, broadcast, as with a bare pthread monitor.

  /// Runs `body` with the lock held.
  public func withLock<Result, Failure: Error>(_ body: () throws(Failure) -> Result) throws(Failure) -> Result {
    pthread_mutex_lock(mutex)
    defer { pthread_mutex_unlock(mutex) }
    return try body()
  }

  /// Waits for a broadcast; call with the lock held (inside `withLock`).
  public func wait() { pthread_cond_wait(condition, mutex) }
}
