// The one lock of an S3 repository: `forget` prunes alone. S3 (and Swift's s3api, which
// answers 501 to `If-None-Match: *`) offers no atomic create-if-absent, so the lock works as
// restic's lock files do, with the store's clock as referee:
// 1. write `locks/<random id>` (owner host, process, purpose; the store stamps its time);
// 2. wait a moment (`APPBOX_S3_LOCK_SETTLE`, default 1 s) so that a lock written at about the
//    same time by someone else is listed too;
// 3. list `locks/`: locks not refreshed for `APPBOX_S3_LOCK_STALE` seconds (default 600) belong
//    to dead processes and are deleted, and so are locks of this host whose process is gone; among the others the oldest (by the store's time, then
//    by name) wins. A loser deletes its own lock and tries again until `--wait` runs out
//    (at least 5 s), then exits 75 naming the holder.
// Two contenders that both list after both wrote see the same order and agree; one that lists
// before the other's lock is visible wins, and the other then sees it and loses. The holder
// rewrites its lock every stale/4 seconds (new store time), so a long prune is never taken for
// dead; if a rewrite fails, `verify()` (called before each destructive step) stops the prune.
// Backups take no lock: what keeps them safe from a concurrent prune is the grace period
// (Forgetter.swift).

import AppboxCore
import Foundation
import Glibc

package final class PruneLock: @unchecked Sendable {
  private let repository: Repository
  let name: String
  private let mutex = PruneLockState()
  private var thread: Thread?

  static func settleTime(_ environment: [String: String]) -> TimeInterval {
    environment["APPBOX_S3_LOCK_SETTLE"].flatMap(Double.init) ?? 1
  }

  static func staleAfter(_ environment: [String: String]) -> TimeInterval {
    environment["APPBOX_S3_LOCK_STALE"].flatMap(Double.init) ?? 600
  }

  private init(repository: Repository, name: String) {
    self.repository = repository
    self.name = name
  }

  deinit {
    mutex.stop()
    try? repository.store.delete(["locks/" + name])
  }

  /// Takes the prune lock of `repository` (see the top of this file).
  static func acquire(in repository: Repository, purpose: String) throws -> PruneLock {
    let environment = repository.environment
    let deadline = Date().addingTimeInterval(
      TimeInterval(repository.lockWait.atLeast(.seconds(5)).components.seconds))
    var attempt = 0
    while true {
      attempt += 1
      let name = Repository.randomID(16)
      let body = try ownerRecord(purpose: purpose)
      try repository.store.put("locks/" + name, body)
      usleep(useconds_t(settleTime(environment) * 1_000_000))
      let holder = try winner(in: repository, mine: name)
      if holder == nil || holder == name {
        let lock = PruneLock(repository: repository, name: name)
        lock.startRefreshing()
        return lock
      }
      try? repository.store.delete(["locks/" + name])
      guard Date() < deadline else {
        let owner = (try? repository.store.get("locks/" + holder!)).flatMap {
          String(bytes: $0, encoding: .utf8)
        }
        throw RepositoryError(
          .busy,
          "Repository '\(repository.path)' is busy: another forget holds its lock (locks/\(holder!)"
            + (owner.map { ": \($0.trimmingCharacters(in: .whitespacesAndNewlines))" } ?? "") + "); try again"
        )
      }
      usleep(useconds_t(min(2.0, 0.2 * Double(attempt)) * 1_000_000))
    }
  }

  /// The live lock that wins: the oldest by the store's time, then by name. Stale locks are
  /// deleted on the way. nil when even ours is not listed yet (then it wins once it is).
  private static func winner(in repository: Repository, mine: String) throws -> String? {
    var locks = try repository.store.list("locks")
    let now = repository.store.now
    let stale = try locks.filter { lock in
      if now.timeIntervalSince(lock.modified) > staleAfter(repository.environment) { return true }
      guard lock.name != mine, let body = try repository.store.get("locks/" + lock.name) else { return false }
      return isDeadLocalProcess(body)
    }
    if !stale.isEmpty {
      try repository.store.delete(stale.map { "locks/" + $0.name })
      locks.removeAll { lock in stale.contains { $0.name == lock.name } }
    }
    guard locks.contains(where: { $0.name == mine }) else {
      // Not listed yet: list again after the settle time before deciding.
      usleep(useconds_t(settleTime(repository.environment) * 1_000_000))
      let again = try repository.store.list("locks").filter { lock in !stale.contains { $0.name == lock.name }
      }
      guard again.contains(where: { $0.name == mine }) else { return mine }
      return again.min { ($0.modified, $0.name) < ($1.modified, $1.name) }?.name
    }
    return locks.min { ($0.modified, $0.name) < ($1.modified, $1.name) }?.name
  }

  /// Whether a lock record names a process of this host that no longer exists.
  private static func isDeadLocalProcess(_ body: [UInt8]) -> Bool {
    guard let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
      let host = object["host"] as? String, let pid = object["pid"] as? Int
    else { return false }
    var name = [CChar](repeating: 0, count: 256)
    gethostname(&name, name.count)
    return host == String(cString: name) && kill(pid_t(pid), 0) != 0 && errno == ESRCH
  }

  private static func ownerRecord(purpose: String) throws -> [UInt8] {
    var host = [CChar](repeating: 0, count: 256)
    gethostname(&host, host.count)
    let object: [String: Any] = [
      "host": String(cString: host), "pid": Int(getpid()), "purpose": purpose,
      "created": ISO8601DateFormatter().string(from: Date()),
    ]
    return Array(try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]))
  }

  private func startRefreshing() {
    let interval = Self.staleAfter(repository.environment) / 4
    nonisolated(unsafe) let store = repository.store
    let key = "locks/" + name
    let state = mutex
    let thread = Thread {
      while state.wait(seconds: interval) {
        do {
          try store.put(key, try PruneLock.ownerRecord(purpose: "forget (refreshed)"))
        } catch {
          state.fail(error)
          return
        }
      }
    }
    thread.name = "appbox-prune-lock"
    thread.start()
    self.thread = thread
  }

  /// Throws when the lock could not be kept fresh (then another prune may have taken it).
  func verify() throws {
    if let error = mutex.failure {
      throw RepositoryError(
        .busy,
        "The prune lock of '\(repository.path)' could not be refreshed (\(error)); stopping before deleting anything"
      )
    }
  }
}

