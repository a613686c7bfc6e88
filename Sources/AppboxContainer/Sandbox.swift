import AppboxCore
import Foundation
import Glibc

/// How to start a confined process.
public struct SandboxOptions: Sendable {
  /// Run without Landlock (with a warning from the helper) when the kernel has none,
  /// instead of refusing with exit 69. Never a way around a missing bubblewrap: the
  /// namespaces, the app's uid and the seccomp filter still apply.
  public var allowUnconfined: Bool
  /// The app's network: a namespace of its own with outbound access through pasta (the
  /// default, as apps on the platform have network), none (an empty network namespace with
  /// only a loopback of its own), or the host's (explicitly, loopback services included).
  public var network: JailNetwork
  /// Per-run limits: processes (RLIMIT_NPROC, and pids.max with a delegated cgroup) and
  /// memory (memory.max, only with a delegated cgroup).
  public var limits: JailLimits
  /// Replacements for the child's stdin, stdout and stderr (nil: this process's own).
  public var standardInput: FileDescriptor?
  public var standardOutput: FileDescriptor?
  public var standardError: FileDescriptor?
  /// Descriptors the app inherits, each at the number given (3 or more), say one end of
  /// a socketpair whose other end this process serves. Nothing else above 2 reaches it.
  public var passedDescriptors: [(descriptor: FileDescriptor, number: Int32)]
  /// A prewarmed launch: started before the user opens the app, perhaps while the device is
  /// locked. The app sees `ActivePrewarm=1`.
  public var prewarm: Bool
  /// Variables the app gets besides the standard ones (an opened URL, `SIMCTL_CHILD_*`);
  /// they never replace HOME, TMPDIR, PATH or appbox's own.
  public var environment: [String: String] = [:]

  public init(
    allowUnconfined: Bool = false, network: JailNetwork = .own, limits: JailLimits = JailLimits(),
    standardInput: FileDescriptor? = nil, standardOutput: FileDescriptor? = nil,
    standardError: FileDescriptor? = nil,
    passedDescriptors: [(descriptor: FileDescriptor, number: Int32)] = [], prewarm: Bool = false
  ) {
    self.prewarm = prewarm
    self.allowUnconfined = allowUnconfined
    self.network = network
    self.limits = limits
    self.standardInput = standardInput
    self.standardOutput = standardOutput
    self.standardError = standardError
    self.passedDescriptors = passedDescriptors
  }
}

/// The contents of a small text file (a /proc or /sys file), or nil. Uses `read(2)`: run
/// and launch read several on every start, where Foundation's readers cost more.
func readSmallFile(_ path: String) -> String? {
  guard let fd = try? FileDescriptor.open(path, O_RDONLY) else { return nil }
  defer { fd.close() }
  return (try? fd.readAll(limit: 1 << 20)).map { String(decoding: $0, as: UTF8.self) }
}

/// The target of the symbolic link at `path`, or nil. Uses `readlink(2)`.
func readLinkTarget(_ path: String) -> String? {
  (try? FileDescriptor.currentDirectory.readLink(path)).map { String(decoding: $0, as: UTF8.self) }
}

/// Locating the helper and bubblewrap, probing the kernel, and the environment a
/// confined app sees.
public enum Sandbox {
  /// The helper's file name; it is built and installed beside `appbox`.
  public static let helperName = "appbox-sandbox"

  /// The helper: `$APPBOX_SANDBOX_HELPER` when set, else `appbox-sandbox` in the
  /// directory of the running executable. Missing is exit 69.
  public static func helperPath(environment: [String: String]) throws -> String {
    try installedExecutable(
      helperName, variable: "APPBOX_SANDBOX_HELPER", what: "sandbox helper", environment)
  }

  /// The in-app keychain command (`appbox-secitem`), shown on the app's PATH.
  public static let secItemToolName = "appbox-secitem"

  /// The keychain command: `$APPBOX_SECITEM_TOOL` when set, else `appbox-secitem` in the
  /// directory of the running executable. Missing is exit 69.
  public static func secItemToolPath(environment: [String: String]) throws -> String {
    try installedExecutable(
      secItemToolName, variable: "APPBOX_SECITEM_TOOL", what: "in-app keychain command", environment)
  }

