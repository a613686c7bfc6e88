// The declarative parser: it knows commands only by their descriptions.
//
// Tokens before `--` are read left to right. `--name`, `--name VALUE` and `--name=VALUE`
// are global options wherever they stand, else options of the deepest command reached so
// far; other tokens are a command, then a group's positionals and a subcommand, then the
// command's positionals. A group's positional (the APP of `keychain APP get`) may be left
// out before a subcommand name when help is asked for (`keychain get --help`); otherwise
// leaving it out is an error that names the form that works.
//
// Help is asked for by `--help`, `-h` or a leading `help` (`appbox help keychain get` is
// `appbox keychain get --help`). Then everything but an unknown command or subcommand is
// forgiven, so a page is reachable from any half-written command line, and a group
// asked about shows its own page, not its default subcommand's.
//
// Unknown names get "did you mean" from `Suggestions`.

import AppboxCore

/// A declarative command-line parser: it knows commands only by their descriptions.
public struct ArgumentParser: Sendable {
  public let commands: [any ParsableCommand.Type]
  public init(commands: [any ParsableCommand.Type]) { self.commands = commands }

  /// The name of the command that shows pages (`appbox help CMD`), when one is declared.
  static let helpCommandName = "help"

  /// Parses `arguments` (without the program name). Throws `UsageError` unless help
  /// was requested, in which case parsing is lenient and `command` may be nil.
  public func parse(_ arguments: [String]) throws -> Invocation {
    var state = ParseState(arguments)
    state.run(commands: commands)
    do {
      return try state.finish()
    } catch var error as UsageError {
      error.globals = state.globals
      throw error
    }
  }
}

/// One parse in progress.
private struct ParseState {
  var globals = GlobalOptions()
  var chain: [any ParsableCommand.Type] = []
  var parsed = ParsedArguments()
  var tokens: ArraySlice<String>
  var trailing: [String]?
  var index: Int
  /// The first malformed thing seen; forgiven when help is asked for.
  var pendingError: UsageError?
  /// An unknown command or subcommand: an error even when help is asked for.
  var unknownName: UsageError?
  /// The group whose positionals were left out before its subcommand, and the first missing.
  var skippedPositional: (group: String, name: String)?
  /// The `help` command, when the command line began with it (`appbox help …`).
  var helpCommand: (any ParsableCommand.Type)?
  /// Whether `--help` or `-h` was given (`appbox help --help` is the page of `help`).
  var helpFlag = false

  init(_ arguments: [String]) {
    tokens = arguments[...]
    if let dash = tokens.firstIndex(of: "--") {
      trailing = Array(tokens[(dash + 1)...])
      tokens = tokens[..<dash]
    }
    index = tokens.startIndex
  }

  var commandPath: String { chain.map { $0.description.name }.joined(separator: " ") }

  mutating func fail(_ message: String) {
    if pendingError == nil { pendingError = UsageError(message, commandPath: commandPath) }
  }

  mutating func run(commands: [any ParsableCommand.Type]) {
    while index < tokens.endIndex {
      let token = tokens[index]
      index += 1
      if let command = chain.last, command.description.rawArguments {
        // The command's own words (simctl's): only a leading --help or -h is appbox's.
        if parsed.positionals.isEmpty, token == "--help" || token == "-h" {
          globals.help = true
          helpFlag = true
        } else {
          parsed.positionals.append(token)
        }
        continue
      }
      if token.hasPrefix("--") {
        option(token)
      } else if token == "-h" {
        globals.help = true
        helpFlag = true
      } else if token.count > 1 && token.hasPrefix("-")
        && !token.dropFirst().allSatisfy({ $0.isNumber || $0 == "." })
      {
        let known = optionNames()
        let name = String(token.dropFirst())
        fail(
          "unknown option '\(token)'"
            + (known.contains(name)
              ? " (did you mean '--\(name)'?)" : Suggestions.hint(for: name, among: known, prefix: "--")))
      } else {
        word(token, commands: commands)
      }
    }
  }

