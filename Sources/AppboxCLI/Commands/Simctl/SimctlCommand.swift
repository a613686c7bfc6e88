import AppboxContainer
import AppboxCore
import AppboxPlist
import Foundation
import Glibc

// `appbox simctl VERB DEVICE …`: the verbs of `xcrun simctl` that map onto appbox, with
// simctl's arguments and output formats, so QA scripts port by replacing `xcrun simctl`
// (docs/simctl.md lists every difference). Each verb is a thin adapter over the command or
// library call appbox has for it; DEVICE is `booted`, the device's UDID or its name (the one
// device at --root / $APPBOX_ROOT). A verb or flag simctl has and appbox does not map exits
// 64 naming it.

/// The verbs, in the order help lists them.
let simctlVerbs = [
  "list", "get_app_container", "install", "uninstall", "launch", "terminate", "spawn", "openurl", "listapps",
  "appinfo", "keychain", "erase", "clone",
]

struct SimctlCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "simctl",
    abstract: "The xcrun simctl verbs that map onto appbox, with simctl's arguments and output formats.",
    discussion: """
      For scripts written for 'xcrun simctl': replace 'xcrun simctl' with 'appbox simctl'. DEVICE is \\
      'booted', the device's UDID or its name: the device at --root or $APPBOX_ROOT, which 'list' shows \\
      as booted. Verbs: list [devices|devicetypes|runtimes|pairs] [-j|--json]; get_app_container DEVICE \\
      BUNDLE [app|data|groups|GROUP]; install DEVICE PATH; uninstall DEVICE BUNDLE; launch \\
      [--terminate-running-process] [--console|--console-pty] [--stdout=PATH] [--stderr=PATH] DEVICE \\
      BUNDLE [ARG...]; terminate DEVICE BUNDLE; spawn DEVICE PATH [ARG...] (PATH inside an app's \\
      bundle or home: it runs in that app's sandbox); openurl DEVICE URL; listapps DEVICE; appinfo \\
      DEVICE BUNDLE; keychain DEVICE reset; erase DEVICE|all; clone DEVICE NAME (a new device, \\
      beside this root). SIMCTL_CHILD_NAME=value variables reach launched and spawned apps as \\
      NAME=value. Every word after 'simctl' is simctl's: put appbox's own options (--root) before \\
      it. Other verbs and flags exit 64; appbox's exit statuses replace simctl's.
      """,
    positionals: [
      .init("VERB", help: "One of: " + simctlVerbs.joined(separator: ", ") + "."),
      .init("ARG", help: "The verb's arguments, as simctl takes them.", optional: true, repeating: true),
    ],
    examples: [
      .init(
        "The data container of an app, then its bundle:",
        "appbox simctl get_app_container booted com.example.notes data",
        "appbox simctl get_app_container booted com.example.notes"),
      .init(
        "Launch an app (terminating a running one first), then stop it:",
        "appbox simctl launch --terminate-running-process booted com.example.notes",
        "appbox simctl terminate booted com.example.notes"),
      .init(
        "The installed apps as simctl prints them, and the devices as JSON:", "appbox simctl listapps booted",
        "appbox simctl list devices -j"),
    ],
    exitStatuses: [
      .usage("An unsupported verb or flag (the line names it), or a malformed command line."),
      .noInput("No such device, app, group or file."),
      .appBusy,
    ],
    environment: EnvironmentVariable.sandbox,
    json: .refused("simctl prints xcrun simctl's own formats (its JSON is 'simctl list -j')"),
    rawArguments: true)
  let words: [String]

  init(_ arguments: ParsedArguments) throws { words = arguments.positionals }

  func run(_ context: CommandContext) throws -> CommandOutput {
    var simctl = Simctl(context: context, words: words)
    return try simctl.run()
  }
}

/// One simctl command line being carried out.
struct Simctl {
  let context: CommandContext
  var words: [String]

  init(context: CommandContext, words: [String]) {
    self.context = context
    self.words = words
  }

  func usage(_ message: String) -> CLIFailure { CLIFailure(.invalidArgument, "simctl: " + message) }

  mutating func run() throws -> CommandOutput {
    guard !words.isEmpty else {
      throw usage("no verb given (one of: \(simctlVerbs.joined(separator: ", ")))")
    }
    let verb = words.removeFirst()
    switch verb {
    case "list": return try list()
    case "get_app_container": return try appContainer()
    case "install": return try install()
    case "uninstall": return try uninstall()
    case "launch": return try launch()
    case "terminate": return try terminate()
    case "spawn": return try spawn()
    case "openurl": return try openURL()
    case "listapps": return try listApps()
    case "appinfo": return try appInfo()
    case "keychain": return try keychain()
    case "erase": return try erase()
    case "clone": return try clone()
    default:
      throw usage(
        "the verb '\(verb)' is not supported by appbox (supported: \(simctlVerbs.joined(separator: ", ")))")
    }
  }

  // MARK: Arguments

