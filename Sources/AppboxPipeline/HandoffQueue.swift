// A bounded first-in first-out queue between a producer and a consumer thread. Elements need
// not be Sendable: each is handed over (`sending`), so the producer keeps no access to it.

/// A first-in first-out queue between one producer and one consumer thread, bounded by a
/// cost (bytes in flight) so a fast producer cannot fill memory. `close()` ends it; after
/// `cancel()` both sides stop (the producer's `push` returns false).
///
/// Wake-ups are batched: a waiting consumer is woken once `batch` elements (or a quarter of
/// the capacity) are queued, and a waiting producer once the cost fell below half the
/// capacity. Waking a thread per element costs a futex round trip each, which for many small
/// files is more than the work itself.
public final class HandoffQueue<Element>: Sendable {
  private struct State {
    var items: [(Element, Int)] = []
    var head = 0
    var cost = 0
    var closed = false
    var cancelled = false
    var producerWaiting = false
    var consumerWaiting = false
  }
  private let monitor = Monitor(State())
  private let capacity: Int
  private let batch: Int

  public init(capacity: Int, batch: Int = 32) {
    self.capacity = capacity
    self.batch = batch
  }

  /// Adds an element of `cost` (waits while the queue is over capacity). Returns false when
  /// the consumer cancelled (the element is dropped).
  @discardableResult
  public func push(_ element: sending Element, cost elementCost: Int = 1) -> Bool {
    offer(element, cost: elementCost) == nil
  }

  /// As `push`, but a refused element (the consumer cancelled) comes back to the producer.
  public func offer(_ element: sending Element, cost elementCost: Int = 1) -> sending Element? {
    let capacity = self.capacity
    let batch = self.batch
    let monitor = self.monitor
    return monitor.withLock(handing: element, waitingWhile: { state in
      state.producerWaiting = false
      guard !state.cancelled && state.cost > 0 && state.cost + elementCost > capacity else { return false }
      state.producerWaiting = true
      if state.consumerWaiting { monitor.broadcast() }
      return true
    }) { state, element -> Element? in
      if state.cancelled { return element }
      state.items.append((element, elementCost))
      state.cost += elementCost
      if state.consumerWaiting && (state.items.count - state.head >= batch || state.cost >= capacity / 4) {
        monitor.broadcast()
      }
      return nil
    }
  }

  /// Wakes a waiting consumer now, whatever is queued (the producer is about to block on
  /// something the consumer must release first, such as pool buffers).
  public func nudge() {
    monitor.withLock { state in
      if state.consumerWaiting { monitor.broadcast() }
    }
  }

  /// How many elements are queued (for tests).
  public var pendingCount: Int { monitor.withLock { $0.items.count - $0.head } }

  /// No more elements will come.
  public func close() {
    monitor.withLock { state in
      state.closed = true
      monitor.broadcast()
    }
  }

  /// Stops both sides; pending elements are dropped (and handed to `discard`).
  public func cancel(discard: (Element) -> Void = { _ in }) {
    let dropped: [(Element, Int)] = monitor.withLock { state in
      state.cancelled = true
      let rest = Array(state.items[state.head...])
      state.items = []
      state.head = 0
      state.cost = 0
      monitor.broadcast()
      return rest
    }
    for (element, _) in dropped { discard(element) }
  }

  /// The next element, or nil once the queue is closed and empty (or cancelled).
  public func pop() -> sending Element? {
    let capacity = self.capacity
    let monitor = self.monitor
    return monitor.withLock(waitingWhile: { state in
      state.consumerWaiting = false
      guard state.head == state.items.count && !state.closed && !state.cancelled else { return false }
      state.consumerWaiting = true
      if state.producerWaiting { monitor.broadcast() }
      return true
    }) { state -> Element? in
      if state.cancelled || state.head == state.items.count { return nil }
      let (element, elementCost) = state.items[state.head]
      state.head += 1
      if state.head > 1024 && state.head * 2 > state.items.count {
        state.items.removeFirst(state.head)
        state.head = 0
      }
      state.cost -= elementCost
      if state.producerWaiting && state.cost <= capacity / 2 { monitor.broadcast() }
      return element
    }
  }
}
