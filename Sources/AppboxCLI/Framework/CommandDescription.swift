/// A command's static description: help, usage and parsing are all generated from it.
public struct CommandDescription: Sendable {
  public var name: String
  public var abstract: String
  public var discussion: String?
  public var positionals: [Positional]
  public var options: [Option]
  /// Subcommands, for a command group such as `device` or `keychain`.
  public var subcommands: [any ParsableCommand.Type]
  /// The subcommand run when a group is given none (`device` means `device show`).
  public var defaultSubcommand: String?
  /// Positionals a group takes before its subcommand name (`files APP ls`).
  public var groupPositionals: [Positional]
  /// Whether arguments after `--` are accepted (for `run` and `launch`).
  public var trailing: Trailing?
  /// Command lines the page shows, each with what it does.
  public var examples: [Example]
  /// The exit statuses the command can return besides 0, 64 and 74 (which every page shows),
  /// with what they mean for it.
  public var exitStatuses: [ExitCode]
  /// Environment variables the command reads, besides those of its options (`Option.environment`).
  public var environment: [EnvironmentVariable]
  /// Whether `--json` prints one document or is refused.
  public var json: JSONOutput
  /// Whether every word after the command name is its own, uninterpreted (`simctl`, which
  /// speaks another tool's options): only a leading `--help` or `-h` is appbox's.
  public var rawArguments: Bool

  public init(
    name: String, abstract: String, discussion: String? = nil, positionals: [Positional] = [],
    options: [Option] = [], subcommands: [any ParsableCommand.Type] = [], defaultSubcommand: String? = nil,
    groupPositionals: [Positional] = [], trailing: Trailing? = nil, examples: [Example] = [],
    exitStatuses: [ExitCode] = [], environment: [EnvironmentVariable] = [], json: JSONOutput = .document,
    rawArguments: Bool = false
  ) {
    self.name = name
    self.abstract = abstract
    self.discussion = discussion
    self.positionals = positionals
    self.options = options
    self.subcommands = subcommands
    self.defaultSubcommand = defaultSubcommand
    self.groupPositionals = groupPositionals
    self.trailing = trailing
    self.examples = examples
    self.exitStatuses = exitStatuses
    self.environment = environment
    self.json = json
    self.rawArguments = rawArguments
  }

  /// A positional argument.
  public struct Positional: Sendable {
    public var name: String
    public var help: String
    public var isOptional: Bool
    public var isRepeating: Bool
    public init(_ name: String, help: String, optional: Bool = false, repeating: Bool = false) {
      self.name = name
      self.help = help
      self.isOptional = optional
      self.isRepeating = repeating
    }
  }

  /// A `--name` flag or a `--name VALUE` option.
  public struct Option: Sendable {
    public var name: String
    /// nil for a flag; the placeholder shown in help (`DIR`, `N`) for an option with a value.
    public var valueName: String?
    public var help: String
    /// Allowed values, checked by the parser and shown in help as `a|b|c`.
    public var choices: [String]?
    /// Whether the parser insists on it (`missing --service`); help shows it without brackets.
    public var isRequired: Bool
    /// The environment variables its default comes from (listed on the page's ENVIRONMENT).
    public var environment: [EnvironmentVariable]
    public init(
      _ name: String, value: String? = nil, help: String, choices: [String]? = nil, required: Bool = false,
      environment: [EnvironmentVariable] = []
    ) {
      self.name = name
      self.valueName = value
      self.help = help
      self.choices = choices
      self.isRequired = required
      self.environment = environment
    }
    public var takesValue: Bool { valueName != nil || choices != nil }
  }

  /// Arguments after `--`.
  public struct Trailing: Sendable {
    public var name: String
    public var help: String
    public var isRequired: Bool
    public init(_ name: String, help: String, required: Bool) {
      self.name = name
      self.help = help
      self.isRequired = required
    }
  }
}

/// A command: parsed from its description, validated by its initializer, then run.
public protocol ParsableCommand: Sendable {
  static var description: CommandDescription { get }
  /// Validates the parsed arguments; throws `UsageError` for anything malformed.
  init(_ arguments: ParsedArguments) throws
  /// Checks what depends on the global options (throws `UsageError`), before anything is opened.
  func validate(_ context: CommandContext) throws
  /// Does the work (one library call, usually) and returns what to print.
  func run(_ context: CommandContext) throws -> CommandOutput
  /// Whether the command may create the device root (install, device init). Every other
  /// command needs an existing device: a root without one is refused (66) before it runs.
  static var createsDevice: Bool { get }
}

extension ParsableCommand {
  public static var createsDevice: Bool { false }
  public func validate(_ context: CommandContext) throws {}
}

/// A command group has no work of its own; it only holds subcommands.
public protocol CommandGroup: ParsableCommand {}

extension CommandGroup {
  public init(_ arguments: ParsedArguments) throws { throw UsageError("choose a subcommand") }
  public func run(_ context: CommandContext) throws -> CommandOutput { CommandOutput() }
}