  /// `environment[variable]` when set, else `name` beside the running executable; it must be
  /// executable (exit 69 otherwise).
  private static func installedExecutable(
    _ name: String, variable: String, what: String, _ environment: [String: String]
  ) throws -> String {
    let path: String
    if let explicit = environment[variable], !explicit.isEmpty {
      path = explicit
    } else {
      let executable = readLinkTarget("/proc/self/exe") ?? ""
      path = splitPath(executable).directory + "/" + name
    }
    guard access(path, X_OK) == 0 else {
      throw ContainerError(
        .unavailable,
        "The \(what) '\(path)' is missing or not executable (\(Errno.current)); install it beside "
          + "appbox or set \(variable)")
    }
    return path
  }

  /// bubblewrap: the first executable `bwrap` in `$PATH` (default /usr/bin:/bin). Missing
  /// is exit 69: appbox never runs an app with less than its jail.
  public static func bubblewrapPath(environment: [String: String], for app: AppRecord) throws -> String {
    let search = environment["PATH"].flatMap { $0.isEmpty ? nil : $0 } ?? "/usr/bin:/bin"
    for directory in search.split(separator: ":") where directory.hasPrefix("/") {
      let candidate = String(directory) + "/bwrap"
      if access(candidate, X_OK) == 0 { return candidate }
    }
    throw ContainerError(
      .unavailable,
      "Cannot confine \(app.bundleIdentifier): bubblewrap ('bwrap') is not installed (not found in "
        + "PATH=\(search)); install the 'bubblewrap' package")
  }

  /// Why user namespaces cannot be made here, or nil when they can. bubblewrap runs
  /// unprivileged (as the app's uid when appbox is root), so unprivileged user namespaces
  /// are needed either way. Reads the sysctls that switch them off.
  public static func userNamespacesUnavailable() -> String? {
    func sysctl(_ name: String) -> Int? {
      guard let text = readSmallFile("/proc/sys/" + name) else { return nil }
      // The digits before the newline: cheaper than Foundation's trimming, on every start.
      return Int(text.prefix(while: { $0 != "\n" && $0 != " " }))
    }
    if access("/proc/self/ns/user", F_OK) != 0 {
      return "this kernel has no user namespaces (CONFIG_USER_NS)"
    }
    if sysctl("user/max_user_namespaces") == 0 {
      return "user namespaces are disabled (user.max_user_namespaces = 0)"
    }
    if sysctl("kernel/unprivileged_userns_clone") == 0 {
      return "unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone = 0)"
    }
    return nil
  }

  /// Whether the kernel can confine apps with Landlock. `APPBOX_ASSUME_NO_LANDLOCK=1` makes
  /// appbox and its helper behave as on a kernel without Landlock (for tests: they can
  /// then only refuse, or run without Landlock when the caller explicitly allows it).
  public static func isLandlockAvailable(environment: [String: String]) -> Bool {
    if environment["APPBOX_ASSUME_NO_LANDLOCK"] == "1" { return false }
    return Landlock.abiVersion > 0
  }

  /// Variables passed through from appbox's own environment; every other one is
  /// dropped, so nothing about the device (APPBOX_ROOT, the user's HOME) reaches the app.
  public static let passedThroughVariables: Set<String> = ["PATH", "LANG", "LANGUAGE", "TERM", "TZ"]

  /// The app's environment: HOME, CFFIXED_USER_HOME (the home as the jail shows it),
  /// TMPDIR (its tmp), and PATH, LANG, LANGUAGE, LC_*, TERM and TZ from `inherited` (PATH
  /// defaults to the system directories; the jail's tool directory comes first when the
  /// jail has tools).
  public static func environment(for jail: Jail, inheriting inherited: [String: String]) -> [String: String] {
    var result = inherited.filter { passedThroughVariables.contains($0.key) || $0.key.hasPrefix("LC_") }
    if result["PATH", default: ""].isEmpty { result["PATH"] = "/usr/local/bin:/usr/bin:/bin" }
    if !jail.tools.isEmpty { result["PATH"] = Jail.toolsDirectory + ":" + result["PATH"]! }
    result["HOME"] = jail.home
    result["CFFIXED_USER_HOME"] = jail.home
    result["TMPDIR"] = jail.home + "/tmp"
    result.merge(jail.environment) { _, set in set }
    return result
  }
}