  /// The option names valid here: the deepest command's, then the global ones.
  func optionNames() -> [String] {
    (chain.last?.description.options.map(\.name) ?? []) + GlobalOptions.descriptions.map(\.name)
  }

  mutating func option(_ token: String) {
    let body = token.dropFirst(2)
    let name: String
    var inline: String?
    if let equals = body.firstIndex(of: "=") {
      name = String(body[..<equals])
      inline = String(body[body.index(after: equals)...])
    } else {
      name = String(body)
    }
    func takeValue(_ state: inout ParseState) -> String? {
      if let inline { return inline }
      guard state.index < state.tokens.endIndex else { return nil }
      defer { state.index += 1 }
      return state.tokens[state.index]
    }
    if globals.setFlag(name) {
      if name == "help" { helpFlag = true }
      if inline != nil { fail("--\(name) does not take a value") }
      return
    }
    switch name {
    case "root":
      guard let value = takeValue(&self) else { return fail("--root needs a directory") }
      globals.root = value
      return
    case "wait":
      guard let value = takeValue(&self), let wait = LockWait.parse(value) else {
        return fail("--wait needs a number of seconds (0 or more)")
      }
      globals.wait = wait
      return
    default: break
    }
    guard let command = chain.last, let option = command.description.options.first(where: { $0.name == name })
    else {
      return fail(
        "unknown option '--\(name)'" + Suggestions.hint(for: name, among: optionNames(), prefix: "--"))
    }
    if option.takesValue {
      guard let value = takeValue(&self) else {
        return fail("--\(name) needs a value (\(option.valueName ?? option.choices!.joined(separator: "|")))")
      }
      if let choices = option.choices, !choices.contains(value) {
        fail(
          "--\(name) must be one of \(choices.joined(separator: ", ")), not '\(value)'"
            + Suggestions.hint(for: value, among: choices))
      }
      parsed.values[name, default: []].append(value)
    } else {
      if inline != nil { fail("--\(name) does not take a value") }
      parsed.flags.insert(name)
    }
  }

  /// A token that is no option: a command, a group's positional or subcommand, a positional.
  mutating func word(_ token: String, commands: [any ParsableCommand.Type]) {
    guard let command = chain.last else {
      if token == ArgumentParser.helpCommandName, helpCommand == nil, !helpFlag,
        let help = commands.first(where: { $0.description.name == token })
      {
        globals.help = true  // `help CMD [SUB]` is `CMD [SUB] --help`
        helpCommand = help
        return
      }
      guard let found = commands.first(where: { $0.description.name == token }) else {
        let names = commands.map { $0.description.name }
        if unknownName == nil {
          unknownName = UsageError(
            "unknown command '\(token)'" + Suggestions.hint(for: token, among: names), commandPath: "")
        }
        return
      }
      chain.append(found)
      return
    }
    let description = command.description
    guard !description.subcommands.isEmpty else {
      parsed.positionals.append(token)
      return
    }
    func subcommand(named name: String) -> (any ParsableCommand.Type)? {
      description.subcommands.first { $0.description.name == name }
    }
    let positionalsGiven = parsed.groupPositionals.count
    if positionalsGiven < description.groupPositionals.count {
      // A subcommand's name where the APP belongs: the APP was left out, unless the next
      // token is a subcommand too (an app may be called "list").
      let next = index < tokens.endIndex ? tokens[index] : nil
      let nextIsSubcommand = next.flatMap(subcommand(named:)) != nil
      if let sub = subcommand(named: token), !nextIsSubcommand {
        if skippedPositional == nil {
          skippedPositional = (commandPath, description.groupPositionals[positionalsGiven].name)
        }
        parsed.groupPositionals += description.groupPositionals.dropFirst(positionalsGiven).map(\.name)
        chain.append(sub)
        return
      }
      // A near miss of a subcommand's name, where no app name is likely (bundle identifiers
      // and container ids have dots or dashes): a typo, not an APP.
      let names = description.subcommands.map { $0.description.name }
      let hint = Suggestions.hint(for: token, among: names)
      if !nextIsSubcommand, !hint.isEmpty, !token.contains("."), !token.contains("-") {
        if unknownName == nil {
          unknownName = UsageError(
            "unknown \(commandPath) subcommand '\(token)'\(hint) (expected one of: \(names.joined(separator: ", ")))",
            commandPath: commandPath)
        }
        return
      }
      parsed.groupPositionals.append(token)
    } else if let sub = subcommand(named: token) {
      chain.append(sub)
    } else if unknownName == nil {
      let names = description.subcommands.map { $0.description.name }
      unknownName = UsageError(
        "unknown \(commandPath) subcommand '\(token)'" + Suggestions.hint(for: token, among: names)
          + " (expected one of: \(names.joined(separator: ", ")))", commandPath: commandPath)
    }
  }

