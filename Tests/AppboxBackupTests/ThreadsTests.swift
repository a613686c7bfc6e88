import Foundation
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

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
    let thread = WorkerThread(name: "test-fails") { throw BackupError(.invalidRequest, "boom") }
    #expect(throws: BackupError.self) { try thread.join() }
  }
}
