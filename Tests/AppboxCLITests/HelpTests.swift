import AppboxTestSupport
import Foundation
import Testing

@testable import AppboxCLI

/// Runs the real command table in-process; returns status, stdout and stderr.
func runCLI(_ arguments: [String], environment: [String: String] = [:], columns: Int? = nil) -> (
  status: Int32, out: String, err: String
) {
  let out = CapturingSink(terminalColumns: columns)
  let err = CapturingSink()
  let status = AppboxCLI.runner.run(arguments, environment: environment, stdout: out, stderr: err)
  return (status, out.text, err.text)
}

/// A page of the command table: the names leading to it, and the placeholder-filled form
/// (`keychain APP get`) that always reached it.
struct PagePath: CustomStringConvertible, Sendable {
  var names: [String]
  var filled: [String]
  var isGroup: Bool
  var description: String { names.isEmpty ? "appbox" : names.joined(separator: " ") }

  /// Every page: the root, each command, each subcommand at any depth.
  static let all: [PagePath] = {
    var paths = [PagePath(names: [], filled: [], isGroup: true)]
    func visit(_ command: any ParsableCommand.Type, names: [String], filled: [String]) {
      let description = command.description
      let names = names + [description.name]
      let filled = filled + [description.name]
      paths.append(PagePath(names: names, filled: filled, isGroup: !description.subcommands.isEmpty))
      let positionals = description.groupPositionals.map(\.name)
      for sub in description.subcommands { visit(sub, names: names, filled: filled + positionals) }
    }
    for command in AppboxCLI.commands { visit(command, names: [], filled: []) }
    return paths
  }()

  static let leaves: [PagePath] = all.filter { !$0.isGroup }
  static let groups: [PagePath] = all.filter { $0.isGroup && !$0.names.isEmpty }
}

struct HelpReachabilityTests {
  /// `appbox keychain get --help` printed the keychain page (the hint of every keychain usage
  /// error pointed there); now every order a user tries gives the subcommand's own page.
  @Test(arguments: PagePath.all.filter { $0.names.count >= 2 })
  func subcommandPagesInEveryOrder(_ path: PagePath) {
    let reference = runCLI(["help"] + path.names)
    #expect(reference.status == 0 && reference.err.isEmpty, "\(path): \(reference.err)")
    let own =
      path.isGroup
      ? "USAGE: appbox \(path.filled.joined(separator: " ")) "
      : "USAGE: appbox \(path.filled.joined(separator: " "))"
    #expect(reference.out.contains(own), "help \(path) is not its own page:\n\(reference.out)")
    let forms: [[String]] = [
      path.names + ["--help"], path.filled + ["--help"], path.names + ["-h"], ["--help"] + path.names,
      [path.names[0], "--help"] + path.names.dropFirst(), ["help"] + path.filled,
    ]
    for form in forms {
      let result = runCLI(form)
      #expect(result.status == 0, "\(form): \(result.err)")
      #expect(result.out == reference.out, "\(form) does not show the page of '\(path)'")
    }
  }

  /// `device --help` and `repo --help` showed their default subcommand's page (`show`); a
  /// group's page lists every subcommand.
  @Test(arguments: PagePath.groups)
  func groupPagesListEverySubcommand(_ path: PagePath) throws {
    let page = runCLI(path.names + ["--help"])
    #expect(page.status == 0)
    let group = try #require(find(path.names))
    #expect(
      page.out.hasPrefix(
        TextLayout.wrap("OVERVIEW: \(group.description.abstract)", width: 80, indent: 10, firstIndent: 0)[0]))
    let section =
      page.out.components(separatedBy: "SUBCOMMANDS:\n").dropFirst().first?
      .components(separatedBy: "\n\n").first ?? ""
    for sub in group.description.subcommands {
      #expect(
        section.contains("\n  \(sub.description.name) ") || section.hasPrefix("  \(sub.description.name) "),
        "\(path) page does not list '\(sub.description.name)':\n\(page.out)")
    }
  }

  @Test func helpOfAnUnknownCommandSuggestsTheNearest() {
    let result = runCLI(["help", "instal"])
    #expect(result.status == 64)
    #expect(result.err.hasPrefix("Error: unknown command 'instal' (did you mean 'install'?)\n"))
    let sub = runCLI(["help", "keychain", "gte"])
    #expect(sub.status == 64)
    #expect(sub.err.contains("unknown keychain subcommand 'gte' (did you mean 'get'?"), "\(sub.err)")
  }

  /// The command at `names`.
  func find(_ names: [String]) -> (any ParsableCommand.Type)? {
    var candidates = AppboxCLI.commands
    var found: (any ParsableCommand.Type)?
    for name in names {
      found = candidates.first { $0.description.name == name }
      candidates = found?.description.subcommands ?? []
    }
    return found
  }
}

