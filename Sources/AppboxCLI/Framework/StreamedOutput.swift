// Output written while a command runs, for listings with one row per file (`ls --recursive`,
// `find`, `diff`, `restore --dry-run`): their whole text or JSON would take memory in
// proportion to the files, so rows go to stdout as the walk produces them, and memory follows
// the walk (the largest directory, the deepest path), not the listing.
//
// The bytes are those of the whole output, only written in pieces: text lines as the runner
// prints them (sanitized, each ending in a newline, nothing with --quiet), and with --json the
// document `JSONValue.serialized()` gives for the whole value, written as leading members,
// elements one by one, then the closing. Tables keep `table`'s layout one batch of rows at a
// time (`StreamedTable`).
//
// Failures (docs/json.md, "Streamed listings"): rows are gathered into a piece of
// `pieceSize` bytes before they are written. A failure before the first piece was written is
// reported as by any command (the error document with --json, nothing on stdout without);
// after it, stdout keeps every whole row produced before the failure (the JSON document cut
// after its last whole element, never closed) and the failure is told on stderr only. A piece
// stdout does not take (a closed pipe with SIGPIPE ignored, a full disk) throws that failure,
// which stops the walk.

import AppboxCore

/// The stdout of a command that writes its rows as it produces them (`CommandContext.stream()`).
final class StreamedOutput {
  /// Bytes gathered before a write: large enough that writes cost little, small enough that
  /// a short listing is written whole when it is done.
  static let defaultPieceSize = 64 << 10

  private let sink: OutputSink
  private let pieceSize: Int
  /// Text lines are dropped (--quiet without --json).
  private let dropsText: Bool
  private var buffer: [UInt8] = []
  /// Whether a piece has gone to stdout (or was tried): from then on a failure cannot be told
  /// there.
  private(set) var hasWritten = false

  init(sink: OutputSink, dropsText: Bool = false, pieceSize: Int = defaultPieceSize) {
    self.sink = sink
    self.dropsText = dropsText
    self.pieceSize = pieceSize
    buffer.reserveCapacity(pieceSize)
  }

  /// One line of text (without its newline): app-chosen parts escaped by the caller, and the
  /// whole sanitized here, as the runner sanitizes whole text.
  func line(_ text: String) throws {
    guard !dropsText else { return }
    try append(Terminal.sanitize(text) + "\n")
  }

  /// Bytes of a JSON document, as they are.
  func append(_ text: String) throws {
    buffer.append(contentsOf: text.utf8)
    if buffer.count >= pieceSize { try flush() }
  }

  /// Writes what is gathered; throws when stdout did not take it.
  func flush() throws {
    guard !buffer.isEmpty else { return }
    hasWritten = true
    sink.write(buffer)
    buffer.removeAll(keepingCapacity: true)
    if let failure = sink.failure { throw failure }
  }

  /// After a failure: when nothing was written yet, drops what was gathered and returns false
  /// (the failure is reported as by any command); else writes the whole rows gathered, unless
  /// stdout already failed, and returns true.
  func abandon() -> Bool {
    guard hasWritten else {
      buffer.removeAll()
      return false
    }
    if sink.failure == nil { try? flush() }
    return true
  }
}

/// A JSON document written as it is produced, byte for byte what `JSONValue.serialized()`
/// prints for the whole value (two-space indentation, `[]` and `{}` when empty), then a newline.
struct StreamedJSON {
  private let output: StreamedOutput
  /// The open containers, outermost first: whether each is an array, and its members so far.
  private var open: [(isArray: Bool, count: Int)] = []

  init(_ output: StreamedOutput) { self.output = output }

  /// Opens an object or array: the document itself, an element of the array open now, or
  /// the member `key` of the object open now.
  mutating func open(_ key: String? = nil, array: Bool) throws {
    if !open.isEmpty { try output.append(prefix(key)) }
    try output.append(array ? "[" : "{")
    open.append((array, 0))
  }

  /// An element of the array open now.
  mutating func add(_ value: JSONValue) throws {
    try output.append(prefix(nil) + value.serialized(indent: open.count))
  }

  /// The member `key` of the object open now.
  mutating func add(_ key: String, _ value: JSONValue) throws {
    try output.append(prefix(key) + value.serialized(indent: open.count))
  }

