import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

@testable import AppboxCLI

/// A streamed document is the whole document, written in pieces; a streamed table is
/// `table`'s layout, batch by batch.
struct StreamedOutputTests {
  /// Documents of every shape a listing takes: leading members, arrays (empty or not) of
  /// strings and of objects, members after the arrays, an array as the document.
  static let documents: [JSONValue] = [
    .object([]),
    .array([]),
    .object([("snapshot", .string("1a2b3c4d")), ("entries", .array([]))]),
    .object([
      ("snapshot", .string("1a2b3c4d")), ("path", .string("Documents/\u{1B}]52;c;\"x\"\n")),
      (
        "entries",
        .array(
          (0..<300).map { index in
            .object([
              ("path", .string("Documents/file-\(index)")), ("bytes", .int(index * 1000)),
              (
                "nested",
                .object([("empty", .array([])), ("list", .array([.int(index), .null, .bool(true)]))])
              ),
            ])
          })
      ),
    ]),
    .array((0..<500).map { .object([("snapshot", .string("s")), ("path", .string("p\($0)"))]) }),
    .object([
      ("oldSnapshot", .string("a")), ("added", .array((0..<400).map { .string("Documents/\($0)") })),
      ("removed", .array([])), ("changed", .array([.string("Documents/x")])), ("unchanged", .int(7)),
      ("dropped", .object([("files", .int(0)), ("excluded", .object([("files", .int(0))]))])),
    ]),
  ]

  /// Writes `value` the way a streaming command does: containers opened, every other value
  /// added whole.
  func stream(_ value: JSONValue, into json: inout StreamedJSON, key: String? = nil, depth: Int = 0) throws {
    switch value {
    case .array(let items) where depth < 2:
      try json.open(key, array: true)
      for item in items { try stream(item, into: &json, depth: depth + 1) }
      try json.close()
    case .object(let members) where depth < 2:
      try json.open(key, array: false)
      for (name, member) in members { try stream(member, into: &json, key: name, depth: depth + 1) }
      try json.close()
    default:
      if let key { try json.add(key, value) } else { try json.add(value) }
    }
  }

  @Test(arguments: [1, 100, 4096, StreamedOutput.defaultPieceSize])
  func aStreamedDocumentIsTheWholeDocumentByteForByte(_ pieceSize: Int) throws {
    for document in Self.documents {
      let sink = CapturingSink()
      let output = StreamedOutput(sink: sink, pieceSize: pieceSize)
      var json = StreamedJSON(output)
      try stream(document, into: &json)
      try output.flush()
      #expect(sink.text == document.serialized() + "\n")
      _ = try JSONSerialization.jsonObject(with: Data(sink.bytes))
    }
  }

  /// Arrays filled from one walk: the document is the same whether the later arrays fit the
  /// budget (one walk) or not (then a walk per array left), and the walks are those expected.
  @Test(arguments: [1 << 20, 64, 0])
  func arraysFromOneWalkAreTheWholeDocument(_ budget: Int) throws {
    let changes: [(Int, String)] = (0..<200).map { ($0 % 3, "Documents/\($0 % 7)/f\($0)") }
    let keys = ["added", "removed", "changed"]
    let whole = JSONValue.object(
      [("oldSnapshot", .string("a"))]
        + keys.indices.map { array in
          (keys[array], .array(changes.filter { $0.0 == array }.map { .string($0.1) }))
        } + [("unchanged", .int(3))])
    let sink = CapturingSink()
    let output = StreamedOutput(sink: sink, pieceSize: 100)
    var json = StreamedJSON(output)
    try json.open(array: false)
    try json.add("oldSnapshot", .string("a"))
    var walks: [Set<Int>] = []
    try json.addArrays(keys, budget: budget) { wanted, emit in
      walks.append(wanted)
      for (array, path) in changes where wanted.contains(array) { try emit(array, .string(path)) }
    }
    try json.add("unchanged", .int(3))
    try json.close()
    try output.flush()
    #expect(sink.text == whole.serialized() + "\n")
    #expect(walks == (budget >= 1 << 20 ? [[0, 1, 2]] : [[0, 1, 2], [1], [2]]))
  }

  @Test func aTableOfOneBatchIsTable() throws {
    let rows = (0..<37).map { ["-rw-r--r--", String(repeating: "9", count: $0 % 7 + 1), "Documents/\($0)"] }
    for batch in [37, 1000] {
      let sink = CapturingSink()
      let output = StreamedOutput(sink: sink)
      var streamed = StreamedTable(["MODE", "BYTES", "PATH"], batchSize: batch)
      for row in rows { try streamed.add(row, to: output) }
      try streamed.finish(to: output)
      try output.flush()
      #expect(sink.text == table(["MODE", "BYTES", "PATH"], rows) + "\n")
    }
  }

