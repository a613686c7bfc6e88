import Foundation
import Testing

import AppboxPipeline

private struct Boom: Error {}

struct ThreadsTests {
  @Test func theQueueDeliversEverythingInOrderWithinItsCapacity() throws {
    let queue = HandoffQueue<Int>(capacity: 10)
    let producer = WorkerThread(name: "test-producer") {
      for value in 0..<10_000 { queue.push(value, cost: 1 + value % 5) }
      queue.close()
    }
    var received: [Int] = []
    while let value = queue.pop() { received.append(value) }
    try producer.join()
    #expect(received == Array(0..<10_000))
  }

  @Test func cancellingStopsTheProducerAndHandsBackWhatWasPending() throws {
    let queue = HandoffQueue<Int>(capacity: 4)
    nonisolated(unsafe) var accepted = 0
    let producer = WorkerThread(name: "test-producer") {
      var value = 0
      while queue.push(value) {
        accepted += 1
        value += 1
      }
    }
    #expect(queue.pop() == 0)
    // Wait until the producer has (nearly) filled the queue and blocks on its capacity.
    let deadline = Date().addingTimeInterval(10)
    while queue.pendingCount < 3 && Date() < deadline { usleep(1000) }
    #expect(queue.pendingCount >= 3)
    nonisolated(unsafe) var discarded: [Int] = []
    queue.cancel { discarded.append($0) }
    try producer.join()
    #expect(queue.pop() == nil)
    // Nothing accepted is lost: value 0 was delivered, every other accepted value was handed
    // back in order, and the push blocked on the full queue returned false (not accepted).
    #expect(discarded.count >= 3)
    #expect(discarded == Array(1..<accepted))
  }

  @Test func aWorkerThreadRethrowsOnJoin() {
    let thread = WorkerThread(name: "test-fails") { throw Boom() }
    #expect(throws: Boom.self) { try thread.join() }
  }
}

struct MonitorTests {
  @Test func aTimedWaitEndsAtItsTimeoutAndSaysSo() {
    let monitor = Monitor(false)
    let start = ContinuousClock.now
    let (flag, timedOut) = monitor.withLock(waitingWhile: { !$0 }, timeout: 0.2) { ($0, $1) }
    let waited = ContinuousClock.now - start
    #expect(!flag && timedOut)
    #expect(waited >= .milliseconds(190) && waited < .seconds(5))
  }

  @Test func aTimedWaitEndsAtABroadcast() throws {
    let monitor = Monitor(false)
    let setter = WorkerThread(name: "test-setter") {
      usleep(50_000)
      monitor.withLock { state in
        state = true
        monitor.broadcast()
      }
    }
    let start = ContinuousClock.now
    let (flag, timedOut) = monitor.withLock(waitingWhile: { !$0 }, timeout: 60) { ($0, $1) }
    #expect(flag && !timedOut)
    #expect(ContinuousClock.now - start < .seconds(30))
    try setter.join()
  }

  @Test func nanZeroAndNegativeTimeoutsDoNotWaitAndHugeOnesDoNotTrap() throws {
    let monitor = Monitor(0)
    for timeout in [Double.nan, 0, -1, -Double.infinity] {
      #expect(monitor.withLock(waitingWhile: { $0 == 0 }, timeout: timeout) { $1 })
    }
    // An infinite or huge timeout waits without a limit: it ends at the broadcast.
    for timeout in [Double.infinity, 1e300, Double.greatestFiniteMagnitude] {
      let setter = WorkerThread(name: "test-setter") {
        usleep(20_000)
        monitor.withLock { state in
          state += 1
          monitor.broadcast()
        }
      }
      let before = monitor.withLock { $0 }
      #expect(!monitor.withLock(waitingWhile: { $0 == before }, timeout: timeout) { $1 })
      try setter.join()
    }
  }
}

struct CancellationTokenTests {
  @Test func cancelWakesASleeperAtOnceAndKeepsTheFirstReason() throws {
    let token = CancellationToken()
    let sleeper = WorkerThread(name: "test-sleeper") { () -> Bool in token.sleep(seconds: 600) }
    usleep(20_000)
    let start = ContinuousClock.now
    token.cancel(Boom())
    token.cancel(CancellationError())
    #expect(try sleeper.join() == true)
    #expect(ContinuousClock.now - start < .seconds(30))
    #expect(token.isCancelled)
    #expect(token.reason is Boom)
    #expect(token.sleep(seconds: .infinity))
  }

  @Test func anUncancelledSleepRunsItsTime() {
    let token = CancellationToken()
    #expect(!token.sleep(seconds: 0.05))
    #expect(!token.sleep(seconds: .nan))
    #expect(!token.isCancelled)
  }
}

struct WorkerThreadTests {
  /// Not Sendable: it crosses to the thread and back only as a `sending` value.
  final class Tally { var count = 0 }

  @Test func aThreadHandsBackWhatItMadeOnce() throws {
    let tally = Tally()
    let thread = WorkerThread(name: "test-tally") { () -> Tally in
      tally.count = 41
      let made = Tally()
      made.count = tally.count + 1
      return made
    }
    #expect(try thread.join()?.count == 42)
    #expect(try thread.join() == nil)
  }
}

struct BufferPoolTests {
  @Test func aSharedBufferIsFreeOnlyAfterEveryHolderGaveItBack() throws {
    let pool = BufferPool(count: 1, bufferSize: 64)
    let buffer = pool.take()
    pool.share(buffer)
    pool.give(buffer)
    #expect(!pool.isMostlyFree)
    let waiter = WorkerThread(name: "test-taker") { () -> Int in pool.take().count }
    usleep(20_000)
    pool.give(buffer)
    #expect(try waiter.join() == 64)
    #expect(pool.isMostlyFree == false)
  }
}
