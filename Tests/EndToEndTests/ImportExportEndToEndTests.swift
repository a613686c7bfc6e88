// `import` and `export` as a user runs them: exit statuses, the one stderr line, JSON fields,
// and the bytes in the home, for the inputs issue 12 and issue 11 found trouble with.

import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

extension Device {
  func json(_ result: ProcessResult) throws -> [String: Any] {
    try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [String: Any] ?? [:]
  }

  /// The home's Documents, as names.
  var documents: [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: home + "/Documents")) ?? []).sorted()
  }
}

/// A tar holding `Documents/hello.txt`, made by GNU tar.
private func helloTar(in device: Device) throws -> String {
  let source = device.dir.url("hello")
  try FileManager.default.createDirectory(atPath: source + "/Documents", withIntermediateDirectories: true)
  FileManager.default.createFile(atPath: source + "/Documents/hello.txt", contents: Data("hello\n".utf8))
  let tar = device.dir.url("hello.tar")
  let made = try runProcess("/usr/bin/tar", ["--format=ustar", "-C", source, "-cf", tar, "Documents"])
  #expect(made.status == 0, "\(made.err)")
  return tar
}

struct ImportExportEndToEndTests {
  /// Every compression libarchive reads, through the command line (tar, then the compressor).
  @Test func compressedArchivesImport() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    let tar = try helloTar(in: device)
    for command in ["lz4 -c", "lzip -c", "xz --format=lzma -c", "compress -c", "lzop -c", "zstd -q -c"] {
      let compressed = device.dir.url("hello.tar.x")
      let made = try runProcess("/bin/sh", ["-c", "\(command) < \(tar) > \(compressed)"])
      #expect(made.status == 0, "\(command): \(made.err)")
      try? FileManager.default.removeItem(atPath: device.home + "/Documents/hello.txt")
      let imported = try device.run("import", "com.example.notes", compressed)
      #expect(imported.status == 0, "\(command): \(imported.err)")
      #expect(device.documents == ["hello.txt"], "\(command)")
    }
    // grzip needs a program this machine lacks: 69, naming it.
    let grzip = device.dir.url("x.tar.grz")
    FileManager.default.createFile(
      atPath: grzip,
      contents: Data(Array("GRZipII".utf8) + [0, 2, 4, 0x3A, 0x29] + [UInt8](repeating: 1, count: 600)))
    let missing = try device.run("import", "com.example.notes", grzip)
    #expect(missing.status == 69, "\(missing.err)")
    #expect(missing.err.contains("'grzip'"), "\(missing.err)")
  }

  /// The rule for damaged data, and bounded work, as exit statuses and messages.
  @Test func damagedEmptyAndOversizedArchives() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    FileManager.default.createFile(atPath: device.home + "/Documents/keep.txt", contents: Data("keep".utf8))

    // A malformed pax record: 65 with one line; --lenient imports, warns, and counts it.
    var pax = RawTar()
    pax.paxRaw(Array("30 path=Documents/elsewhere/x".utf8))
    pax.header("Documents/file.txt", size: 2)
    pax.data(Array("ok".utf8))
    pax.end()
    let damaged = device.dir.url("damaged.tar")
    FileManager.default.createFile(atPath: damaged, contents: Data(pax.bytes))
    let refused = try device.run("import", "com.example.notes", damaged)
    #expect(refused.status == 65)
    #expect(
      refused.err.split(separator: "\n").count == 1 && refused.err.contains("--lenient"), "\(refused.err)")
    #expect(device.documents == ["keep.txt"])
    let lenient = try device.run("--json", "import", "com.example.notes", damaged, "--lenient")
    #expect(lenient.status == 0, "\(lenient.err)")
    #expect(try device.json(lenient)["warnings"] as? Int == 1)
    #expect(lenient.err.contains("warning: imported despite a damaged archive"), "\(lenient.err)")
    #expect(device.documents == ["file.txt"])

    // A header cut short: a reason, not a status number.
    var cut = RawTar()
    cut.header("PaxHeaders/x", type: "x", size: 90)
    let truncated = device.dir.url("truncated.tar")
    FileManager.default.createFile(
      atPath: truncated, contents: Data(cut.bytes + Array("30 00000=000000".utf8)))
    let short = try device.run("import", "com.example.notes", truncated)
    #expect(
      short.status == 65 && short.err.contains("truncated") && !short.err.contains("status"), "\(short.err)")

    // Nothing to import: refused; --allow-empty empties Documents.
    let empty = device.dir.url("empty.tar")
    FileManager.default.createFile(atPath: empty, contents: Data(count: 10240))
    let nothing = try device.run("import", "com.example.notes", empty)
    #expect(nothing.status == 65 && nothing.err.contains("--allow-empty"), "\(nothing.err)")
    #expect(device.documents == ["file.txt"])
    #expect(try device.run("import", "com.example.notes", empty, "--allow-empty").status == 0)
    #expect(device.documents.isEmpty)

    // The caps: members and apparent size, raised by flags.
    let tar = try helloTar(in: device)
    let tooMany = try device.run("import", "com.example.notes", tar, "--max-members", "1")
    #expect(tooMany.status == 65 && tooMany.err.contains("--max-members"), "\(tooMany.err)")
    let tooBig = try device.run("import", "com.example.notes", tar, "--max-size", "5")
    #expect(tooBig.status == 65 && tooBig.err.contains("--max-size"), "\(tooBig.err)")
    #expect(try device.run("import", "com.example.notes", tar, "--max-size", "1K").status == 0)
    let bad = try device.run("import", "com.example.notes", tar, "--max-size", "lots")
    #expect(bad.status == 64, "\(bad.err)")
  }

  /// Export names what it left out; its own archive, absolute symlinks and all, imports back;
  /// a whole-home tar imports with one warning line; a package round trip is exact.
  @Test func exportImportRoundTripsThroughTheCommandLine() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try writeSampleData(home: device.home)
    let socket = device.home + "/Documents/app.sock"
    let bound = try runProcess(
      "/usr/bin/python3",
      ["-c", "import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])", socket])
    #expect(bound.status == 0, "\(bound.err)")
    let exported = try device.run("--json", "export", "com.example.notes", device.dir.url("data.tar"))
    #expect(exported.status == 0, "\(exported.err)")
    #expect(try device.json(exported)["skippedSpecialFiles"] as? Int == 2)
    #expect(exported.err.contains("left out 2 FIFOs and sockets"), "\(exported.err)")
    #expect(exported.err.contains("Documents/pipe") && exported.err.contains("Documents/app.sock"))
    try FileManager.default.removeItem(atPath: device.home + "/Documents/pipe")
    try FileManager.default.removeItem(atPath: socket)
    let expected = try captureHomeData(device.home)
    #expect(try device.run("export", "com.example.notes", device.dir.url("data.tar")).status == 0)
    #expect(try device.run("export", "com.example.notes", device.dir.url("Notes.xcappdata")).status == 0)
    let wholeHome = device.dir.url("home.tar")
    #expect(
      try runProcess("/usr/bin/tar", ["--xattrs", "-C", device.home, "-cf", wholeHome, "."]).status == 0)

    for (source, skipped) in [
      ("data.tar", false), ("Notes.xcappdata", false), ("home.tar", true),
    ] {
      FileManager.default.createFile(atPath: device.home + "/Documents/a.txt", contents: Data("changed".utf8))
      let result = try device.run("import", "com.example.notes", device.dir.url(source))
      #expect(result.status == 0, "\(source): \(result.err)")
      expectSameTree(expected, try captureHomeData(device.home), source)
      let lines = result.err.split(separator: "\n").filter { $0.contains("skipped") }
      #expect(lines.count == (skipped ? 1 : 0), "\(source): \(result.err)")
    }
    #expect(
      try FileManager.default.destinationOfSymbolicLink(atPath: device.home + "/Documents/dangling")
        == "/nonexistent/absolute")
  }
}

