/// Renders help text from command descriptions alone.
enum HelpFormatter {
  static func rootHelp(commands: [any ParsableCommand.Type], version: String) -> String {
    var lines = [
      "OVERVIEW: appbox \(version): iOS-style sandboxed app containers on Linux.",
      "",
      "USAGE: appbox [--root DIR] [--json] [--quiet] COMMAND [ARGS...]",
      "",
      "COMMANDS:",
    ]
    for command in commands {
      lines.append(row(usageHead(command.description), command.description.abstract))
    }
    lines += ["", "GLOBAL OPTIONS:"]
    lines += GlobalOptions.descriptions.map { row(optionLabel($0), $0.help) }
    lines += ["", "See 'appbox COMMAND --help' for a command's arguments and options."]
    return lines.joined(separator: "\n") + "\n"
  }

  static func commandHelp(chain: [any ParsableCommand.Type]) -> String {
    guard let command = chain.last else { return "" }
    let description = command.description
    var lines = ["OVERVIEW: \(description.abstract)", ""]
    if let discussion = description.discussion { lines += [discussion, ""] }
    // A group's own positionals come before its subcommand (`files APP SUBCOMMAND`).
    let groupPositionals = (description.subcommands.isEmpty ? Array(chain.dropLast()) : chain)
      .flatMap { $0.description.groupPositionals }
    let prefix =
      (["appbox", chain[0].description.name] + groupPositionals.map(\.name)
      + chain.dropFirst().map { $0.description.name }).joined(separator: " ")
    if description.subcommands.isEmpty {
      lines.append("USAGE: " + ([prefix] + usageTail(description)).joined(separator: " "))
    } else {
      lines.append("USAGE: \(prefix) SUBCOMMAND")
      lines += ["", "SUBCOMMANDS:"]
      for sub in description.subcommands {
        lines.append(row(usageHead(sub.description), sub.description.abstract))
      }
      if let name = description.defaultSubcommand { lines += ["", "With no subcommand, runs '\(name)'."] }
    }
    let positionals = groupPositionals + description.positionals
    if !positionals.isEmpty {
      lines += ["", "ARGUMENTS:"]
      lines += positionals.map { row($0.name, $0.help) }
    }
    if let trailing = description.trailing {
      if positionals.isEmpty { lines += ["", "ARGUMENTS:"] }
      lines.append(row(trailing.name, trailing.help))
    }
    if !description.options.isEmpty {
      lines += ["", "OPTIONS:"]
      lines += description.options.map { row(optionLabel($0), $0.help) }
    }
    lines += ["", "GLOBAL OPTIONS:"]
    lines += GlobalOptions.descriptions.map { row(optionLabel($0), $0.help) }
    if description.subcommands.isEmpty == false {
      lines += ["", "See '\(prefix) SUBCOMMAND --help' for a subcommand's arguments and options."]
    }
    return lines.joined(separator: "\n") + "\n"
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

  static func optionLabel(_ option: CommandDescription.Option) -> String {
    if let choices = option.choices { return "--\(option.name) \(choices.joined(separator: "|"))" }
    if let value = option.valueName { return "--\(option.name) \(value)" }
    return "--\(option.name)"
  }

  /// One two-column row, wrapping the help text at 100 columns.
  static func row(_ label: String, _ help: String) -> String {
    let width = 28
    let indent = String(repeating: " ", count: width + 2)
    var words = help.split(separator: " ").map(String.init)
    var lines: [String] = []
    var current = ""
    while !words.isEmpty {
      let word = words.removeFirst()
      if !current.isEmpty && current.count + 1 + word.count > 100 - width - 2 {
        lines.append(current)
        current = word
      } else {
        current = current.isEmpty ? word : current + " " + word
      }
    }
    lines.append(current)
    let head = "  " + label
    var result: String
    if head.count <= width {
      result = head + String(repeating: " ", count: width - head.count + 2) + lines[0]
    } else {
      result = head + "\n" + indent + lines[0]
    }
    for line in lines.dropFirst() { result += "\n" + indent + line }
    return result
  }
}