  /// Takes the leading flags of `allowed` (a flag's value after '=' or as the next word);
  /// any other leading word starting with '-' is an unsupported flag (64).
  mutating func flags(_ allowed: Set<String>, taking values: Set<String> = []) throws -> [String: String] {
    var found: [String: String] = [:]
    while let word = words.first, word.hasPrefix("-"), word != "-" {
      words.removeFirst()
      if word == "--" { break }
      let parts = word.split(separator: "=", maxSplits: 1).map(String.init)
      guard allowed.contains(parts[0]) || values.contains(parts[0]) else {
        throw usage("the flag '\(parts[0])' is not supported by appbox")
      }
      if values.contains(parts[0]) {
        if parts.count == 2 {
          found[parts[0]] = parts[1]
        } else {
          guard !words.isEmpty else { throw usage("\(parts[0]) needs a value") }
          found[parts[0]] = words.removeFirst()
        }
      } else {
        found[parts[0]] = ""
      }
    }
    return found
  }

  mutating func next(_ name: String) throws -> String {
    guard !words.isEmpty else { throw usage("missing \(name)") }
    return words.removeFirst()
  }

  func noMore() throws {
    if let extra = words.first { throw usage("unexpected argument '\(extra)'") }
  }

  /// Opens the device DEVICE names: `booted`, its UDID or its name (66 otherwise).
  mutating func device(mutating: Bool, allowingAll: Bool = false) throws -> DeviceSession {
    let name = try next("DEVICE")
    let session = try context.openDevice(mutating: mutating)
    let identity = session.identity
    guard
      name == "booted" || name.caseInsensitiveCompare(identity.udid) == .orderedSame || name == identity.name
        || (allowingAll && name == "all")
    else {
      throw CLIFailure(
        .notFound,
        "simctl: no device '\(name)': appbox knows the device at \(session.root.path), '\(identity.name)' "
          + "(\(identity.udid)), booted")
    }
    return session
  }

  /// The variables `SIMCTL_CHILD_NAME=value` of appbox's environment, as NAME=value.
  var childEnvironment: [String: String] {
    var result: [String: String] = [:]
    for (key, value) in context.environment where key.hasPrefix("SIMCTL_CHILD_") && key.count > 13 {
      result[String(key.dropFirst(13))] = value
    }
    return result
  }

  // MARK: Verbs

  mutating func list() throws -> CommandOutput {
    var sections = ["devicetypes", "runtimes", "devices", "pairs"]
    var json = false
    while let word = words.first {
      words.removeFirst()
      if word == "-j" || word == "--json" {
        json = true
      } else if ["devices", "devicetypes", "runtimes", "pairs"].contains(word), sections.count == 4 {
        sections = [word]
      } else if word.hasPrefix("-") {
        throw usage("the flag '\(word)' is not supported by appbox")
      } else {
        throw usage("'list \(word)': appbox lists devices, devicetypes, runtimes or pairs (no search terms)")
      }
    }
    let session = try context.openDevice(mutating: false)
    let listing = SimctlListing(session: session, version: AppboxCLI.version)
    return CommandOutput(raw: Array((json ? listing.json(sections) : listing.text(sections)).utf8))
  }

  mutating func appContainer() throws -> CommandOutput {
    let session = try device(mutating: false)
    let app = try session.app(try next("BUNDLE"))
    let kind = words.isEmpty ? "app" : words.removeFirst()
    try noMore()
    let path: String
    switch kind {
    case "app": path = session.home(of: app).bundlePath
    case "data": path = session.home(of: app).path
    case "groups":
      let lines = try session.groups(of: app).map {
        "\($0.identifier)\t\(session.root.groupContainer($0.containerID))"
      }
      return CommandOutput(raw: Array(lines.map { $0 + "\n" }.joined().utf8))
    default:
      guard kind.hasPrefix("group.") else {
        throw usage("'\(kind)': the container is app, data, groups or a group identifier (group.…)")
      }
      path = session.root.groupContainer(try session.group(kind, usedBy: app).containerID)
    }
    return CommandOutput(raw: Array((path + "\n").utf8))
  }

  mutating func install() throws -> CommandOutput {
    let session = try device(mutating: true)
    let bundle = try next("PATH")
    try noMore()
    let context = self.context
    // simctl replaces an installed app keeping its data: appbox's update, any version.
    let info = (try? Data(contentsOf: URL(fileURLWithPath: bundle + "/Info.plist"))).flatMap {
      try? PropertyList.decode($0)
    }
    let installed = try info?["CFBundleIdentifier"]?.string.flatMap { try session.registry.appIfPresent($0) }
    if let installed, !installed.isOffloaded {
      let app = try session.lockApp(installed.bundleIdentifier)
      _ = try session.update(app, toBundleAt: bundle, allowDowngrade: true) { app in
        try context.preUpdateSnapshot(of: app, in: session)
      }
    } else {
      _ = try session.install(
        bundleAt: bundle,
        updatingOffloaded: { offloaded in
          try session.update(offloaded, toBundleAt: bundle, allowDowngrade: false) { app in
            try context.preUpdateSnapshot(of: app, in: session)
          }
        })
    }
    return CommandOutput()
  }

