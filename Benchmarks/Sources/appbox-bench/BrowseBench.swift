import AppboxTestSupport
import Foundation
import Glibc

/// `find` and `dump` over a long history, beside restic on the same snapshots (issue 27's
/// bounds: `find` over 100 snapshots in under a second; a large file dumped at the disk's
/// speed in constant memory).
///
/// The history: one large recording (256 MB in `make bench`, 1 GB in `make bench-large`)
/// added to the generated home, then 100 backups by each tool with a small change between
/// them (one export rewritten, one new note), so both repositories hold the same 100
/// snapshots. Then, run by run: `find` of a name glob over every snapshot, and `dump` of the
/// recording to /dev/null beside `restic dump` and `cat` of the live file. The dump rows
/// start from a dropped page cache when the benchmark runs as root (so `cat` is the disk's
/// speed and every tool reads its own bytes from the disk); otherwise from a warm one, and
/// the note says which.
extension Bench {
  static let browseSnapshots = 100

  func browse(_ home: String) throws -> [Scenario] {
    let repository = work + "/browse"
    let restic = work + "/browse-restic"
    let recording = "Documents/Media/browse-recording.mov"
    let recordingBytes = size == .small ? 256 << 20 : 1 << 30
    let writer = ContentWriter(seed: 0xB0B5)
    try makeDirectories(home + "/Documents/Media")
    try makeDirectories(home + "/Documents/Browse")
    try writer.write(home + "/" + recording, size: recordingBytes)
    try shell.run(
      "\(ab) --quiet repo init --repo \(repository) && rm -rf \(restic) && restic -q -r \(restic) init")
    let start = DispatchTime.now().uptimeNanoseconds
    for round in 0..<Self.browseSnapshots {
      try writer.write(home + "/Documents/Browse/export.json", size: 30_000)
      try writer.write(home + "/Documents/Browse/note-\(round).txt", size: 2_000)
      try shell.run("\(ab) --quiet backup \(app) --repo \(repository)")
      try shell.run("restic -q -r \(restic) backup \(resticExcludes(home)) \(home)")
      if round % 10 == 9 {
        progress("browse: \(round + 1) of \(Self.browseSnapshots) snapshots in each tool")
      }
    }
    let built = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
    let cold = getuid() == 0

    var find = Scenario(
      name: "find a name over \(Self.browseSnapshots) snapshots", reference: "restic find")
    var dump = Scenario(
      name: "dump a \(recordingBytes >> 20) MB file of the newest snapshot to /dev/null",
      reference: "cat (the live file)")
    var findRows: [String: [Sample]] = [:]
    var dumpRows: [String: [Sample]] = [:]
    let findSteps = [
      ("appbox find", "\(ab) find 'export.json' --app \(app) --repo \(repository) >/dev/null"),
      ("restic find", "restic -q -r \(restic) find '*.json' >/dev/null"),
    ]
    let dumpSteps = [
      ("cat (the live file)", "cat \(home)/\(recording) >/dev/null"),
      ("appbox dump", "\(ab) dump latest \(recording) --app \(app) --repo \(repository) >/dev/null"),
      ("restic dump", "restic -q -r \(restic) dump latest \(home)/\(recording) >/dev/null"),
    ]
    for run in 0..<runs {
      for (tool, command) in findSteps {
        findRows[tool, default: []].append(try shell.time(command, memory: true))
      }
      for (tool, command) in dumpSteps {
        if cold { try shell.run("sync && echo 3 > /proc/sys/vm/drop_caches") }
        dumpRows[tool, default: []].append(try shell.time(command, memory: true))
      }
      progress("find and dump run \(run + 1)/\(runs)")
    }
    find.rows = findSteps.map { ($0.0, findRows[$0.0] ?? []) }
    find.targets = [("appbox find", "restic find", 1.0)]
    find.absoluteTargets = [("appbox find", 1.0)]
    dump.rows = dumpSteps.map { ($0.0, dumpRows[$0.0] ?? []) }
    dump.targets = [("appbox dump", "cat (the live file)", 1.5), ("appbox dump", "restic dump", 1.0)]
    let history = String(
      format:
        "history: %d snapshots in each tool (a %d MB recording, then one export rewritten and one note added between backups), built in %.0f s",
      Self.browseSnapshots, recordingBytes >> 20, built)
    find.notes = [
      history,
      "pattern 'export.json' (a name, as find -name): one match in each snapshot, so the rows time the walk, not the printing; peak memory in the table",
    ]
    dump.notes = [
      history,
      cold
        ? "each dump row starts from a dropped page cache (as root): every tool reads its bytes from the disk"
        : "warm page cache (not root, so the cache is not dropped): memory speed, not the disk's",
      "appbox verifies the file's SHA-256 as it streams; the peak memory column must not follow the file's size (constant memory)",
    ]
    try shell.run("rm -rf \(repository) \(restic) \(home)/Documents/Browse \(home)/\(recording)")
    return [find, dump]
  }
}
