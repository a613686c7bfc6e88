import AppboxTestSupport
import Foundation
import Glibc

/// `advise` and `why` over a long history: 100 snapshots of the generated app (100,000 files
/// in `make bench-large`). The history is built cheaply, as an app's real one accumulates:
/// one full backup, then 99 incremental ones with small changes between them (a few known
/// churners, a couple of dozen generated files rewritten in place, one file deleted halfway).
extension Bench {
  static let historySnapshots = 100

  /// Paths (relative to the home) the history's churners use.
  enum Churner {
    static let export = "Documents/Exports/library.json"
    static let database = "Library/Application Support/Model.sqlite"
    static let thumbnails = "Documents/Thumbnails"
    static let deleted = "Documents/Exports/old-export.json"
  }

  func history(_ home: String) throws -> Scenario {
    let repository = work + "/history"
    let writer = ContentWriter(seed: 0x4157)
    var random = SeededRandom(seed: 0x4157)
    // The generated data files, listed once (a walk per backup would cost more than the backup).
    var files: [String] = []
    for area in ["Documents", "Library/Application Support"] {
      let enumerator = FileManager.default.enumerator(atPath: home + "/" + area)
      while let relative = enumerator?.nextObject() as? String {
        if relative.hasSuffix(".bin") || relative.hasSuffix(".txt") {
          files.append(home + "/" + area + "/" + relative)
        }
      }
    }
    files.sort()
    try makeDirectories(home + "/Documents/Exports")
    try makeDirectories(home + "/" + Churner.thumbnails)
    try writer.write(home + "/" + Churner.deleted, size: 400_000)
    try shell.run("\(ab) --quiet repo init --repo \(repository)")
    let start = DispatchTime.now().uptimeNanoseconds
    for round in 0..<Self.historySnapshots {
      try writer.write(home + "/" + Churner.export, size: 3_000_000)
      try writer.write(home + "/" + Churner.database + ".new", size: 4_000_000 + random.below(200_000))
      guard rename(home + "/" + Churner.database + ".new", home + "/" + Churner.database) == 0 else {
        throw GeneratorError("cannot rename the database")
      }
      for index in 0..<5 {
        try writer.write(home + "/\(Churner.thumbnails)/thumb-\(round)-\(index).jpg", size: 40_000)
      }
      if round > 0 {
        for _ in 0..<24 {
          let path = files[random.below(files.count)]
          var st = stat()
          guard lstat(path, &st) == 0 else { continue }
          try writer.write(path, size: Int(st.st_size))
        }
      }
      if round == Self.historySnapshots / 2 { unlink(home + "/" + Churner.deleted) }
      try shell.run("\(ab) --quiet backup \(app) --repo \(repository)")
      if round % 10 == 9 { progress("history: \(round + 1) of \(Self.historySnapshots) snapshots") }
    }
    let built = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
    progress(String(format: "history: %d snapshots built in %.1f s", Self.historySnapshots, built))

    var scenario = Scenario(
      name: "advise and why over \(Self.historySnapshots) snapshots", reference: "appbox no-change backup")
    var rows: [String: [Sample]] = [:]
    let html = work + "/advice.html"
    let last = "--last \(Self.historySnapshots) --repo \(repository)"
    let steps: [(String, String)] = [
      ("appbox no-change backup", "\(ab) --quiet backup \(app) --repo \(repository)"),
      ("appbox advise", "\(ab) advise \(app) \(last) >/dev/null"),
      ("appbox advise --json --html", "\(ab) --json advise \(app) \(last) --html \(html) >/dev/null"),
      (
        "appbox why: a file changing on every backup",
        "\(ab) why \(app) \(Churner.export) --repo \(repository) >/dev/null"
      ),
      (
        "appbox why: a file deleted 50 snapshots ago",
        "\(ab) why \(app) \(Churner.deleted) --repo \(repository) >/dev/null"
      ),
      (
        "appbox why: a folder, surveyed file by file",
        "\(ab) why \(app) \(Churner.thumbnails) --repo \(repository) >/dev/null"
      ),
    ]
    for run in 0..<runs {
      for (tool, command) in steps {
        rows[tool, default: []].append(try shell.time(command, memory: tool == "appbox advise"))
      }
      progress("advise and why run \(run + 1)/\(runs)")
    }
    scenario.rows = steps.map { ($0.0, rows[$0.0] ?? []) }
    scenario.absoluteTargets = [
      ("appbox advise", 2.0), ("appbox why: a file changing on every backup", 0.1),
      ("appbox why: a file deleted 50 snapshots ago", 0.1),
    ]
    scenario.notes = [
      String(
        format:
          "history: %d snapshots (one full backup, then small changes between incremental ones), built in %.0f s",
        Self.historySnapshots, built)
    ]
    return scenario
  }
}