/// The refresher's stop flag and failure, with a condition to wake it.
private final class PruneLockState: @unchecked Sendable {
  private var stopped = false
  private var error: Error?
  private let storage = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
  private let conditionStorage = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

  init() {
    storage.initialize(to: pthread_mutex_t())
    conditionStorage.initialize(to: pthread_cond_t())
    pthread_mutex_init(storage, nil)
    pthread_cond_init(conditionStorage, nil)
  }

  deinit {
    pthread_cond_destroy(conditionStorage)
    pthread_mutex_destroy(storage)
    storage.deallocate()
    conditionStorage.deallocate()
  }

  /// Waits up to `seconds`; false once stopped.
  func wait(seconds: TimeInterval) -> Bool {
    pthread_mutex_lock(storage)
    defer { pthread_mutex_unlock(storage) }
    if stopped { return false }
    var deadline = timespec()
    clock_gettime(CLOCK_REALTIME, &deadline)
    let total = Double(deadline.tv_sec) + Double(deadline.tv_nsec) / 1e9 + seconds
    deadline.tv_sec = Int(total)
    deadline.tv_nsec = Int((total - Double(Int(total))) * 1e9)
    pthread_cond_timedwait(conditionStorage, storage, &deadline)
    return !stopped
  }

  func stop() {
    pthread_mutex_lock(storage)
    stopped = true
    pthread_cond_broadcast(conditionStorage)
    pthread_mutex_unlock(storage)
  }

  func fail(_ failure: Error) {
    pthread_mutex_lock(storage)
    error = failure
    pthread_mutex_unlock(storage)
  }

  var failure: Error? {
    pthread_mutex_lock(storage)
    defer { pthread_mutex_unlock(storage) }
    return error
  }
}
