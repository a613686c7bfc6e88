// The parts of a command's page beyond its arguments: examples, the exit statuses it can
// return and the environment variables it reads. Each is declared once, in the command's
// description (or, for a variable an option's default comes from, on the option), and the
// help pages, `appbox help` and the tests all read them from there.

/// One example on a help page: what it does, and the command lines that do it.
public struct Example: Sendable {
  public var explanation: String
  /// Whole command lines, starting with `appbox`. A line may end in a pipe to another program
  /// (`| tar -tv`); the tests parse everything before it.
  public var commands: [String]
  public init(_ explanation: String, _ commands: String...) {
    self.explanation = explanation
    self.commands = commands
  }
}

/// An exit status a command can return, with what it means for that command.
public struct ExitCode: Sendable, Equatable {
  /// The status as shown ("66"); `run` shows "N" for the app's own status.
  public var label: String
  /// The number, for ordering (the app's own status sorts after the sysexits ones).
  public var status: Int32
  /// What it means for this command; nil: the shared meaning (`ExitStatus.meanings`).
  public var meaning: String?

  public init(_ status: Int32, _ meaning: String? = nil) {
    label = String(status)
    self.status = status
    self.meaning = meaning
  }

  public init(label: String, sortingAs status: Int32, _ meaning: String) {
    self.label = label
    self.status = status
    self.meaning = meaning
  }

  public static func usage(_ meaning: String? = nil) -> ExitCode { ExitCode(ExitStatus.usage, meaning) }
  public static func dataError(_ meaning: String? = nil) -> ExitCode {
    ExitCode(ExitStatus.dataError, meaning)
  }
  public static func noInput(_ meaning: String? = nil) -> ExitCode { ExitCode(ExitStatus.noInput, meaning) }
  public static func unavailable(_ meaning: String? = nil) -> ExitCode {
    ExitCode(ExitStatus.unavailable, meaning)
  }
  public static func cannotCreate(_ meaning: String? = nil) -> ExitCode {
    ExitCode(ExitStatus.cannotCreate, meaning)
  }
  public static func ioError(_ meaning: String? = nil) -> ExitCode { ExitCode(ExitStatus.ioError, meaning) }
  public static func busy(_ meaning: String? = nil) -> ExitCode { ExitCode(ExitStatus.tempFailure, meaning) }
  public static func denied(_ meaning: String? = nil) -> ExitCode {
    ExitCode(ExitStatus.noPermission, meaning)
  }
}

/// An environment variable appbox reads, with what it does (docs/environment.md has them all).
public struct EnvironmentVariable: Sendable, Equatable {
  public var name: String
  public var help: String
  public init(_ name: String, _ help: String) {
    self.name = name
    self.help = help
  }
}

/// Whether a command's outcome can be one JSON document on stdout.
public enum JSONOutput: Sendable, Equatable {
  /// `--json` prints one document (the default).
  case document
  /// `--json` is refused with exit 64, for this reason (`run` and `launch`: the app writes
  /// its own stdout).
  case refused(String)
  /// `--json` is refused as `refused` is, unless the flag `--FLAG` is given (`launch
  /// --detach`: the app's output goes to its log).
  case refusedUnless(flag: String, reason: String)
}

extension CommandDescription {
  /// The exit statuses shown on the page: 0 and 64 always, 74 for any command that does more
  /// than parse (any file can fail to read), then the declared ones, in order, one per status.
  var allExitCodes: [ExitCode] {
    var codes = [ExitCode(0)] + exitStatuses
    if !codes.contains(where: { $0.status == ExitStatus.usage }) { codes.append(.usage()) }
    if !codes.contains(where: { $0.status == ExitStatus.ioError }) { codes.append(.ioError()) }
    var seen = Set<String>()
    return codes.filter { seen.insert($0.label).inserted }.sorted { $0.status < $1.status }
  }

  /// The variables the page lists: those its options' defaults come from, the command's own,
  /// then those of the global options; each once.
  var allEnvironment: [EnvironmentVariable] {
    var seen = Set<String>()
    let all =
      options.flatMap(\.environment) + environment + GlobalOptions.descriptions.flatMap(\.environment)
    return all.filter { seen.insert($0.name).inserted }
  }
}

extension ExitStatus {
  /// What each status means, for every command: the shared table of the help pages.
  public static let meanings: [(status: Int32, meaning: String)] = [
    (0, "Success."),
    (usage, "Usage: the command line is malformed (the error line says how; nothing was changed)."),
    (dataError, "Bad data: an invalid bundle, property list, archive, catalog or snapshot."),
    (
      noInput,
      "No such thing: app, snapshot, file, preference, keychain item or repository; or no device at the root "
        + "(only install and device init create one)."
    ),
    (
      unavailable,
      "Unavailable: bubblewrap, user namespaces, Landlock or file encryption missing; the device is locked."
    ),
    (cannotCreate, "Cannot create: it exists already (an installed app, a duplicate item, a repository)."),
    (ioError, "I/O: a file or the network failed to read or write."),
    (tempFailure, "Busy: another appbox holds the lock (wait with --wait SECONDS), or the app is running."),
    (noPermission, "Denied: the sandbox, an entitlement, a wrong password or passcode, or a symbolic link."),
  ]

  /// The shared meaning of `status`, if it has one.
  static func meaning(of status: Int32) -> String? { meanings.first { $0.status == status }?.meaning }
}
