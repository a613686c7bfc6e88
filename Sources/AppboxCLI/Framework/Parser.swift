/// Options every command accepts, before or after the command name (never after `--`).
public struct GlobalOptions: Sendable, Equatable {
  public var root: String?
  /// Seconds to wait for a busy lock (`--wait`); nil: busy at once (exit 75).
  public var wait: Double?
  public var json = false
  public var quiet = false
  public var help = false
  public var version = false
  public init() {}

  static let descriptions: [CommandDescription.Option] = [
    .init("root", value: "DIR", help: "The device root (default: $APPBOX_ROOT, else $XDG_DATA_HOME/appbox)."),
    .init(
      "wait", value: "SECONDS",
      help: "Wait up to SECONDS for a lock another appbox holds, instead of exiting 75 at once."),
    .init("json", help: "Print one JSON document on stdout."),
    .init("quiet", help: "Print nothing but errors."),
    .init("help", help: "Show help for appbox or a command."),
    .init("version", help: "Show the version."),
  ]
}

/// The outcome of parsing a command line.
public struct Invocation: Sendable {
  public var globals: GlobalOptions
  /// The command to run, or nil when only help or the version was asked for.
  public var command: (any ParsableCommand.Type)?
  public var arguments: ParsedArguments
  /// The command chain resolved so far, for help (`[Keychain.self, KeychainAdd.self]`).
  public var chain: [any ParsableCommand.Type]
}

/// A declarative command-line parser: it knows commands only by their descriptions.
public struct ArgumentParser: Sendable {
  public let commands: [any ParsableCommand.Type]
  public init(commands: [any ParsableCommand.Type]) { self.commands = commands }

  /// Parses `arguments` (without the program name). Throws `UsageError` unless help
  /// was requested, in which case parsing is lenient and `command` may be nil.
  public func parse(_ arguments: [String]) throws -> Invocation {
    var globals = GlobalOptions()
    var chain: [any ParsableCommand.Type] = []
    var parsed = ParsedArguments()
    var tokens = arguments[...]
    var trailing: [String]?
    if let dash = tokens.firstIndex(of: "--") {
      trailing = Array(tokens[(dash + 1)...])
      tokens = tokens[..<dash]
    }
    var pendingError: UsageError?
    func fail(_ message: String) {
      if pendingError == nil {
        pendingError = UsageError(
          message, commandPath: chain.map { $0.description.name }.joined(separator: " "))
      }
    }

    var index = tokens.startIndex
    while index < tokens.endIndex {
      let token = tokens[index]
      index += 1
      if token.hasPrefix("--") {
        let body = token.dropFirst(2)
        let name: String
        var inline: String?
        if let equals = body.firstIndex(of: "=") {
          name = String(body[..<equals])
          inline = String(body[body.index(after: equals)...])
        } else {
          name = String(body)
        }
        let takeValue = { () -> String? in
          if let inline { return inline }
          guard index < tokens.endIndex else { return nil }
          defer { index += 1 }
          return tokens[index]
        }
        switch name {
        case "json", "quiet", "help", "version":
          if inline != nil { fail("--\(name) does not take a value") }
          if name == "json" { globals.json = true }
          if name == "quiet" { globals.quiet = true }
          if name == "help" { globals.help = true }
          if name == "version" { globals.version = true }
          continue
        case "root":
          guard let value = takeValue() else {
            fail("--root needs a directory")
            continue
          }
          globals.root = value
          continue
        case "wait":
          guard let value = takeValue(), let seconds = Double(value), seconds.isFinite, seconds >= 0 else {
            fail("--wait needs a number of seconds (0 or more)")
            continue
          }
          globals.wait = seconds
          continue
        default: break
        }
        guard let command = chain.last,
          let option = command.description.options.first(where: { $0.name == name })
        else {
          fail("unknown option '--\(name)'")
          continue
        }
        if option.takesValue {
          guard let value = takeValue() else {
            fail("--\(name) needs a value (\(option.valueName ?? option.choices!.joined(separator: "|")))")
            continue
          }
          if let choices = option.choices, !choices.contains(value) {
            fail("--\(name) must be one of \(choices.joined(separator: ", ")), not '\(value)'")
          }
          parsed.values[name, default: []].append(value)
        } else {
          if inline != nil { fail("--\(name) does not take a value") }
          parsed.flags.insert(name)
        }
      } else if token == "-h" {
        globals.help = true
      } else if token.count > 1 && token.hasPrefix("-")
        && !token.dropFirst().allSatisfy({ $0.isNumber || $0 == "." })
      {
        fail("unknown option '\(token)'")
      } else {
        guard let command = chain.last else {
          guard let found = commands.first(where: { $0.description.name == token }) else {
            fail("unknown command '\(token)'")
            continue
          }
          chain.append(found)
          continue
        }
        let description = command.description
        if !description.subcommands.isEmpty {
          if parsed.groupPositionals.count < description.groupPositionals.count {
            parsed.groupPositionals.append(token)
          } else if let sub = description.subcommands.first(where: { $0.description.name == token }) {
            chain.append(sub)
          } else {
            let names = description.subcommands.map { $0.description.name }.joined(separator: ", ")
            fail("unknown \(description.name) subcommand '\(token)' (expected one of: \(names))")
          }
        } else {
          parsed.positionals.append(token)
        }
      }
    }

    // A group given no subcommand runs its default one, if it has one.
    if let group = chain.last, !group.description.subcommands.isEmpty,
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
    guard let command = chain.last else { throw UsageError("no command given") }
    let description = command.description
    if !description.subcommands.isEmpty {
      if let missing = description.groupPositionals.dropFirst(parsed.groupPositionals.count).first {
        throw parsed.usage("missing \(missing.name)")
      }
      let names = description.subcommands.map { $0.description.name }.joined(separator: ", ")
      throw parsed.usage("missing subcommand (one of: \(names))")
    }

    // Arguments after `--` are the trailing command for `run`/`launch`, else positionals.
    if let trailing {
      if description.trailing != nil {
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
