import AppboxContainer
import AppboxCore
import Glibc

/// What `run --help` and `launch --help` say about the sandbox.
private let sandboxDiscussion = """
  The process is confined by the kernel (Landlock, through the appbox-sandbox helper): it may read and
  write only the app's Documents, Library and tmp; read (not write) its home; read and execute its
  bundle; read and execute /usr, /bin, /sbin, /lib*, /etc, /opt and its own /proc entry; and use
  /dev/null, /dev/tty, /dev/urandom, /dev/zero and /dev/random. Everything else is denied (other
  homes, the registry, the keychain, backups, /tmp), and it runs with no capabilities and
  no_new_privs. The environment is HOME and CFFIXED_USER_HOME = the home, TMPDIR = its tmp, plus PATH,
  LANG, LANGUAGE, LC_*, TERM and TZ from appbox's own; nothing else is passed. The working directory
  is the home. While it runs, uninstall, update and restore of the app exit 75. A kernel without
  Landlock is refused with exit 69 unless --allow-unconfined.
  """

private let allowUnconfinedOption = CommandDescription.Option(
  "allow-unconfined", help: "On a kernel without Landlock, run anyway, unconfined (with a warning).")

private let prewarmOption = CommandDescription.Option(
  "prewarm",
  help: "Start as the platform prewarms an app, before the user opens it (ActivePrewarm=1); works while the "
    + "device is locked.")

/// What `run --help` and `launch --help` say about a locked device.
private let lockedDiscussion = """
  While the device is locked the app starts anyway (this is how a prewarmed app runs) and opening
  its protected files fails with ENOKEY; APPBOX_PROTECTED_DATA_AVAILABLE is 1 or 0 as it starts.
  """

/// Runs a confined process and passes its exit status through. appbox ignores SIGINT and
/// SIGQUIT meanwhile, as a shell does for its foreground job: the app gets them from the
/// terminal and decides; appbox reports how it ended.
private func runConfined(
  _ context: CommandContext, _ app: String, prewarm: Bool,
  _ body: (DeviceSession, AppRecord) throws -> Int32
) throws -> CommandOutput {
  let session = try context.openDevice(mutating: false)
  let record = try session.app(app)
  noteLockedDevice(context, session, prewarm: prewarm)
  signal(SIGINT, SIG_IGN)
  signal(SIGQUIT, SIG_IGN)
  let status = try body(session, record)
  // A lock while the app held complete-unless-open files open could not finish: it can now.
  session.protection.finishPendingLock()
  return CommandOutput(exitStatus: status)
}

/// Says on stderr that the app starts without its protected data, unless that is expected
/// (a prewarm).
private func noteLockedDevice(_ context: CommandContext, _ session: DeviceSession, prewarm: Bool) {
  guard !prewarm, let status = try? session.protection.status(), status.isLocked else { return }
  context.note("note: the device is locked: the app's protected files are unavailable to it")
}

struct RunCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "run", abstract: "Run a command confined to an app's sandbox; exit with the command's status.",
    discussion: sandboxDiscussion + "\n\ntmp is left as it is. A command killed by signal N exits 128+N.\n"
      + lockedDiscussion,
    positionals: [appArgument], options: [allowUnconfinedOption, prewarmOption],
    trailing: .init("CMD [ARG...]", help: "The program (searched in PATH) and its arguments.", required: true)
  )
  let app: String
  let command: [String]
  let allowUnconfined: Bool
  let prewarm: Bool

  init(_ arguments: ParsedArguments) throws {
    app = arguments.positional(0)!
    command = arguments.trailing ?? []
    allowUnconfined = arguments.flag("allow-unconfined")
    prewarm = arguments.flag("prewarm")
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    try runConfined(context, app, prewarm: prewarm) { session, record in
      try session.run(
        record, command: command, options: SandboxOptions(allowUnconfined: allowUnconfined, prewarm: prewarm))
    }
  }
}

struct LaunchCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "launch",
    abstract: "Check the bundle's seal, then run its executable confined; exit with its status.",
    discussion: sandboxDiscussion
      + "\n\nA bundle whose seal is broken is refused (exit 65, naming the changed file). When no process\n"
      + "of the app runs, tmp is emptied first.\n" + lockedDiscussion,
    positionals: [appArgument], options: [allowUnconfinedOption, prewarmOption],
    trailing: .init("ARG...", help: "Arguments for the app's executable.", required: false))
  let app: String
  let arguments: [String]
  let allowUnconfined: Bool
  let prewarm: Bool

  init(_ arguments: ParsedArguments) throws {
    app = arguments.positional(0)!
    self.arguments = arguments.trailing ?? []
    allowUnconfined = arguments.flag("allow-unconfined")
    prewarm = arguments.flag("prewarm")
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    try runConfined(context, app, prewarm: prewarm) { session, record in
      try session.launch(
        record, arguments: arguments,
        options: SandboxOptions(allowUnconfined: allowUnconfined, prewarm: prewarm))
    }
  }
}
