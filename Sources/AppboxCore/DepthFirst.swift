// One depth-first walk for the listings that go through a tree level by level (`ls
// --recursive`, `diff`, `restore --dry-run`): an explicit stack of levels, so a chain of
// folders thousands deep costs no call stack, and only the levels on the way are held.

/// Visits `roots` and everything below them depth first, in order: each item, then (when
/// `children` gives any) its children, before the item after it. `children` is asked right
/// after the item is visited; nil or empty: a leaf.
public func walkDepthFirst<Item>(
  _ roots: [Item], visit: (Item) throws -> Void, children: (Item) throws -> [Item]?
) rethrows {
  var stack: [(items: [Item], next: Int)] = [(roots, 0)]
  while !stack.isEmpty {
    let level = stack.count - 1
    guard stack[level].next < stack[level].items.count else {
      stack.removeLast()
      continue
    }
    let item = stack[level].items[stack[level].next]
    stack[level].next += 1
    try visit(item)
    if let below = try children(item), !below.isEmpty { stack.append((below, 0)) }
  }
}
