import AppboxTestSupport
import Testing

@testable import AppboxCLI

/// A command with a required option and group positionals, as `keychain APP add` has.
struct Needy: ParsableCommand {
  static let description = CommandDescription(
    name: "needy", abstract: "Needs --service.",
    options: [
      .init("service", value: "S", help: "A service.", required: true),
      .init("label", value: "L", help: "L."),
    ])
  init(_ arguments: ParsedArguments) throws {}
  func run(_ context: CommandContext) throws -> CommandOutput { CommandOutput(text: "ran") }
}

struct NeedyGroup: CommandGroup {
  static let description = CommandDescription(
    name: "box", abstract: "A group.", subcommands: [Needy.self],
    groupPositionals: [.init("APP", help: "An app.")])
}

struct RequiredOptionTests {
  let parser = ArgumentParser(commands: [NeedyGroup.self])

  @Test func aMissingRequiredOptionIsAUsageError() throws {
    #expect(throws: UsageError.self) { try parser.parse(["box", "app", "needy", "--label", "x"]) }
    do {
      _ = try parser.parse(["box", "app", "needy"])
    } catch let error as UsageError {
      #expect(error.message == "missing --service")
      #expect(error.commandPath == "box needy")
    }
    #expect(try parser.parse(["box", "app", "needy", "--service", "s"]).arguments.value("service") == "s")
    // Help is still available without it.
    #expect(try parser.parse(["box", "app", "needy", "--help"]).globals.help)
  }

  @Test func helpShowsRequiredOptionsUnbracketedAndGroupPositionals() {
    let sub = HelpFormatter.commandHelp(chain: [NeedyGroup.self, Needy.self])
    #expect(sub.contains("USAGE: appbox box APP needy --service S [--label L]\n"))
    let group = HelpFormatter.commandHelp(chain: [NeedyGroup.self])
    #expect(group.contains("USAGE: appbox box APP SUBCOMMAND\n"))
    #expect(group.contains("  APP                     An app.\n"))
    #expect(group.contains("See 'appbox help box SUBCOMMAND'"))
  }
}
