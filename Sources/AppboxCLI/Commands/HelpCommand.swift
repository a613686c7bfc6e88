/// `appbox help [COMMAND [SUBCOMMAND]]`: the parser turns it into a page request
/// (`appbox help keychain get` is `appbox keychain get --help`), so it never runs itself.
struct HelpCommand: ParsableCommand {
  static let description = CommandDescription(
    name: ArgumentParser.helpCommandName, abstract: "Show the page of appbox, a command or a subcommand.",
    discussion: """
      Every page has the command's usage, arguments and options, examples, the exit statuses it can
      return and the environment variables it reads. 'appbox CMD --help', 'appbox CMD -h' and
      'appbox help CMD' show the same page; a group's subcommand pages are reachable with or without
      the group's own arguments ('appbox keychain get --help', 'appbox keychain APP get --help').
      With --json the page is the "help" member of one JSON document. Pages fit the terminal's width
      (COLUMNS, else the terminal's own, else 80; at most 100).
      """,
    positionals: [
      .init("COMMAND", help: "The command (none: the overview of every command).", optional: true),
      .init(
        "SUBCOMMAND", help: "A subcommand of a group, and of a nested group.", optional: true, repeating: true
      ),
    ],
    examples: [
      .init("The overview, then a command's page:", "appbox help", "appbox help backup"),
      .init(
        "A subcommand's page, three ways:", "appbox help keychain get", "appbox keychain get --help",
        "appbox keychain com.example.notes get --help"),
    ],
    exitStatuses: [.usage("An unknown command or subcommand (the error names the nearest one).")])

  init(_ arguments: ParsedArguments) throws { throw arguments.usage("give a command name to 'help'") }
  func run(_ context: CommandContext) throws -> CommandOutput { CommandOutput() }
}
