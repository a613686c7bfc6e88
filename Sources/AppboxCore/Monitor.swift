import Glibc

/// A pthread mutex with one condition variable (a monitor). The pthread objects live in memory
/// of their own (allocated once, never moved): a pthread_mutex_t must keep its address while
/// in use, which a stored property of a class, passed with `&`, does not promise.
public final class Monitor: @unchecked Sendable {
  private let mutex: UnsafeMutablePointer<pthread_mutex_t>
  private let condition: UnsafeMutablePointer<pthread_cond_t>

  public init() {
    mutex = .allocate(capacity: 1)
    mutex.initialize(to: pthread_mutex_t())
    condition = .allocate(capacity: 1)
    condition.initialize(to: pthread_cond_t())
    pthread_mutex_init(mutex, nil)
    pthread_cond_init(condition, nil)
  }

  deinit {
    pthread_cond_destroy(condition)
    pthread_mutex_destroy(mutex)
    condition.deinitialize(count: 1)
    condition.deallocate()
    mutex.deinitialize(count: 1)
    mutex.deallocate()
  }

  public func withLock<T>(_ body: () throws -> T) rethrows -> T {
    pthread_mutex_lock(mutex)
    defer { pthread_mutex_unlock(mutex) }
    return try body()
  }

  /// Waits for a broadcast; call with the lock held (inside `withLock`).
  public func wait() { pthread_cond_wait(condition, mutex) }

  /// Wakes every waiter.
  public func broadcast() { pthread_cond_broadcast(condition) }
}