  /// Each batch is padded to the widest cell so far: a column widens at the first row of
  /// the batch that needs it, and never narrows again.
  @Test func laterBatchesWidenColumnsAndNeverNarrowThem() throws {
    let sink = CapturingSink()
    let output = StreamedOutput(sink: sink)
    var streamed = StreamedTable(["BYTES", "PATH"], batchSize: 2)
    for row in [["1", "a"], ["22", "b"], ["333333", "c"], ["4", "d"], ["5", "e"]] {
      try streamed.add(row, to: output)
    }
    try streamed.finish(to: output)
    try output.flush()
    let expected = [
      "BYTES  PATH", "1      a", "22     b", "333333  c", "4       d", "5       e",
    ]
    #expect(sink.text == expected.map { $0 + "\n" }.joined())
    #expect(streamed.count == 5)
  }

  @Test func noRowsNoHeader() throws {
    let sink = CapturingSink()
    let output = StreamedOutput(sink: sink)
    var streamed = StreamedTable(["BYTES", "PATH"])
    try streamed.finish(to: output)
    try output.flush()
    #expect(sink.bytes.isEmpty)
  }

  @Test func quietDropsTextButNotJSON() throws {
    let sink = CapturingSink()
    let output = StreamedOutput(sink: sink, dropsText: true)
    try output.line("a row")
    try output.append("{}\n")
    try output.flush()
    #expect(sink.text == "{}\n")
  }

  @Test func textIsSanitizedLineByLine() throws {
    let sink = CapturingSink()
    let output = StreamedOutput(sink: sink)
    try output.line("evil\u{1B}]52;c;aGk=\u{07}")
    try output.flush()
    #expect(sink.text == "evil\\x1b]52;c;aGk=\\x07\n")
  }

  /// Before the first piece is written, a failure can still replace the output; after it,
  /// the whole rows gathered are written and the output stays cut there.
  @Test func abandoningKeepsWholeRowsOnlyOnceSomethingWasWritten() throws {
    let early = CapturingSink()
    let first = StreamedOutput(sink: early, pieceSize: 64)
    try first.line("row 1")
    #expect(first.abandon() == false)
    #expect(early.bytes.isEmpty)

    let late = CapturingSink()
    let second = StreamedOutput(sink: late, pieceSize: 16)
    for index in 1...5 { try second.line("row \(index)") }
    #expect(second.hasWritten)
    #expect(second.abandon() == true)
    #expect(late.text == "row 1\nrow 2\nrow 3\nrow 4\nrow 5\n")
  }

  /// A piece stdout does not take throws its failure, which stops the producer.
  @Test func aFailedWriteThrowsAndNothingMoreIsWritten() throws {
    let sink = FailingSink(accepting: 20, errno: .noSpace)
    let output = StreamedOutput(sink: sink, pieceSize: 8)
    var written = 0
    #expect(throws: SystemError.self) {
      for index in 0..<100 {
        try output.line("row \(index)")
        written += 1
      }
    }
    // Rows of 6 bytes, pieces of two rows: the first piece is taken, the second refused (the
    // fourth row's line throws), and abandoning writes nothing more to a stdout that failed.
    #expect(written == 3)
    #expect(output.abandon() == true)
    #expect(sink.attempts == 2)
  }
}

/// The runner with a command that streams: what stdout, stderr and the exit status hold when
/// it succeeds, fails before its first piece, fails after it, or meets a failing stdout.
struct StreamedCommandTests {
  /// `probe ROWS [--fail] [--empty]`: rows in a document `{"name", "rows": […], "count"}` (or
  /// lines), then a bad-data failure with --fail.
  struct Probe: ParsableCommand {
    static let description = CommandDescription(
      name: "probe", abstract: "Streams rows.", positionals: [.init("ROWS", help: "How many.")],
      options: [.init("fail", help: "Fail after the rows.")])
    static var createsDevice: Bool { true }
    let rows: Int
    let fail: Bool
    init(_ arguments: ParsedArguments) throws {
      rows = Int(arguments.positional(0)!) ?? 0
      fail = arguments.flag("fail")
    }
    func run(_ context: CommandContext) throws -> CommandOutput {
      let output = context.stream()
      if context.globals.json {
        var json = StreamedJSON(output)
        try json.open(array: false)
        try json.add("name", .string("probe"))
        try json.open("rows", array: true)
        for index in 0..<rows { try json.add(.object([("row", .int(index))])) }
        if fail { throw ProbeFailure() }
        try json.close()
        try json.add("count", .int(rows))
        try json.close()
      } else {
        for index in 0..<rows { try output.line("row \(index)") }
        if fail { throw ProbeFailure() }
        if rows == 0 { try output.line("No rows.") }
      }
      return CommandOutput()
    }
  }

  struct ProbeFailure: AppboxFailure {
    var kind: FailureKind { .badData }
    var description: String { "Catalog tree 0123 does not match its digest" }
  }

  static let runner = CommandRunner(commands: [Probe.self], version: "0")