  /// Fills the arrays `keys` of the object open now, in that order, from one walk when it can.
  /// `walk(wanted, emit)` walks for the arrays in `wanted` (indexes into `keys`) and hands each
  /// element to `emit` with its array's index. The first array is written as the walk goes; the
  /// elements of the others are kept, serialized, up to `budget` bytes, and written after it. A
  /// walk that would keep more lets them go, and each array left gets a walk of its own: memory
  /// stays bounded, and a listing of ordinary size is read once.
  mutating func addArrays(
    _ keys: [String], budget: Int = 16 << 20,
    walk: (Set<Int>, (Int, JSONValue) throws -> Void) throws -> Void
  ) throws {
    guard let firstKey = keys.first else { return }
    try open(firstKey, array: true)
    var kept: [[String]] = Array(repeating: [], count: keys.count)
    var keptBytes = 0
    var keeping = true
    let depth = open.count
    try walk(Set(keys.indices)) { index, value in
      if index == 0 {
        try add(value)
      } else if keeping {
        let text = value.serialized(indent: depth)
        keptBytes += text.utf8.count
        if keptBytes > budget {
          keeping = false
          kept = Array(repeating: [], count: keys.count)
        } else {
          kept[index].append(text)
        }
      }
    }
    try close()
    for index in keys.indices.dropFirst() {
      try open(keys[index], array: true)
      if keeping {
        for text in kept[index] { try output.append(prefix(nil) + text) }
        kept[index] = []
      } else {
        try walk([index]) { _, value in try add(value) }
      }
      try close()
    }
  }

  /// Closes the innermost container; closing the document ends it with a newline.
  mutating func close() throws {
    let (isArray, count) = open.removeLast()
    let end = isArray ? "]" : "}"
    try output.append(
      (count == 0 ? end : "\n" + String(repeating: "  ", count: open.count) + end)
        + (open.isEmpty ? "\n" : ""))
  }

  /// What comes before a member: the separator, the indentation and, in an object, the key.
  private mutating func prefix(_ key: String?) -> String {
    precondition(open.last.map { $0.isArray == (key == nil) } ?? false, "a member without its container")
    let separator = open[open.count - 1].count == 0 ? "\n" : ",\n"
    open[open.count - 1].count += 1
    return separator + String(repeating: "  ", count: open.count)
      + (key.map { JSONValue.quote($0) + ": " } ?? "")
  }
}

/// Rows laid out as `table` lays them out, written a batch at a time. Each batch is padded to
/// the widest cell of its column in it and in every batch before (columns never narrow going
/// down, and may widen at a batch's first row), so a listing of at most `batchSize` rows is
/// exactly `table`'s. The header goes with the first batch; no rows, no header.
struct StreamedTable {
  static let defaultBatchSize = 1000

  private let header: [String]
  private let batchSize: Int
  private var widths: [Int]
  private var rows: [[String]] = []
  private(set) var count = 0

  init(_ header: [String], batchSize: Int = defaultBatchSize) {
    self.header = header
    self.batchSize = batchSize
    widths = header.map(\.count)
  }

  mutating func add(_ row: [String], to output: StreamedOutput) throws {
    rows.append(row)
    count += 1
    if rows.count >= batchSize { try flush(to: output) }
  }

  /// Writes the rows of the last batch.
  mutating func finish(to output: StreamedOutput) throws { try flush(to: output) }

  private mutating func flush(to output: StreamedOutput) throws {
    guard !rows.isEmpty else { return }
    for row in rows {
      for (column, cell) in row.enumerated() { widths[column] = max(widths[column], cell.count) }
    }
    if count == rows.count { try output.line(tableRow(header, widths: widths)) }
    for row in rows { try output.line(tableRow(row, widths: widths)) }
    rows.removeAll(keepingCapacity: true)
  }
}

extension CommandContext {
  /// The command writes its output itself, as it goes (`StreamedOutput`); what `run` returns
  /// is then not printed. The same stream each time.
  func stream() -> StreamedOutput {
    if let streamed { return streamed }
    let made = StreamedOutput(sink: stdout, dropsText: globals.quiet && !globals.json)
    streamed = made
    return made
  }
}
