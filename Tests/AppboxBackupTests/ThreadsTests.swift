import Foundation
import Testing

@testable import AppboxBackup

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
    let producer = WorkerThread(name: "test-producer") {
      var value = 0
      while queue.push(value) { value += 1 }
    }
    #expect(queue.pop() == 0)
    nonisolated(unsafe) var discarded = 0
    queue.cancel { _ in discarded += 1 }
    try producer.join()
    #expect(queue.pop() == nil)
    #expect(discarded <= 4)
  }

  @Test func aWorkerThreadRethrowsOnJoin() {
    let thread = WorkerThread(name: "test-fails") { throw BackupError(.invalidRequest, "boom") }
    #expect(throws: BackupError.self) { try thread.join() }
  }
}