  func run(_ arguments: [String], stdout: OutputSink = CapturingSink()) -> (
    status: Int32, out: [UInt8], err: String
  ) {
    let err = CapturingSink()
    let status = Self.runner.run(arguments, environment: [:], stdout: stdout, stderr: err)
    return (status, (stdout as? CapturingSink)?.bytes ?? [], err.text)
  }

  func document(rows: Int) -> JSONValue {
    .object([
      ("name", .string("probe")), ("rows", .array((0..<rows).map { .object([("row", .int($0))]) })),
      ("count", .int(rows)),
    ])
  }

  @Test(arguments: [0, 1, 5000])
  func aStreamedDocumentIsTheDocument(_ rows: Int) throws {
    let result = run(["--json", "probe", String(rows)])
    #expect(result.status == 0)
    #expect(String(decoding: result.out, as: UTF8.self) == document(rows: rows).serialized() + "\n")
    #expect(result.err.isEmpty)
    let text = run(["probe", String(rows)])
    #expect(
      String(decoding: text.out, as: UTF8.self)
        == (rows == 0 ? "No rows.\n" : (0..<rows).map { "row \($0)\n" }.joined()))
  }

  /// A failure before anything was written is any command's failure: the error document.
  @Test func aFailureBeforeTheFirstPieceIsTheErrorDocument() throws {
    let result = run(["--json", "probe", "3", "--fail"])
    #expect(result.status == 65)
    let object = try JSONSerialization.jsonObject(with: Data(result.out)) as? [String: Any]
    let error = object?["error"] as? [String: Any]
    #expect(error?["status"] as? Int == 65)
    #expect(error?["message"] as? String == "Catalog tree 0123 does not match its digest")
    #expect(result.err == "Error: Catalog tree 0123 does not match its digest\n")
    let text = run(["probe", "3", "--fail"])
    #expect(text.status == 65 && text.out.isEmpty)
  }

  /// After: stdout is the document up to its last whole element, never closed (so it does
  /// not parse), the error is one line on stderr, and the status is the failure's.
  @Test func aFailureAfterTheFirstPieceCutsTheDocumentAfterItsLastElement() throws {
    let rows = 20000
    let result = run(["--json", "probe", String(rows), "--fail"])
    #expect(result.status == 65)
    #expect(result.err == "Error: Catalog tree 0123 does not match its digest\n")
    let whole = document(rows: rows).serialized()
    let cut = String(decoding: result.out, as: UTF8.self)
    let prefix = whole.components(separatedBy: "\n    }\n  ],\n  \"count\"")[0] + "\n    }"
    #expect(cut == prefix)
    #expect((try? JSONSerialization.jsonObject(with: Data(result.out))) == nil)
    // Closing it by hand gives every element: none was cut in the middle.
    let closed = try JSONSerialization.jsonObject(with: Data((cut + "\n  ]\n}").utf8)) as? [String: Any]
    #expect((closed?["rows"] as? [Any])?.count == rows)

    let text = run(["probe", String(rows), "--fail"])
    #expect(text.status == 65)
    #expect(String(decoding: text.out, as: UTF8.self) == (0..<rows).map { "row \($0)\n" }.joined())
    #expect(text.err == "Error: Catalog tree 0123 does not match its digest\n")
  }

  /// A stdout that stops taking bytes (a full disk, a closed pipe with SIGPIPE ignored) stops
  /// the command at that piece: exit 74, one line naming the failure, no error document.
  @Test(arguments: [Errno.noSpace, Errno(rawValue: EPIPE)])
  func aFailingStdoutStopsTheCommand(_ errno: Errno) throws {
    for arguments in [["--json", "probe", "100000"], ["probe", "100000"]] {
      let sink = FailingSink(accepting: 150_000, errno: errno)
      let result = run(arguments, stdout: sink)
      #expect(result.status == 74)
      #expect(result.err.hasPrefix("Error: ") && result.err.contains("standard output"), "\(result.err)")
      #expect(result.err.filter { $0 == "\n" }.count == 1, "\(result.err)")
      // Three pieces reached it: the two it took and the one it refused; then the command stopped.
      #expect(sink.attempts == 3, "\(arguments)")
    }
  }
}

/// A stdout that takes `accepting` bytes, then fails every write with `errno`.
final class FailingSink: OutputSink, @unchecked Sendable {
  private let lock = NSLock()
  private let limit: Int
  private let errno: Errno
  private var taken = 0
  private var failed = false
  private(set) var attempts = 0
  init(accepting limit: Int, errno: Errno) {
    self.limit = limit
    self.errno = errno
  }
  func write(_ bytes: [UInt8]) {
    lock.withLock {
      attempts += 1
      if failed || taken + bytes.count > limit {
        failed = true
      } else {
        taken += bytes.count
      }
    }
  }
  var isTerminal: Bool { false }
  var failure: SystemError? {
    lock.withLock { failed ? SystemError("write standard output", errno: errno) : nil }
  }
}
