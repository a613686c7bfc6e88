import AppboxCore
import Testing

struct DepthFirstTests {
  /// Each item, then its children, before its next sibling; leaves by nil or by no children.
  @Test func visitsEachItemBeforeItsChildrenAndThemBeforeItsNextSibling() {
    let tree: [String: [String]] = ["a": ["a/1", "a/2"], "a/1": ["a/1/x"], "a/2": [], "b": ["b/1"]]
    var seen: [String] = []
    walkDepthFirst(["a", "b", "c"], visit: { seen.append($0) }, children: { tree[$0] })
    #expect(seen == ["a", "a/1", "a/1/x", "a/2", "b", "b/1", "c"])
  }

  /// A chain 100,000 levels deep costs no call stack.
  @Test func aDeepChainIsWalkedWithoutRecursion() {
    var deepest = 0
    walkDepthFirst([0], visit: { deepest = max(deepest, $0) }, children: { $0 < 100_000 ? [$0 + 1] : nil })
    #expect(deepest == 100_000)
  }

  /// An error from `visit` or `children` ends the walk there.
  @Test func anErrorEndsTheWalk() {
    struct Stop: Error {}
    var seen: [Int] = []
    #expect(throws: Stop.self) {
      try walkDepthFirst([1, 2, 3], visit: { seen.append($0) }, children: { if $0 == 2 { throw Stop() }; return nil })
    }
    #expect(seen == [1, 2])
  }
}
