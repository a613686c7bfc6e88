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
// Releasing (or letting go of the lock) stops the refresher and joins it before deleting the
// object: a rewrite in flight then lands before the delete, never after it (a late rewrite
// would bring the lock back, holding off every other prune for the stale time).
// Backups take no lock: what keeps them safe from a concurrent prune is the grace period
// (Forgetter.swift).

import AppboxCore
import AppboxPipeline
import Foundation
import Glibc
import Synchronization

package final class PruneLock: Sendable {
  private let store: any ObjectStore
  let name: String
  /// For messages: the repository's path.
  private let path: String
  /// Raised to stop the refresher, which sleeps on it between rewrites.
  private let stopping = CancellationToken()
  private let refresher: WorkerThread<Void>
  /// Why a rewrite failed, once one did.
  private let refreshFailure = Monitor<(any Error)?>(nil)
  private let released = Mutex(false)

  static func settleTime(_ environment: [String: String]) -> TimeInterval {
    environment["APPBOX_S3_LOCK_SETTLE"].flatMap(Double.init) ?? 1
  }

  static func staleAfter(_ environment: [String: String]) -> TimeInterval {
    environment["APPBOX_S3_LOCK_STALE"].flatMap(Double.init) ?? 600
  }

  /// Holds `name` (written and won) and starts rewriting it every stale/4 seconds.
  private init(store: any ObjectStore, path: String, name: String, environment: [String: String]) {
    self.store = store
    self.path = path
    self.name = name
    let stale = Self.staleAfter(environment)
    let interval = stale > 0 ? stale / 4 : 150  // NaN: the default's
    let key = "locks/" + name
    let stopping = self.stopping
    let refreshFailure = self.refreshFailure
    refresher = WorkerThread(name: "appbox-prune-lock") {
      while !stopping.sleep(seconds: interval) {
        do {
          try store.put(key, try PruneLock.ownerRecord(purpose: "forget (refreshed)"))
        } catch {
          refreshFailure.withLock { $0 = error }
          return
        }
      }
    }
  }

  deinit { release() }

  /// Stops and joins the refresher, then deletes the lock object (best effort). Releasing
  /// again does nothing.
  func release() {
    guard
      released.withLock({ released in
        defer { released = true }
        return !released
      })
    else { return }
    stopping.cancel()
    try? refresher.join()
    try? store.delete(["locks/" + name])
  }

  /// Takes the prune lock of `repository` (see the top of this file).
  static func acquire(in repository: Repository, purpose: String) throws -> PruneLock {
    try acquire(
      store: repository.store, environment: repository.environment, lockWait: repository.lockWait,
      path: repository.path, purpose: purpose)
  }

  /// Takes the prune lock in `store` (`path` names the repository in messages).
  static func acquire(
    store: any ObjectStore, environment: [String: String], lockWait: LockWait = .none, path: String,
    purpose: String
  ) throws -> PruneLock {
    let deadline = Date().addingTimeInterval(
      TimeInterval(lockWait.atLeast(.seconds(5)).components.seconds))
    var attempt = 0
    while true {
      attempt += 1
      let name = Repository.randomID(16)
      let body = try ownerRecord(purpose: purpose)
      try store.put("locks/" + name, body)
      pause(settleTime(environment))
      let holder = try winner(in: store, environment: environment, mine: name)
      if holder == nil || holder == name {
        return PruneLock(store: store, path: path, name: name, environment: environment)
      }
      try? store.delete(["locks/" + name])
      guard Date() < deadline else {
        let owner = (try? store.get("locks/" + holder!)).flatMap {
          String(bytes: $0, encoding: .utf8)
        }
        throw RepositoryError(
          .busy,
          "Repository '\(path)' is busy: another forget holds its lock (locks/\(holder!)"
            + (owner.map { ": \($0.trimmingCharacters(in: .whitespacesAndNewlines))" } ?? "") + "); try again"
        )
      }
      pause(min(2.0, 0.2 * Double(attempt)))
    }
  }

  /// Sleeps `seconds`; NaN or not positive: not at all, and at most an hour (no trap on
  /// `inf` or huge values from the environment).
  private static func pause(_ seconds: TimeInterval) {
    guard seconds > 0 else { return }
    usleep(useconds_t(min(seconds, 3600) * 1_000_000))
  }

  /// The live lock that wins: the oldest by the store's time, then by name. Stale locks are
  /// deleted on the way. nil when even ours is not listed yet (then it wins once it is).
  private static func winner(
    in store: any ObjectStore, environment: [String: String], mine: String
  ) throws -> String? {
    var locks = try store.list("locks")
    let now = store.now
    let stale = try locks.filter { lock in
      if now.timeIntervalSince(lock.modified) > staleAfter(environment) { return true }
      guard lock.name != mine, let body = try store.get("locks/" + lock.name) else { return false }
      return isDeadLocalProcess(body)
    }
    if !stale.isEmpty {
      try store.delete(stale.map { "locks/" + $0.name })
      locks.removeAll { lock in stale.contains { $0.name == lock.name } }
    }
    guard locks.contains(where: { $0.name == mine }) else {
      // Not listed yet: list again after the settle time before deciding.
      pause(settleTime(environment))
      let again = try store.list("locks").filter { lock in !stale.contains { $0.name == lock.name }
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
    return host == localHostName() && kill(pid_t(pid), 0) != 0 && errno == ESRCH
  }

  /// This machine's name. Uses `gethostname(2)`.
  private static func localHostName() -> String {
    var name = [CChar](repeating: 0, count: 256)
    gethostname(&name, name.count - 1)
    return String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
  }

  private static func ownerRecord(purpose: String) throws -> [UInt8] {
    let object: [String: Any] = [
      "host": localHostName(), "pid": Int(getpid()), "purpose": purpose,
      "created": ISO8601DateFormatter().string(from: Date()),
    ]
    return Array(try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]))
  }

  /// Throws when the lock could not be kept fresh (then another prune may have taken it).
  func verify() throws {
    if let error = refreshFailure.withLock({ $0 }) {
      throw RepositoryError(
        .busy,
        "The prune lock of '\(path)' could not be refreshed (\(error)); stopping before deleting anything"
      )
    }
  }
}
