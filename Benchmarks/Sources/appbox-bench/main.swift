// appbox-bench: generates app homes and measures appbox side by side with GNU tar,
// bsdtar and restic on the same tree in one run. Prints medians and ratios, never a
// single absolute time, as Markdown (stdout and Benchmarks/results/).
//
//   appbox-bench bundle DIR [--seed S]
//   appbox-bench generate HOME --files N --bytes B [--seed S] [--content random|mixed]
//   appbox-bench mutate HOME --percent P [--seed S] [--in-place] [--content random|mixed]
//   appbox-bench in-place-files HOME [--seed S] [--content random|mixed]
//   appbox-bench run small|large|huge --appbox PATH [--runs N] [--work DIR] [--results DIR] [--only history|browse|repository|backup|restore] [--keep] [--content random|mixed]
//   appbox-bench archive-throughput [--results DIR]
//   appbox-bench frame-choices [--results DIR]
//   appbox-bench device-backup --appbox PATH [--files N] [--runs N] [--work DIR] [--results DIR]
import AppboxTestSupport
import Foundation
import Glibc

func option(_ name: String, in arguments: [String]) -> String? {
  guard let index = arguments.firstIndex(of: "--" + name), index + 1 < arguments.count else { return nil }
  return arguments[index + 1]
}

func fail(_ message: String) -> Never {
  FileHandle.standardError.write(Data("appbox-bench: \(message)\n".utf8))
  exit(64)
}

func progress(_ message: String) { FileHandle.standardError.write(Data("bench: \(message)\n".utf8)) }

let arguments = Array(CommandLine.arguments.dropFirst())
let seed = option("seed", in: arguments).flatMap(UInt64.init) ?? 42
guard let profile = ContentProfile(rawValue: option("content", in: arguments) ?? "random") else {
  fail("--content takes random or mixed")
}

do {
  switch arguments.first {
  case "bundle":
    guard arguments.count > 1 else { fail("usage: bundle DIR") }
    try generateBundle(at: arguments[1], seed: seed)
  case "generate":
    guard arguments.count > 1, let files = option("files", in: arguments).flatMap(Int.init),
      let bytes = option("bytes", in: arguments).flatMap(Int64.init)
    else { fail("usage: generate HOME --files N --bytes B [--seed S]") }
    try generateData(
      home: arguments[1], shape: HomeShape(files: files, bytes: bytes, seed: seed), profile: profile)
  case "mutate":
    guard arguments.count > 1, let percent = option("percent", in: arguments).flatMap(Double.init) else {
      fail("usage: mutate HOME --percent P [--seed S]")
    }
    if arguments.contains("--in-place") {
      print(try mutateInPlace(home: arguments[1], percent: percent, seed: seed, profile: profile))
    } else {
      let result = try mutate(home: arguments[1], percent: percent, seed: seed, profile: profile)
      print("modified \(result.modified), deleted \(result.deleted), added \(result.added)")
    }
  case "in-place-files":
    guard arguments.count > 1 else { fail("usage: in-place-files HOME [--seed S]") }
    try generateInPlaceFiles(home: arguments[1], seed: seed, profile: profile)
  case "run":
    guard arguments.count > 1, let size = BenchSize(rawValue: arguments[1]),
      let appbox = option("appbox", in: arguments)
    else { fail("usage: run small|large|huge --appbox PATH [--runs N] [--work DIR] [--results DIR]") }
    var bench = Bench(size: size, appbox: appbox)
    if let runs = option("runs", in: arguments).flatMap(Int.init) { bench.runs = runs }
    if let work = option("work", in: arguments) { bench.work = work }
    bench.only = option("only", in: arguments)
    bench.keep = arguments.contains("--keep")
    bench.profile = profile
    let results = option("results", in: arguments) ?? "Benchmarks/results"
    let name = size.rawValue + (bench.only.map { "-" + $0 } ?? "") + (profile == .mixed ? "-mixed" : "")
    try makeDirectories(results)
    bench.partialPath = results + "/\(name).partial.md"
    let text = try bench.runAll()
    print(text, terminator: "")
    try text.write(toFile: results + "/\(name).md", atomically: true, encoding: .utf8)
    progress("results written to \(results)/\(name).md")
  case "archive-throughput":
    let results = option("results", in: arguments) ?? "Benchmarks/results"
    let text = try archiveThroughput()
    print(text, terminator: "")
    try makeDirectories(results)
    try text.write(toFile: results + "/archive-throughput.md", atomically: true, encoding: .utf8)
  case "frame-choices":
    let results = option("results", in: arguments) ?? "Benchmarks/results"
    let text = try frameChoices()
    print(text, terminator: "")
    try makeDirectories(results)
    try text.write(toFile: results + "/frame-choices.md", atomically: true, encoding: .utf8)
  case "device-backup":
    guard let appbox = option("appbox", in: arguments) else {
      fail("usage: device-backup --appbox PATH [--files N] [--runs N] [--work DIR] [--results DIR]")
    }
    var bench = DeviceBackupBench(appbox: appbox)
    if let files = option("files", in: arguments).flatMap(Int.init) { bench.files = files }
    if let runs = option("runs", in: arguments).flatMap(Int.init) { bench.runs = runs }
    if let work = option("work", in: arguments) { bench.work = work }
    let results = option("results", in: arguments) ?? "Benchmarks/results"
    let text = try bench.run()
    print(text, terminator: "")
    try makeDirectories(results)
    try text.write(toFile: results + "/device-backup.md", atomically: true, encoding: .utf8)
    try? FileManager.default.removeItem(atPath: bench.work)
  default:
    fail(
      "usage: appbox-bench bundle|generate|mutate|run|archive-throughput|device-backup ... (see the header of Benchmarks/Sources/appbox-bench/main.swift)"
    )
  }
} catch {
  FileHandle.standardError.write(Data("appbox-bench: \(error)\n".utf8))
  exit(1)
}
