import AppboxTestSupport
import Foundation
import Testing

@testable import AppboxCLI

/// A command with every kind of argument, to exercise the parser alone.
struct Sample: ParsableCommand {
  static let description = CommandDescription(
    name: "sample", abstract: "A sample.",
    positionals: [
      .init("APP", help: "An app."), .init("MORE", help: "More.", optional: true, repeating: true),
    ],
    options: [
      .init("repo", value: "DIR", help: "A repo."), .init("full", help: "Full."),
      .init("compress", help: "How.", choices: ["none", "gzip", "zstd"]),
    ])
  init(_ arguments: ParsedArguments) throws {}
  func run(_ context: CommandContext) throws -> CommandOutput { CommandOutput(text: "ran") }
}

struct Trail: ParsableCommand {
  static let description = CommandDescription(
    name: "trail", abstract: "Trailing.", positionals: [.init("APP", help: "An app.")],
    trailing: .init("CMD", help: "The command.", required: true))
  init(_ arguments: ParsedArguments) throws {}
  func run(_ context: CommandContext) throws -> CommandOutput { CommandOutput() }
}

struct Group: CommandGroup {
  static let description = CommandDescription(
    name: "group", abstract: "A group.", subcommands: [Sample.self],
    groupPositionals: [.init("APP", help: "An app.")])
}

struct ParserTests {
  let parser = ArgumentParser(commands: [Sample.self, Trail.self, Group.self])

  @Test func globalOptionsBeforeAndAfterTheCommand() throws {
    let invocation = try parser.parse(["--json", "sample", "a", "--root", "/r", "--quiet"])
    #expect(invocation.globals.json && invocation.globals.quiet)
    #expect(invocation.globals.root == "/r")
    #expect(invocation.arguments.positionals == ["a"])
    #expect(try parser.parse(["sample", "--root=/x", "a"]).globals.root == "/x")
  }

  @Test func optionsFlagsChoicesAndRepeatingPositionals() throws {
    let parsed = try parser.parse(["sample", "a", "b", "--repo", "R", "c", "--full", "--compress=zstd"])
      .arguments
    #expect(parsed.positionals == ["a", "b", "c"])
    #expect(parsed.value("repo") == "R" && parsed.flag("full") && parsed.value("compress") == "zstd")
  }

  @Test func usageErrors() {
    let cases: [([String], String)] = [
      (["sample"], "missing APP"),
      (["sample", "a", "--nope"], "unknown option '--nope'"),
      (["sample", "a", "--repo"], "--repo needs a value"),
      (["sample", "a", "--compress", "bz2"], "--compress must be one of none, gzip, zstd, not 'bz2'"),
      (["sample", "a", "--full=yes"], "--full does not take a value"),
      (["bogus"], "unknown command 'bogus'"),
      ([], "no command given"),
      (["trail", "a"], "missing CMD after '--'"),
      (["group", "x", "other"], "unknown group subcommand 'other'"),
      (["group", "x"], "missing subcommand"),
      (["group"], "missing APP"),
    ]
    for (arguments, message) in cases {
      do {
        _ = try parser.parse(arguments)
        Issue.record("\(arguments) parsed")
      } catch let error as UsageError {
        #expect(error.message.contains(message), "\(arguments): \(error.message)")
      } catch { Issue.record("\(error)") }
    }
  }

  @Test func doubleDashEndsOptionsAndGlobals() throws {
    let invocation = try parser.parse(["trail", "app", "--", "ls", "--json", "-l"])
    #expect(!invocation.globals.json)
    #expect(invocation.arguments.trailing == ["ls", "--json", "-l"])
    // Without a trailing command, what follows `--` is positional (names starting with '-').
    let sample = try parser.parse(["sample", "a", "--", "--weird"])
    #expect(sample.arguments.positionals == ["a", "--weird"])
  }

  @Test func groupsTakePositionalsBeforeTheSubcommand() throws {
    let invocation = try parser.parse(["group", "com.app", "sample", "x", "--full"])
    #expect(invocation.arguments.groupPositionals == ["com.app"])
    #expect(invocation.arguments.positionals == ["x"])
    #expect(invocation.arguments.commandPath == ["group", "sample"])
  }

  @Test func negativeNumbersArePositionals() throws {
    #expect(try parser.parse(["sample", "a", "-5"]).arguments.positionals == ["a", "-5"])
  }

  @Test func runnerMapsUsageErrorsTo64WithAPointerToHelp() {
    let runner = CommandRunner(commands: [Sample.self], version: "1")
    let out = CapturingSink()
    let err = CapturingSink()
    #expect(runner.run(["sample"], environment: [:], stdout: out, stderr: err) == 64)
    #expect(err.text == "Error: missing APP\nSee 'appbox help sample'\n")
    #expect(out.text.isEmpty)
  }
}

/// `--help` for the root and every command matches the committed golden files
/// (Fixtures/golden/help). Set APPBOX_UPDATE_GOLDEN=1 to rewrite them after a deliberate change.
struct GoldenHelpTests {
  static func helpPaths() -> [[String]] { PagePath.all.map(\.names) }

  @Test(arguments: helpPaths())
  func helpMatchesGolden(_ path: [String]) throws {
    let out = CapturingSink()
    let err = CapturingSink()
    // Group positionals (APP) go before the subcommand: the filled form reached every page before.
    let arguments = PagePath.all.first { $0.names == path }!.filled
    let status = AppboxCLI.runner.run(arguments + ["--help"], environment: [:], stdout: out, stderr: err)
    #expect(status == 0)
    #expect(err.text.isEmpty)
    let name = path.isEmpty ? "appbox" : path.joined(separator: "-")
    let file = fixturePath("golden/help/\(name).txt")
    if ProcessInfo.processInfo.environment["APPBOX_UPDATE_GOLDEN"] != nil {
      try out.text.write(toFile: file, atomically: true, encoding: .utf8)
    }
    let golden = try String(contentsOfFile: file, encoding: .utf8)
    #expect(out.text == golden, "help for '\(name)' differs from \(file)")
  }
}
