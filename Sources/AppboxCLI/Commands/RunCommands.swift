import AppboxContainer
import AppboxCore
import Glibc

/// What `run --help` and `launch --help` say about the sandbox.
private let sandboxDiscussion = """
  The process runs in a jail built by bubblewrap (required: without bwrap, or with user
  namespaces disabled, this exits 69; there is no weaker fallback). It has its own user, mount,
  pid, ipc, uts and cgroup namespaces, a new session (no controlling terminal), no capabilities
  and no_new_privs, and runs as the app's own uid (as root: that host uid, which owns the app's
  data; unprivileged: mapped to you). It sees only /usr, the few /etc files programs need (its
  own passwd and group, never shadow), its own /proc and a minimal /dev, and its home at
  /var/mobile/Applications/<CONTAINER-ID>: the bundle read-only, Documents, Library and tmp
  read-write but never executable (also at /tmp). Nothing else of the device (other homes, the
  registry, the keychain, backups) exists in its view. Inside, Landlock repeats these rules and
  scopes signals and abstract sockets, and a seccomp filter denies terminal injection (TIOCSTI,
  TIOCLINUX), mounts, new namespaces, ptrace attach, keyrings, bpf, userfaultfd, perf and module
  calls, fscrypt key and policy changes, and AF_VSOCK sockets. Processes: at most 256 per run
  (RLIMIT_NPROC, counted in the run's own user namespace, so each run of the app has its own 256:
  two runs at once may have 512); with a delegated cgroup v2 ($APPBOX_CGROUP, or appbox's own when
  it lets children use pids and memory) also pids.max 256 and memory.max 4 GiB per run, else memory
  is not capped. The network is a namespace of its own whose outbound connections pasta (the
  'passt' package, required) relays through the host: the outside is reachable, the host's
  loopback services, abstract sockets and /proc/net are not, and no port is forwarded in.
  --network none leaves it an empty namespace; --network host gives it the host's (localhost
  services included). stdin, stdout and stderr are passed as they are.
  The environment is HOME and CFFIXED_USER_HOME = the home, TMPDIR = its tmp, plus PATH, LANG,
  LANGUAGE, LC_*, TERM and TZ from appbox's own; nothing else is passed. The working directory is
  the home. The keychain: while the app runs, this appbox process serves its SecItem requests
  (its own access groups, as 'appbox keychain' applies them) over descriptor 3, named by
  APPBOX_SECITEM_FD; appbox-secitem (add, get, update, delete, list) is on its PATH. appbox waits until every process of the app is gone (a daemonised child dies with
  it); meanwhile uninstall, update, restore and import of the app exit 75. SIGTERM, SIGINT,
  SIGHUP and SIGQUIT sent to appbox are passed on to the app.
  """

private let allowUnconfinedOption = CommandDescription.Option(
  "allow-unconfined",
  help: "On a kernel without Landlock, run anyway in the jail without Landlock (with a warning).")

private let networkOption = CommandDescription.Option(
  "network",
  help: "none: an empty network namespace (its own loopback only); host: the host's, loopback services "
    + "included; default: its own namespace with outbound access through pasta.",
  choices: ["none", "host"])

/// The options both commands take.
private func sandboxOptions(_ arguments: ParsedArguments) -> SandboxOptions {
  SandboxOptions(
    allowUnconfined: arguments.flag("allow-unconfined"),
    network: arguments.value("network").flatMap(JailNetwork.init(rawValue:)) ?? .own,
    prewarm: arguments.flag("prewarm"))
}

private let prewarmOption = CommandDescription.Option(
  "prewarm",
  help: "Start as the platform prewarms an app, before the user opens it (ActivePrewarm=1); works while the "
    + "device is locked.")

/// What `run --help` and `launch --help` say about a locked device.
private let lockedDiscussion = """
  While the device is locked the app starts anyway (this is how a prewarmed app runs) and opening
  its protected files fails with ENOKEY; APPBOX_PROTECTED_DATA_AVAILABLE is 1 or 0 as it starts.
  """

/// Why `run` and `launch` refuse --json (exit 64).
private let jsonRefusal =
  "the app writes its own output to stdout, which cannot be one JSON document (leave --json out)"

