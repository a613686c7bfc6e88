import AppboxCore
import Foundation
import Glibc

/// What a confined app process may touch: the rules the `appbox-sandbox` helper turns
/// into a Landlock ruleset. Everything not listed is denied by the kernel: other homes,
/// `registry.db`, `Keychains/`, `Backups/`, `.appbox/`, `/tmp`, every other file.
public struct SandboxProfile: Sendable, Equatable {
  /// Read, write, create, rename and remove (no execution, no device nodes).
  public var readWrite: [String]
  /// Read files and list directories.
  public var readOnly: [String]
  /// Read, list and execute.
  public var readExecute: [String]
  /// Read and write single device files.
  public var devices: [String]

  /// System locations every program needs: binaries, libraries, configuration, the
  /// Swift toolchain under /opt, and the process's own /proc entry (the helper resolves
  /// `/proc/self` to `/proc/<pid>` before it restricts itself, and exec keeps the pid;
  /// so a child the app forks cannot read its own /proc entry, but nothing else in
  /// /proc is readable either: /proc/kcore and friends stay out of reach).
  public static let systemLocations = [
    "/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32", "/etc", "/opt", "/proc/self",
  ]
  /// Device files every program may read and write.
  public static let deviceFiles = ["/dev/null", "/dev/tty", "/dev/urandom", "/dev/zero", "/dev/random"]

  public init(readWrite: [String], readOnly: [String], readExecute: [String], devices: [String]) {
    self.readWrite = readWrite
    self.readOnly = readOnly
    self.readExecute = readExecute
    self.devices = devices
  }

  /// The platform's rules for an app: its Documents, Library and tmp read-write; its
  /// home readable (so listing `$HOME` works) but not writable; its bundle readable and
  /// executable but never writable; the system locations and device files above.
  /// A device root kept inside a system location (say /opt/appbox) is carved out of it,
  /// so no other home and no device state becomes readable that way.
  public init(home: Home) {
    let system = Self.systemLocations.flatMap { Self.carve($0, around: home.root.path) }
    self.init(
      readWrite: [home.path(of: .documents), home.path(of: .library), home.path(of: .tmp)],
      readOnly: [home.path], readExecute: [home.bundlePath] + system, devices: Self.deviceFiles)
  }

  /// `location` itself when `excluded` is not inside it; otherwise its entries, recursively,
  /// leaving out `excluded` and the directories that lead to it.
  static func carve(_ location: String, around excluded: String) -> [String] {
    guard excluded.hasPrefix(location + "/") else { return excluded == location ? [] : [location] }
    let names = (try? FileManager.default.contentsOfDirectory(atPath: location)) ?? []
    return names.sorted().flatMap { carve(location + "/" + $0, around: excluded) }
  }

  /// The helper's options for these rules.
  public var helperArguments: [String] {
    readWrite.flatMap { ["--rw", $0] } + readOnly.flatMap { ["--ro", $0] }
      + readExecute.flatMap { ["--rx", $0] } + devices.flatMap { ["--dev", $0] }
  }
}

/// How to start a confined process.
public struct SandboxOptions: Sendable {
  /// Run unconfined (with a warning from the helper) when the kernel has no Landlock,
  /// instead of refusing with exit 69.
  public var allowUnconfined: Bool
  /// Replacements for the child's stdin, stdout and stderr (nil: this process's own).
  public var standardInput: FileDescriptor?
  public var standardOutput: FileDescriptor?
  public var standardError: FileDescriptor?
  /// A prewarmed launch: started before the user opens the app, perhaps while the device is
  /// locked. The app sees `ActivePrewarm=1`.
  public var prewarm: Bool

  public init(
    allowUnconfined: Bool = false, standardInput: FileDescriptor? = nil,
    standardOutput: FileDescriptor? = nil,
    standardError: FileDescriptor? = nil, prewarm: Bool = false
  ) {
    self.allowUnconfined = allowUnconfined
    self.prewarm = prewarm
    self.standardInput = standardInput
    self.standardOutput = standardOutput
    self.standardError = standardError
  }
}

/// Locating the helper, probing the kernel, and the environment a confined app sees.
public enum Sandbox {
  /// The helper's file name; it is built and installed beside `appbox`.
  public static let helperName = "appbox-sandbox"

  /// The helper: `$APPBOX_SANDBOX_HELPER` when set, else `appbox-sandbox` in the
  /// directory of the running executable. Missing is exit 69.
  public static func helperPath(environment: [String: String]) throws -> String {
    let path: String
    if let explicit = environment["APPBOX_SANDBOX_HELPER"], !explicit.isEmpty {
      path = explicit
    } else {
      let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? ""
      path = splitPath(executable).directory + "/" + helperName
    }
    guard access(path, X_OK) == 0 else {
      throw ContainerError(
        .unavailable,
        "The sandbox helper '\(path)' is missing or not executable (\(Errno.current)); install it beside "
          + "appbox or set APPBOX_SANDBOX_HELPER")
    }
    return path
  }

  /// Whether the kernel can confine apps. `APPBOX_ASSUME_NO_LANDLOCK=1` makes appbox and
  /// its helper behave as on a kernel without Landlock (for tests: they can then only
  /// refuse, or run unconfined when the caller explicitly allows it).
  public static func isLandlockAvailable(environment: [String: String]) -> Bool {
    if environment["APPBOX_ASSUME_NO_LANDLOCK"] == "1" { return false }
    return Landlock.abiVersion > 0
  }

  /// Variables passed through from appbox's own environment; every other one is
  /// dropped, so nothing about the device (APPBOX_ROOT, the user's HOME) reaches the app.
  public static let passedThroughVariables: Set<String> = ["PATH", "LANG", "LANGUAGE", "TERM", "TZ"]

  /// The app's environment: HOME, CFFIXED_USER_HOME (the home), TMPDIR (its tmp), and
  /// PATH, LANG, LANGUAGE, LC_*, TERM and TZ from `inherited` (PATH defaults to the
  /// system directories).
  public static func environment(for home: Home, inheriting inherited: [String: String]) -> [String: String] {
    var result = inherited.filter { passedThroughVariables.contains($0.key) || $0.key.hasPrefix("LC_") }
    if result["PATH", default: ""].isEmpty { result["PATH"] = "/usr/local/bin:/usr/bin:/bin" }
    result["HOME"] = home.path
    result["CFFIXED_USER_HOME"] = home.path
    result["TMPDIR"] = home.path(of: .tmp)
    result.merge(protectionEnvironment(for: home)) { _, protection in protection }
    return result
  }
}