  mutating func finish() throws -> Invocation {
    if let unknownName, !globals.version { throw unknownName }
    if let helpCommand, helpFlag, chain.isEmpty { chain = [helpCommand] }
    // A group given no subcommand runs its default one, if it has one (not when its page is asked for).
    if !globals.help, let group = chain.last, !group.description.subcommands.isEmpty,
      parsed.groupPositionals.count == group.description.groupPositionals.count,
      let name = group.description.defaultSubcommand,
      let sub = group.description.subcommands.first(where: { $0.description.name == name })
    {
      chain.append(sub)
    }
    parsed.commandPath = chain.map { $0.description.name }

    if globals.help || globals.version {
      return Invocation(globals: globals, command: nil, arguments: parsed, chain: chain)
    }
    if let pendingError { throw pendingError }
    guard let command = chain.last else { throw UsageError("no command given", commandPath: "") }
    if let (group, name) = skippedPositional {
      throw parsed.usage(
        "missing \(name): it comes before the subcommand, as in 'appbox \(group) \(name) "
          + "\(command.description.name)'")
    }
    let description = command.description
    if !description.subcommands.isEmpty {
      if let missing = description.groupPositionals.dropFirst(parsed.groupPositionals.count).first {
        throw parsed.usage("missing \(missing.name)")
      }
      let names = description.subcommands.map { $0.description.name }.joined(separator: ", ")
      throw parsed.usage("missing subcommand (one of: \(names))")
    }
    if globals.json, case .refused(let reason) = description.json {
      throw parsed.usage("--json is refused here: \(reason)")
    }
    if globals.json, case .refusedUnless(let flag, let reason) = description.json,
      !parsed.flags.contains(flag)
    {
      throw parsed.usage("--json is refused here: \(reason)")  // the page says --\(flag) takes it
    }

    // Arguments after `--` are the trailing command for `run`/`launch`, else positionals.
    if let trailing {
      if description.rawArguments {
        parsed.positionals += ["--"] + trailing
      } else if description.trailing != nil {
        parsed.trailing = trailing
      } else {
        parsed.positionals += trailing
      }
    }
    try checkArity(description, parsed)
    return Invocation(globals: globals, command: command, arguments: parsed, chain: chain)
  }

  private func checkArity(_ description: CommandDescription, _ parsed: ParsedArguments) throws {
    let specs = description.positionals
    let required = specs.filter { !$0.isOptional && !$0.isRepeating }.count
    if parsed.positionals.count < required {
      throw parsed.usage("missing \(specs[parsed.positionals.count].name)")
    }
    if !specs.contains(where: \.isRepeating), parsed.positionals.count > specs.count {
      throw parsed.usage("unexpected argument '\(parsed.positionals[specs.count])'")
    }
    if let missing = description.options.first(where: { $0.isRequired && parsed.values[$0.name] == nil }) {
      throw parsed.usage("missing --\(missing.name)")
    }
    if let trailing = description.trailing, trailing.isRequired, (parsed.trailing ?? []).isEmpty {
      throw parsed.usage("missing \(trailing.name) after '--'")
    }
  }
}
