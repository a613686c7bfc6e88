// Help pages, rendered from command descriptions alone, in a given width.
//
// A command's page: OVERVIEW (its abstract and discussion), USAGE, SUBCOMMANDS (a group's),
// ARGUMENTS, OPTIONS, GLOBAL OPTIONS, EXAMPLES, EXIT STATUS, ENVIRONMENT. A group's page
// shows its own examples and the first of each subcommand's, and the exit statuses and
// variables of all its subcommands; the root page shows the shared exit-status table.

/// Renders help text from command descriptions alone.
enum HelpFormatter {
  /// The page of `appbox` itself. `manual` holds the root's examples (its name and abstract
  /// are not shown: the overview names the version).
  static func rootHelp(
    commands: [any ParsableCommand.Type], version: String, manual: CommandDescription? = nil, width: Int = 80
  ) -> String {
    let page = Page(width: width)
    var lines = TextLayout.wrap(
      "OVERVIEW: appbox \(version): iOS-style sandboxed app containers on Linux.", width: width, indent: 10,
      firstIndent: 0)
    lines += [""]
    lines += page.usage(["appbox", "[--root DIR]", "[--json]", "[--quiet]", "COMMAND", "[ARGS...]"])
    if commands.contains(where: { $0.description.name == ArgumentParser.helpCommandName }) {
      lines += page.usage(["appbox", "help", "[COMMAND [SUBCOMMAND]]"], label: "       ")
    }
    lines += ["", "COMMANDS:"]
    for command in commands {
      lines += page.row(usageHead(command.description), command.description.abstract)
    }
    lines += page.globalOptions()
    lines += page.examples(manual?.examples ?? [])
    lines += ["", "EXIT STATUS:"]
    for (status, meaning) in ExitStatus.meanings { lines += page.statusRow(String(status), meaning) }
    lines += page.environment(GlobalOptions.descriptions.flatMap(\.environment))
    lines += [""]
    lines += TextLayout.wrap(
      "Each command's page lists the variables it reads (docs/environment.md has every one).", width: width)
    lines += [""]
    lines += TextLayout.wrap("See 'appbox help COMMAND' for a command's page.", width: width)
    return lines.joined(separator: "\n") + "\n"
  }

  static func commandHelp(chain: [any ParsableCommand.Type], width: Int = 80) -> String {
    guard let command = chain.last else { return "" }
    let page = Page(width: width)
    let description = command.description
    let isGroup = !description.subcommands.isEmpty
    var lines = TextLayout.wrap("OVERVIEW: \(description.abstract)", width: width, indent: 10, firstIndent: 0)
    if let discussion = description.discussion { lines += [""] + TextLayout.reflow(discussion, width: width) }
    // A group's own positionals come before its subcommand (`files APP SUBCOMMAND`).
    let prefix =
      ["appbox"] + chain.flatMap { [$0.description.name] + $0.description.groupPositionals.map(\.name) }
    lines += [""]
    lines += page.usage(prefix + (isGroup ? ["SUBCOMMAND"] : usageTail(description)))
    if isGroup {
      lines += ["", "SUBCOMMANDS:"]
      for sub in description.subcommands {
        lines += page.row(usageHead(sub.description), sub.description.abstract)
      }
      if let name = description.defaultSubcommand {
        lines += [""] + TextLayout.wrap("With no subcommand, runs '\(name)'.", width: width)
      }
    }
    let positionals = chain.flatMap { $0.description.groupPositionals } + description.positionals
    if !positionals.isEmpty || description.trailing != nil {
      lines += ["", "ARGUMENTS:"]
      lines += positionals.flatMap { page.row($0.name, $0.help) }
      if let trailing = description.trailing { lines += page.row(trailing.name, trailing.help) }
    }
    if !description.options.isEmpty {
      lines += ["", "OPTIONS:"]
      lines += description.options.flatMap { page.row(optionLabel($0), optionHelp($0)) }
    }
    lines += page.globalOptions()
    let leaves = isGroup ? leafDescriptions(of: command) : [description]
    lines += page.examples(isGroup ? groupExamples(command) : description.examples)
    lines += ["", "EXIT STATUS:"]
    if isGroup {
      // Every status a subcommand can return, with the shared meaning.
      let statuses = Set(leaves.flatMap { $0.allExitCodes.map(\.status) }).sorted()
      for status in statuses {
        lines += page.statusRow(String(status), ExitStatus.meaning(of: status) ?? "")
      }
      lines += [""] + TextLayout.wrap("Each subcommand's page says what a status means for it.", width: width)
    } else {
      for code in description.allExitCodes {
        lines += page.statusRow(code.label, code.meaning ?? ExitStatus.meaning(of: code.status) ?? "")
      }
    }
    var seen = Set<String>()
    lines += page.environment(
      (description.environment + leaves.flatMap(\.allEnvironment)).filter { seen.insert($0.name).inserted })
    if isGroup {
      let path = (["appbox", "help"] + chain.map { $0.description.name } + ["SUBCOMMAND"]).joined(
        separator: " ")
      lines += [""] + TextLayout.wrap("See '\(path)' for a subcommand's page.", width: width)
    }
    return lines.joined(separator: "\n") + "\n"
  }