/// Expects two captures to match, naming the first differences.
func expectSameTree(
  _ expected: [[UInt8]: CapturedEntry], _ actual: [[UInt8]: CapturedEntry], _ label: String,
  sourceLocation: SourceLocation = #_sourceLocation
) {
  let lines = differences(expected, actual)
  #expect(
    lines.isEmpty, "\(label): \(lines.prefix(5).joined(separator: "; "))", sourceLocation: sourceLocation)
}

/// Issue 26: `export APP <existing dir>` failed at the final rename ("Unable to rename
/// '.X.tmp-…': is a directory", 64). A directory now receives `<bundle id>.tar`; a directory
/// where that tar would go is refused before anything is written.
struct ExportIntoDirectoryTests {
  @Test func anExistingDirectoryReceivesTheAppsTar() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try "hello".write(toFile: device.home + "/Documents/a.txt", atomically: false, encoding: .utf8)
    let folder = device.dir.url("exports")
    try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    let result = try device.run("--json", "export", "com.example.notes", folder)
    #expect(result.status == 0, "\(result.err)")
    let tar = folder + "/com.example.notes.tar"
    let document = try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [String: Any]
    #expect(document?["output"] as? String == tar)
    let listing = try runProcess("/usr/bin/tar", ["-tf", tar])
    #expect(listing.status == 0 && listing.out.contains("Documents/a.txt"), "\(listing.err)")
    #expect(try FileManager.default.contentsOfDirectory(atPath: folder) == ["com.example.notes.tar"])
    let text = try device.run("export", "com.example.notes", folder + "/")
    #expect(text.status == 0 && text.out.hasSuffix(" to \(folder)/com.example.notes.tar\n"), "\(text.out)")

    // A directory in the tar's place: refused up front, naming it, and nothing is left behind.
    let blocked = device.dir.url("blocked")
    try FileManager.default.createDirectory(
      atPath: blocked + "/com.example.notes.tar", withIntermediateDirectories: true)
    let refused = try device.run("export", "com.example.notes", blocked)
    #expect(refused.status == 64, "\(refused.err)")
    #expect(
      refused.err.hasPrefix(
        "Error: '\(blocked)/com.example.notes.tar' is a directory: name the tar file to write"),
      "\(refused.err)")
    #expect(!refused.err.contains("rename"))
    #expect(try FileManager.default.contentsOfDirectory(atPath: blocked) == ["com.example.notes.tar"])
  }
}
