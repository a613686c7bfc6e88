// "Did you mean": the known names closest to a mistyped one, by edit distance (the
// optimal-string-alignment form of Damerau-Levenshtein: an insertion, a deletion, a
// substitution or a swap of two neighbours each count 1, so "instal" and "bakcup" are one
// edit from "install" and "backup"). A name is suggested when it is at most a third of the
// typed length away (at least 1, at most 3), or when it starts with what was typed (3
// characters or more); the nearest ones win, at most three, in the order they were given.

enum Suggestions {
  /// The candidates `typed` is probably a typo of, nearest first.
  static func nearest(to typed: String, among candidates: [String]) -> [String] {
    let typedChars = Array(typed.lowercased())
    let limit = max(1, min(3, typedChars.count / 3))
    var scored: [(name: String, distance: Int)] = []
    for candidate in candidates where candidate != typed {
      let distance = editDistance(typedChars, Array(candidate.lowercased()))
      if distance <= limit {
        scored.append((candidate, distance))
      } else if typedChars.count >= 3, candidate.lowercased().hasPrefix(typed.lowercased()) {
        scored.append((candidate, limit + 1))
      }
    }
    guard let best = scored.map(\.distance).min() else { return [] }
    var seen = Set<String>()
    return scored.filter { $0.distance == best && seen.insert($0.name).inserted }.prefix(3).map(\.name)
  }

  /// " (did you mean 'install'?)", or "" when nothing is near.
  static func hint(for typed: String, among candidates: [String], prefix: String = "") -> String {
    let names = nearest(to: typed, among: candidates).map { "'\(prefix)\($0)'" }
    switch names.count {
    case 0: return ""
    case 1: return " (did you mean \(names[0])?)"
    default: return " (did you mean \(names.dropLast().joined(separator: ", ")) or \(names.last!)?)"
    }
  }

  /// The optimal-string-alignment distance between `a` and `b`.
  static func editDistance(_ a: [Character], _ b: [Character]) -> Int {
    if a.isEmpty { return b.count }
    if b.isEmpty { return a.count }
    var table = [[Int]](repeating: [Int](repeating: 0, count: b.count + 1), count: a.count + 1)
    for i in 0...a.count { table[i][0] = i }
    for j in 0...b.count { table[0][j] = j }
    for i in 1...a.count {
      for j in 1...b.count {
        let cost = a[i - 1] == b[j - 1] ? 0 : 1
        table[i][j] = min(table[i - 1][j] + 1, table[i][j - 1] + 1, table[i - 1][j - 1] + cost)
        if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
          table[i][j] = min(table[i][j], table[i - 2][j - 2] + 1)
        }
      }
    }
    return table[a.count][b.count]
  }
}