  /// The descriptions of the commands under a group, nested groups' included.
  static func leafDescriptions(of command: any ParsableCommand.Type) -> [CommandDescription] {
    let description = command.description
    if description.subcommands.isEmpty { return [description] }
    return description.subcommands.flatMap(leafDescriptions(of:))
  }

  /// A group's examples: its own, then the first of each subcommand's (a nested group's own first).
  static func groupExamples(_ command: any ParsableCommand.Type) -> [Example] {
    command.description.examples
      + command.description.subcommands.compactMap { sub in
        sub.description.subcommands.isEmpty ? sub.description.examples.first : groupExamples(sub).first
      }
  }

  /// "install BUNDLE.app" — the name and its arguments, for command lists.
  static func usageHead(_ description: CommandDescription) -> String {
    ([description.name] + description.groupPositionals.map(\.name)
      + (description.subcommands.isEmpty ? usageTail(description, options: false) : ["SUBCOMMAND"])).joined(
        separator: " ")
  }

  static func usageTail(_ description: CommandDescription, options: Bool = true) -> [String] {
    var parts: [String] = description.positionals.map { positional in
      var text = positional.name
      if positional.isRepeating { text += " ..." }
      return positional.isOptional || positional.isRepeating ? "[\(text)]" : text
    }
    if options {
      parts += description.options.map { $0.isRequired ? optionLabel($0) : "[\(optionLabel($0))]" }
    }
    if let trailing = description.trailing {
      parts.append(trailing.isRequired ? "-- \(trailing.name)" : "[-- \(trailing.name)]")
    }
    return parts
  }

  /// "--compress none|gzip|zstd": the choices when they are few and short, else a placeholder
  /// ("--type TYPE", the choices then listed in the option's help).
  static func optionLabel(_ option: CommandDescription.Option) -> String {
    if let choices = option.choices {
      let inline = choices.joined(separator: "|")
      return "--\(option.name) " + (inline.count <= maximumInlineChoices ? inline : option.name.uppercased())
    }
    if let value = option.valueName { return "--\(option.name) \(value)" }
    return "--\(option.name)"
  }

  /// The longest `a|b|c` shown in place of an option's value.
  static let maximumInlineChoices = 24

  /// An option's help, with its choices when the label does not show them.
  static func optionHelp(_ option: CommandDescription.Option) -> String {
    guard let choices = option.choices, choices.joined(separator: "|").count > maximumInlineChoices else {
      return option.help
    }
    return option.help + " \(option.name.uppercased()) is one of: " + choices.joined(separator: ", ") + "."
  }
}

/// The layout of one page: its width and the column where a row's text starts.
private struct Page {
  let width: Int
  /// 28 in 84 columns or more; narrower pages give labels less room.
  var column: Int { min(28, width / 3) }

  func row(_ label: String, _ text: String) -> [String] {
    TextLayout.row(label, text, column: column, width: width)
  }

  /// An exit status and its meaning, in a narrow first column.
  func statusRow(_ label: String, _ meaning: String) -> [String] {
    TextLayout.row(label, meaning, column: 7, width: width)
  }

  /// "USAGE: appbox backup [APP ...] [--all] …": units never split, continuation lines aligned
  /// after the command's name (or indented 9 when that would leave too little room).
  func usage(_ units: [String], label: String = "USAGE: ") -> [String] {
    let nameUnits = units.prefix { !$0.hasPrefix("[") && !$0.hasPrefix("-") && $0 == $0.lowercased() }
    let head = label + nameUnits.joined(separator: " ")
    let rest = Array(units.dropFirst(nameUnits.count))
    let longest = rest.map(\.count).max() ?? 0
    let indent = head.count + 1 <= width / 2 && head.count + 1 + longest <= width ? head.count + 1 : 9
    return TextLayout.wrap(words: [head] + rest, width: width, indent: indent, firstIndent: 0)
  }

  func globalOptions() -> [String] {
    ["", "GLOBAL OPTIONS:"]
      + GlobalOptions.descriptions.flatMap { row(HelpFormatter.optionLabel($0), $0.help) }
  }

  func examples(_ examples: [Example]) -> [String] {
    guard !examples.isEmpty else { return [] }
    var lines = ["", "EXAMPLES:"]
    for (index, example) in examples.enumerated() {
      if index > 0 { lines.append("") }
      lines += TextLayout.wrap(example.explanation, width: width, indent: 2, firstIndent: 2)
      for command in example.commands {
        lines += TextLayout.commandLine(command, prompt: "$ ", indent: 4, width: width)
      }
    }
    return lines
  }

  func environment(_ variables: [EnvironmentVariable]) -> [String] {
    guard !variables.isEmpty else { return ["", "ENVIRONMENT:", "  None."] }
    return ["", "ENVIRONMENT:"] + variables.flatMap { row($0.name, $0.help) }
  }
}
