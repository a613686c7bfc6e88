import AppboxContainer
import AppboxCore
import Foundation

// `openurl URL`: the app that claims the URL's scheme (CFBundleURLTypes), launched with it
// (docs/lifecycle.md, "URL schemes").

struct OpenURLCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "openurl",
    abstract: "Launch the app that claims the URL's scheme (CFBundleURLTypes) with the URL.",
    discussion: """
      The app whose Info.plist lists the URL's scheme under CFBundleURLTypes / CFBundleURLSchemes \\
      (compared without regard to case) is launched as 'launch --detach' launches it, with the URL as \\
      its last argument and in APPBOX_OPEN_URL; openurl returns once it runs and prints its pid. When \\
      several apps claim one scheme, the one installed first wins (by its install time, which an \\
      update, a revert and a reinstall after offloading keep; then by bundle identifier), as the \\
      platform's "first installed wins"; --json lists every claimant. --foreground waits for the app \\
      instead and exits with its status.
      """,
    positionals: [.init("URL", help: "A URL with a scheme: notes://open?id=1, mailto:a@example.com.")],
    options: [
      .init(
        "foreground",
        help: "Run the app in the foreground (its output on this terminal) and exit with its status.")
    ],
    examples: [
      .init("Open a note in the app that handles notes:// URLs:", "appbox openurl 'notes://open?id=42'"),
      .init(
        "Which app would open it, for a script:", "appbox --json openurl notes://x | jq -r .app"),
    ],
    exitStatuses: [
      .usage("Malformed, or the URL has no scheme."),
      .noInput("No installed app claims the URL's scheme."),
      .unavailable("The app that claims it is offloaded, or no bubblewrap, user namespaces or Landlock."),
      .dataError("The app's bundle seal is broken."),
    ],
    environment: EnvironmentVariable.sandbox)
  let url: String
  let foreground: Bool

  init(_ arguments: ParsedArguments) throws {
    url = arguments.positional(0)!
    foreground = arguments.flag("foreground")
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    if foreground && context.globals.json {
      throw CLIFailure(
        .invalidArgument, "--json is refused with --foreground: the app writes its own output to stdout")
    }
    let session = try context.openDevice(mutating: false)
    let claim = try session.claim(of: url)
    let app = claim.winner
    var options = SandboxOptions()
    options.environment[URLScheme.environmentVariable] = url
    if foreground {
      let status = try session.launch(try session.app(app.containerID), arguments: [url], options: options)
      return CommandOutput(exitStatus: status)
    }
    let start = try context.launchDetached(app.containerID, arguments: [url], options: options)
    let pid = start.run.appPID ?? start.run.jail?.pid ?? start.run.owner.pid
    return CommandOutput(
      text: "Opened \(Terminal.escape(url)) in \(app.bundleIdentifier) (pid \(pid))"
        + (claim.claimants.count > 1
          ? "\n  also claimed by "
            + claim.claimants.dropFirst().map(\.bundleIdentifier).joined(separator: ", ")
            + " (the first installed wins)" : ""),
      json: .object([
        ("url", .string(url)), ("scheme", .string(claim.scheme)),
        ("app", .string(app.bundleIdentifier)),
        ("containerID", .string(app.containerID)), ("pid", .int(pid)),
        ("launch", .optional(start.run.launchID)),
        ("log", .optional(start.log)),
        ("claimants", .array(claim.claimants.map { .string($0.bundleIdentifier) })),
      ]))
  }
}