/// What `run` and `launch` exit with: the app's own status, or appbox's when it could not start it.
private func confinedExitCodes(launch: Bool) -> [ExitCode] {
  [
    ExitCode(
      label: "N", sortingAs: 1000,
      "The \(launch ? "app's executable" : "command")'s own status, as it exited (128+N: killed by signal N)."
    ),
    .usage("Malformed, or --json given: the app's output cannot be one JSON document."),
    .noApp,
    .unavailable("No bubblewrap, no user namespaces, or no Landlock (see --allow-unconfined)."),
  ]
    + (launch
      ? [.dataError("The bundle's seal is broken: a file changed since install (the error names it).")] : [])
}

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
    positionals: [appArgument], options: [networkOption, allowUnconfinedOption, prewarmOption],
    trailing: .init(
      "CMD [ARG...]", help: "The program (searched in PATH) and its arguments.", required: true),
    examples: [
      .init("A shell in the app's sandbox, as its own user:", "appbox run com.example.notes -- /bin/sh"),
      .init(
        "One command, with no network:", "appbox run com.example.notes --network none -- ls -la Documents"),
    ],
    exitStatuses: confinedExitCodes(launch: false),
    environment: EnvironmentVariable.sandbox,
    json: .refused(jsonRefusal))
  let app: String
  let command: [String]
  let options: SandboxOptions

  init(_ arguments: ParsedArguments) throws {
    app = arguments.positional(0)!
    command = arguments.trailing ?? []
    options = sandboxOptions(arguments)
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    try runConfined(context, app, prewarm: options.prewarm) { session, record in
      try session.run(record, command: command, options: options)
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
    positionals: [appArgument], options: [networkOption, allowUnconfinedOption, prewarmOption, detachOption],
    trailing: .init("ARG...", help: "Arguments for the app's executable.", required: false),
    examples: [
      .init("Check the seal and run the app:", "appbox launch com.example.notes"),
      .init(
        "Start it as the platform prewarms it, with arguments:",
        "appbox launch com.example.notes --prewarm -- --verbose"),
      .init(
        "Start it in the background, look at it, read its output and stop it:",
        "appbox launch com.example.notes --detach", "appbox ps", "appbox logs com.example.notes",
        "appbox terminate com.example.notes"),
    ],
    exitStatuses: confinedExitCodes(launch: true),
    environment: EnvironmentVariable.sandbox,
    json: .refusedUnless(flag: "detach", reason: jsonRefusal))
  let app: String
  let arguments: [String]
  let options: SandboxOptions
  let detach: Bool

  init(_ arguments: ParsedArguments) throws {
    app = arguments.positional(0)!
    self.arguments = arguments.trailing ?? []
    options = sandboxOptions(arguments)
    detach = arguments.flag("detach")
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    if detach {
      let start = try context.launchDetached(app, arguments: arguments, options: options)
      return detachedLaunchOutput(start)
    }
    return try runConfined(context, app, prewarm: options.prewarm) { session, record in
      try session.launch(record, arguments: arguments, options: options)
    }
  }
}

private let detachOption = CommandDescription.Option(
  "detach",
  help: "Start the app in the background and return once it runs, printing its pid: its stdout and stderr go "
    + "to its log ('appbox logs'), 'appbox ps' lists it, 'appbox terminate' stops it. With --json: "
    + "{app, containerID, pid, launch, log}.")

/// What `launch --detach` prints.
func detachedLaunchOutput(_ start: DetachedLaunchStart) -> CommandOutput {
  let run = start.run
  let pid = run.appPID ?? run.jail?.pid ?? run.owner.pid
  return CommandOutput(
    text: "Launched \(run.bundleIdentifier) in the background (pid \(pid))"
      + (start.log.map { "\n  log  \($0)" } ?? ""),
    json: .object([
      ("app", .string(run.bundleIdentifier)), ("containerID", .string(run.containerID)),
      ("pid", .int(pid)), ("launch", .optional(run.launchID)), ("log", .optional(start.log)),
    ]))
}

extension CommandContext {
  /// Starts a detached launch of `app` (a supervisor runs it: DetachedApps.swift) and returns
  /// once it runs, or fails with the status the launch would have failed with.
  func launchDetached(
    _ app: String, arguments: [String], options: SandboxOptions, standardOutput: String? = nil,
    standardError: String? = nil
  ) throws -> DetachedLaunchStart {
    let session = try openDevice(mutating: false)
    let record = try session.app(app)
    try session.refuseOffloadedLaunch(record)
    noteLockedDevice(self, session, prewarm: options.prewarm)
    let request = DetachedLaunchRequest(
      root: session.root.path, containerID: record.containerID, arguments: arguments,
      network: options.network,
      allowUnconfined: options.allowUnconfined, prewarm: options.prewarm, environment: options.environment,
      standardOutputPath: standardOutput, standardErrorPath: standardError)
    return try DetachedLaunch.start(request, environment: environment)
  }
}