  mutating func uninstall() throws -> CommandOutput {
    let session = try device(mutating: true)
    let app = try session.lockApp(try next("BUNDLE"))
    try noMore()
    for warning in try session.uninstall(app) { context.warn(warning) }
    return CommandOutput()
  }

  mutating func launch() throws -> CommandOutput {
    let given = try flags(
      ["--terminate-running-process", "--console", "--console-pty"], taking: ["--stdout", "--stderr"])
    let session = try device(mutating: false)
    let app = try session.app(try next("BUNDLE"))
    var options = SandboxOptions()
    options.environment = childEnvironment
    if given["--terminate-running-process"] != nil { _ = try session.terminate(app) }
    if given["--console"] != nil || given["--console-pty"] != nil {
      // The app's output on this terminal, as simctl's --console; appbox waits for it.
      context.stdout.write("\(app.bundleIdentifier): starting\n")
      let status = try session.launch(app, arguments: words, options: options)
      return CommandOutput(exitStatus: status)
    }
    let start = try context.launchDetached(
      app.containerID, arguments: words, options: options, standardOutput: given["--stdout"],
      standardError: given["--stderr"])
    let pid = start.run.appPID ?? start.run.jail?.pid ?? start.run.owner.pid
    return CommandOutput(raw: Array("\(app.bundleIdentifier): \(pid)\n".utf8))
  }

  mutating func terminate() throws -> CommandOutput {
    let session = try device(mutating: false)
    let app = try session.app(try next("BUNDLE"))
    try noMore()
    _ = try session.terminate(app)
    return CommandOutput()
  }

  mutating func spawn() throws -> CommandOutput {
    _ = try flags([])
    let session = try device(mutating: false)
    let given = try next("PATH")
    let path = given.hasPrefix("/") ? given : FileManager.default.currentDirectoryPath + "/" + given
    // The app whose home holds PATH; inside its jail the home is /var/mobile/Applications/ID.
    let prefix = session.root.applicationRoot + "/"
    guard path.hasPrefix(prefix), let id = path.dropFirst(prefix.count).split(separator: "/").first else {
      throw usage(
        "spawn runs a program inside an app's bundle or home (appbox simctl get_app_container), not '\(path)'"
      )
    }
    let app = try session.app(String(id))
    let inside = "/var/mobile/Applications/" + path.dropFirst(prefix.count)
    var options = SandboxOptions()
    options.environment = childEnvironment
    let status = try session.run(app, command: [inside] + words, options: options)
    return CommandOutput(exitStatus: status)
  }

  mutating func openURL() throws -> CommandOutput {
    let session = try device(mutating: false)
    let url = try next("URL")
    try noMore()
    let claim = try session.claim(of: url)
    var options = SandboxOptions()
    options.environment = childEnvironment
    options.environment[URLScheme.environmentVariable] = url
    _ = try context.launchDetached(claim.winner.containerID, arguments: [url], options: options)
    return CommandOutput()
  }

  mutating func listApps() throws -> CommandOutput {
    let session = try device(mutating: false)
    try noMore()
    var apps: [String: OpenStepValue] = [:]
    for app in try session.registry.apps() {
      apps[app.bundleIdentifier] = try SimctlListing.appInfo(app, session)
    }
    return CommandOutput(raw: Array((OpenStepValue.dictionary(apps).rendered() + "\n").utf8))
  }

  mutating func appInfo() throws -> CommandOutput {
    let session = try device(mutating: false)
    let app = try session.app(try next("BUNDLE"))
    try noMore()
    return CommandOutput(raw: Array((try SimctlListing.appInfo(app, session).rendered() + "\n").utf8))
  }

  mutating func keychain() throws -> CommandOutput {
    let session = try device(mutating: true)
    let action = try next("ACTION")
    guard action == "reset" else {
      throw usage("'keychain \(action)': appbox supports 'keychain DEVICE reset' only (no certificates)")
    }
    try noMore()
    try session.openKeychain().deleteAllItems()
    return CommandOutput()
  }

  mutating func erase() throws -> CommandOutput {
    let session = try device(mutating: true, allowingAll: true)
    try noMore()
    _ = try session.erase(keepBackups: false)
    return CommandOutput()
  }

  mutating func clone() throws -> CommandOutput {
    let session = try device(mutating: true)
    let name = try next("NAME")
    if let set = words.first { throw usage("device sets are not supported by appbox ('\(set)')") }
    // simctl's clone is a new device; appbox puts it beside this root, named NAME.
    let destination = name.contains("/") ? name : splitPath(session.root.path).directory + "/" + name
    let report = try session.clone(
      to: destination, newDevice: true, name: name.contains("/") ? nil : name)
    return CommandOutput(raw: Array((report.identity.udid + "\n").utf8))
  }
}