struct HelpContentTests {
  /// No page had an example, exit statuses or environment variables.
  @Test(arguments: PagePath.all)
  func everyPageHasExamplesExitStatusAndEnvironment(_ path: PagePath) {
    let page = runCLI(path.names + ["--help"]).out
    for section in ["\nEXAMPLES:\n", "\nEXIT STATUS:\n", "\nENVIRONMENT:\n"] {
      #expect(page.contains(section), "\(path) has no \(section.trimmingCharacters(in: .newlines))")
    }
    #expect(page.contains("\n  0    Success.\n"), "\(path)")
    #expect(page.contains("\n  64   "), "\(path)")
  }

  /// Every leaf declares examples of its own. Each command line in them parses and passes
  /// its command's validation, and each example runs its own page's command at least once.
  @Test(arguments: PagePath.leaves)
  func examplesParseToTheirOwnCommand(_ path: PagePath) throws {
    let command = try #require(HelpReachabilityTests().find(path.names))
    #expect(!command.description.examples.isEmpty, "\(path) declares no example")
    for example in command.description.examples {
      #expect(example.explanation.hasSuffix(":"), "\(path): '\(example.explanation)'")
      var runsItsPage = false
      for line in example.commands {
        let words = try exampleWords(line)
        do {
          let invocation = try AppboxCLI.runner.parser.parse(words)
          if path.names == ["help"] {
            runsItsPage = runsItsPage || invocation.globals.help
            continue
          }
          #expect(!invocation.globals.help, "\(line)")
          runsItsPage = runsItsPage || invocation.chain.map { $0.description.name } == path.names
          _ = try invocation.command?.init(invocation.arguments)
        } catch {
          Issue.record("example of '\(path)' does not parse: \(line): \(error)")
        }
      }
      #expect(runsItsPage, "an example of '\(path)' never runs it: \(example.commands)")
    }
  }

  /// The words of the appbox command in an example line: the part of a pipeline that starts
  /// with `appbox`, split as a shell would (quotes removed; $VAR kept as a word).
  func exampleWords(_ line: String) throws -> [String] {
    let segments = line.components(separatedBy: " | ").filter { $0.hasPrefix("appbox ") || $0 == "appbox" }
    try #require(segments.count == 1, "'\(line)' has no single appbox command")
    return Array(
      TextLayout.shellWords(segments[0]).map { word in
        var word = word
        if word.count >= 2, let first = word.first, first == "\"" || first == "'", word.last == first {
          word = String(word.dropFirst().dropLast())
        }
        return word
      }
      .dropFirst())
  }

  /// USAGE lines ran to 191 columns, and two descriptions were single 490-character lines.
  @Test(arguments: [40, 60, 80, 100])
  func everyPageFitsTheWidth(_ width: Int) {
    for path in PagePath.all {
      let page = runCLI(path.names + ["--help"], environment: ["COLUMNS": String(width)]).out
      for line in page.split(separator: "\n", omittingEmptySubsequences: false) {
        #expect(line.count <= width, "\(path) at \(width) columns: \(line.count): \(line)")
      }
    }
  }

  /// Without COLUMNS, the width is the terminal's (stdout's TIOCGWINSZ), else 80; at most 100.
  @Test func theWidthIsTheTerminalsElse80() {
    let narrow = runCLI(["backup", "--help"], columns: 52).out
    #expect(narrow.split(separator: "\n").allSatisfy { $0.count <= 52 })
    #expect(narrow.split(separator: "\n").contains { $0.count > 45 })
    let plain = runCLI(["backup", "--help"]).out
    #expect(plain.split(separator: "\n").allSatisfy { $0.count <= 80 })
    #expect(plain.split(separator: "\n").contains { $0.count > 70 })
    let wide = runCLI(["backup", "--help"], columns: 250).out
    #expect(wide.split(separator: "\n").allSatisfy { $0.count <= 100 })
    #expect(
      runCLI(["backup", "--help"], environment: ["COLUMNS": "60"], columns: 200).out
        .split(separator: "\n").allSatisfy { $0.count <= 60 })
  }

  /// Every variable a page names is one docs/environment.md documents.
  @Test func environmentVariablesAreDocumented() throws {
    let documented = try String(contentsOfFile: repositoryRoot + "/docs/environment.md", encoding: .utf8)
    var names = Set<String>()
    for path in PagePath.all {
      let page = runCLI(path.names + ["--help"]).out
      let section = page.components(separatedBy: "\nENVIRONMENT:\n").last ?? ""
      for line in section.split(separator: "\n") where line.hasPrefix("  ") && !line.hasPrefix("   ") {
        if let name = line.split(separator: " ").first, name == name.uppercased(),
          name.contains("_") || name.count > 3
        {
          names.insert(String(name))
        }
      }
    }
    #expect(names.contains("APPBOX_ROOT") && names.contains("APPBOX_PASSWORD_FILE"))
    for name in names { #expect(documented.contains("`\(name)`"), "\(name) is not in docs/environment.md") }
  }
}

