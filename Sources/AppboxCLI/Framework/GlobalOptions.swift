import AppboxCore

/// Options every command accepts, before or after the command name (never after `--`).
public struct GlobalOptions: Sendable, Equatable {
  public var root: String?
  /// How long to wait for a busy lock (`--wait`); nil: as `$APPBOX_LOCK_TIMEOUT` says, else
  /// busy at once (exit 75). The command's `CommandContext.lockWait` is what counts.
  public var wait: LockWait?
  public var json = false
  /// JSON status lines on stderr instead of a bar (`--json-progress`, docs/progress.md).
  public var jsonProgress = false
  public var quiet = false
  public var help = false
  public var version = false
  public init() {}

  static let descriptions: [CommandDescription.Option] = [
    .init(
      "root", value: "DIR", help: "The device root (default: $APPBOX_ROOT, else $XDG_DATA_HOME/appbox).",
      environment: [.root, .xdgDataHome, .home]),
    .init(
      "wait", value: "SECONDS",
      help: "Wait up to SECONDS for a lock another appbox holds, instead of exiting 75 at once.",
      environment: [.lockTimeout]),
    .init("json", help: "Print one JSON document on stdout, whatever the outcome (usage errors included)."),
    .init("json-progress", help: "Write progress as JSON lines on stderr (see docs/progress.md)."),
    .init("quiet", help: "Print nothing but errors."),
    .init("help", help: "Show help for appbox or a command, as 'appbox help' does.", environment: [.columns]),
    .init("version", help: "Show the version."),
  ]

  /// Sets the flag `name` (one of the flags above); false when `name` is no global flag.
  mutating func setFlag(_ name: String) -> Bool {
    switch name {
    case "json": json = true
    case "json-progress": jsonProgress = true
    case "quiet": quiet = true
    case "help": help = true
    case "version": version = true
    default: return false
    }
    return true
  }
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
