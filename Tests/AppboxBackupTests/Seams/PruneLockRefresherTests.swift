// The prune lock's refresher (Repository/PruneLock.swift) is joined before the lock object is
// deleted: a rewrite in flight when the lock is released lands before the delete, so no
// refresh brings a released lock back (it would hold off every other prune for the stale
// time). A store in memory holds the first rewrite at a gate until the test opens it, while
// the release runs.

import AppboxCore
import AppboxPipeline
import Foundation
import Glibc
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

/// A store in memory whose lock rewrites wait at a gate: the test sees one arrive, then lets
/// it through.
private final class GatedStore: ObjectStore {
  private struct Gate {
    var held = 0
    var open = false
  }
  let inner: MemoryObjectStore
  private let gate = Monitor(Gate())

  init(_ inner: MemoryObjectStore) { self.inner = inner }

  var location: String { inner.location }
  var isShared: Bool { inner.isShared }
  var now: Date { inner.now }
  func list(_ directory: String) throws -> [StoredObject] { try inner.list(directory) }
  func get(_ name: String) throws -> [UInt8]? { try inner.get(name) }
  func put(_ name: String, _ bytes: [UInt8]) throws {
    if name.hasPrefix("locks/"), String(decoding: bytes, as: UTF8.self).contains("refreshed") {
      let gate = self.gate
      gate.withLock { state in
        state.held += 1
        gate.broadcast()
      }
      gate.withLock(waitingWhile: { !$0.open }) { _ in }
    }
    try inner.put(name, bytes)
  }
  func putAll(_ objects: [(name: String, bytes: [UInt8])]) throws { try inner.putAll(objects) }
  func delete(_ names: [String]) throws { try inner.delete(names) }
  func size(of name: String) throws -> Int64? { try inner.size(of: name) }
  func upload(_ name: String) throws -> ObjectUpload { try inner.upload(name) }
  func reader(_ name: String, size: Int64) throws -> ObjectReader { try inner.reader(name, size: size) }
  func create() throws { try inner.create() }
  func exists() throws -> Bool { try inner.exists() }

  /// Waits (up to `seconds`) until a rewrite is held at the gate.
  func waitForHeldRewrite(seconds: Double) -> Bool {
    gate.withLock(waitingWhile: { $0.held == 0 }, timeout: seconds) { state, _ in state.held > 0 }
  }

  func openGate() {
    let gate = self.gate
    gate.withLock { state in
      state.open = true
      gate.broadcast()
    }
  }
}

struct PruneLockRefresherTests {
  @Test func releaseJoinsTheRefresherSoARewriteInFlightCannotBringTheLockBack() throws {
    let memory = MemoryObjectStore(location: "memory:prune-lock", isShared: true)
    try memory.create()
    let store = GatedStore(memory)
    // Stale after 0.4 s: a rewrite every 0.1 s; no settle wait.
    let environment = ["APPBOX_S3_LOCK_SETTLE": "0", "APPBOX_S3_LOCK_STALE": "0.4"]
    let lock = try PruneLock.acquire(store: store, environment: environment, path: "memory:", purpose: "forget")
    let key = "locks/" + lock.name
    #expect(try memory.list("locks").map(\.name) == [lock.name])
    #expect(store.waitForHeldRewrite(seconds: 30), "no rewrite came")
    // Release while the rewrite is in flight; let the rewrite through once the release had
    // time to delete the object.
    let releaser = WorkerThread(name: "test-release") { lock.release() }
    usleep(300_000)
    store.openGate()
    try releaser.join()
    // Released: nothing the refresher does can write the object any more.
    #expect(try memory.get(key) == nil, "a rewrite after the release brought the lock back")
    usleep(300_000)
    #expect(try memory.get(key) == nil)
    #expect(try memory.list("locks").isEmpty)
  }
}