struct ExitStatusTableTests {
  /// The shared table (`ExitStatus.meanings`, the overview's EXIT STATUS) is the one
  /// docs/command-line.md shows: the same statuses, in the same order.
  @Test func theDocumentedTableHasTheSameStatuses() throws {
    let text = try String(contentsOfFile: repositoryRoot + "/docs/command-line.md", encoding: .utf8)
    let section = try #require(text.components(separatedBy: "## Exit statuses").last)
    let documented = section.split(separator: "\n").compactMap { line -> Int32? in
      guard line.hasPrefix("| "), let cell = line.split(separator: "|").first else { return nil }
      return Int32(cell.trimmingCharacters(in: .whitespaces))
    }
    #expect(documented == ExitStatus.meanings.map(\.status))
  }
}

struct SuggestionTests {
  /// `appbox instal` said "unknown command" and no more.
  @Test func didYouMean() {
    let cases: [([String], String)] = [
      (["instal", "Notes.app"], "unknown command 'instal' (did you mean 'install'?)"),
      (["snapshot"], "unknown command 'snapshot' (did you mean 'snapshots'?)"),
      (["bakcup", "--all"], "unknown command 'bakcup' (did you mean 'backup'?)"),
      (["backup", "--all", "--repp", "/r"], "unknown option '--repp' (did you mean '--repo'?)"),
      (["list", "-json"], "unknown option '-json' (did you mean '--json'?)"),
      (
        ["backup", "--all", "--compress", "zstf"],
        "--compress must be one of none, gzip, zstd, not 'zstf' (did you mean 'zstd'?)"
      ),
      (["keychain", "com.example.notes", "gte"], "unknown keychain subcommand 'gte' (did you mean 'get'?"),
      (["device", "ini"], "unknown device subcommand 'ini' (did you mean 'init'?"),
      (["list", "--grups"], "unknown option '--grups' (did you mean '--groups'?)"),
    ]
    for (arguments, message) in cases {
      let result = runCLI(arguments)
      #expect(result.status == 64, "\(arguments)")
      #expect(result.err.hasPrefix("Error: \(message)"), "\(arguments): \(result.err)")
    }
    // Nothing near: no guess.
    #expect(runCLI(["frobnicate"]).err.hasPrefix("Error: unknown command 'frobnicate'\n"))
    #expect(Suggestions.nearest(to: "uninst", among: ["uninstall", "install"]) == ["uninstall"])
    #expect(Suggestions.editDistance(Array("bakcup"), Array("backup")) == 1)
  }

  /// Hints name a form that works: the page they point at exists, and a group's positional
  /// left out is named with its place.
  @Test func hintsNameTheFormThatWorks() {
    let missing = runCLI(["keychain", "get", "--service", "s", "--account", "a"])
    #expect(missing.status == 64)
    #expect(
      missing.err
        == "Error: missing APP: it comes before the subcommand, as in 'appbox keychain APP get'\n"
        + "See 'appbox help keychain get'\n")
    for arguments in [
      ["forget", "com.example.notes"], ["keychain", "x", "add"], ["backup"], ["list", "--bogus"],
    ] {
      let result = runCLI(arguments)
      let hint = result.err.split(separator: "\n").last.map(String.init) ?? ""
      #expect(hint.hasPrefix("See 'appbox help"), "\(arguments): \(result.err)")
      let command = hint.dropFirst("See '".count).dropLast().split(separator: " ").dropFirst().map(
        String.init)
      let page = runCLI(command)
      #expect(page.status == 0 && page.out.contains("USAGE: appbox \(arguments[0])"), "\(hint)")
    }
  }
}
