// The fault sweep: a command that writes a repository or a home is run again and again from
// the same starting state, each time with one durable system call faulted (FaultInjection),
// and after each run the promises are checked:
// 1. the next command, run normally, succeeds (it finishes or rolls back what was left);
// 2. the app's state (its version and its data: contents, modes, mtimes, links, xattrs, hard
//    links) is the state before the command or the state after it, never a mix; a command
//    that failed with an error left the state before, one that succeeded the state after; a
//    failure prints one "Error:" line;
// 3. `check --read-data` finds no problem;
// 4. every snapshot restores, into a device that never saw the app, to exactly the data
//    recorded when it was made (the SnapshotLedger).
// The starting state is built once (`prepare`) and copied (`cp -a`) for every run, but for the
// app's home under a sweep that leaves it as it is (`keepsHome`: backup): that home is kept, so
// its files keep their inodes as on a device between two commands, and a backup sees an edit
// made in place before the template as one (the first-edit comparison with the earlier
// archive), where a copy would make every file look saved anew. The command runs once
// unfaulted first, to count its durable calls and to learn the state after.
// Which faults: every call of every kind, killed and failed with EIO and with ENOSPC, when
// `APPBOX_FAULTS_FULL=1` (`make test-faults`); otherwise the few a test names, so that
// `make test` stays within its budget.

import AppboxCore
import Foundation
import Glibc

/// What a home holds, as far as backups promise: the installed version and the data.
public struct AppState: Equatable, Sendable, CustomStringConvertible {
  public var version: String?
  public var data: [[UInt8]: CapturedEntry]

  public init(version: String?, data: [[UInt8]: CapturedEntry]) {
    self.version = version
    self.data = data
  }

  public var description: String { "version \(version ?? "none"), \(data.count) entries" }

  /// Why `self` is not `other`, in a few lines.
  public func differences(from other: AppState) -> [String] {
    var lines: [String] = []
    if version != other.version {
      lines.append("version \(version ?? "none") instead of \(other.version ?? "none")")
    }
    lines += AppboxTestSupport.differences(other.data, data).prefix(4)
    return lines
  }
}

/// The snapshots a test made and the data each must restore to.
public final class SnapshotLedger: @unchecked Sendable {
  private var states: [String: [[UInt8]: CapturedEntry]] = [:]

  public init() {}

  public func record(_ id: String, _ data: [[UInt8]: CapturedEntry]) { states[id] = data }
  public func data(of id: String) -> [[UInt8]: CapturedEntry]? { states[id] }
  public var ids: [String] { states.keys.sorted() }

  func copy() -> SnapshotLedger {
    let copy = SnapshotLedger()
    copy.states = states
    return copy
  }
}

/// The directory a sweep works in: `work/root` is the device (its own repository is
/// `work/root/Backups` unless `repository` names another), `template` the starting state.
public final class FaultWorkspace: @unchecked Sendable {
  private let directory = TemporaryDirectory("faults")
  public var work: String { directory.url("work") }
  public var root: String { work + "/root" }
  /// The repository `check`, `snapshots` and the restores of the verification use.
  public var repository: String
  /// Options every repository command of the verification gets (a password file...).
  public var repositoryOptions: [String] = []
  /// Added to every command's environment.
  public var environment: [String: String] = [:]
  /// Environments the verification tries in turn, keeping the first that lists the snapshots
  /// (after `repo passwd`, either password may open the repository).
  public var verificationEnvironments: [[String: String]] = [[:]]
  public let app: String
  public var ledger = SnapshotLedger()
  private var templateLedger = SnapshotLedger()
  /// The app's home when the template was saved (nil: not installed).
  private var templateHome: String?

  public init(app: String = "com.example.notes") {
    self.app = app
    repository = ""
    repository = root + "/Backups"
    mkdir(work, 0o700)
  }

  /// A path inside the workspace that the sweep resets with the rest (`work/<name>`).
  public func path(_ name: String) -> String { work + "/" + name }

  /// Runs `appbox --root ROOT arguments`.
  @discardableResult
  public func run(_ arguments: [String], environment extra: [String: String] = [:], root: String? = nil)
    throws -> ProcessResult
  {
    try appbox(arguments, root: root ?? self.root, environment: environment.merging(extra) { $1 })
  }

  @discardableResult
  public func run(_ arguments: String...) throws -> ProcessResult { try run(arguments) }

  /// The command line and environment of `appbox --root ROOT arguments`.
  public func commandLine(_ arguments: [String]) -> (
    executable: String, arguments: [String], environment: [String: String]
  ) {
    var environment = ProcessInfo.processInfo.environment
    environment.removeValue(forKey: "APPBOX_ROOT")
    for (key, value) in self.environment { environment[key] = value }
    return (productsDirectory + "/appbox", ["--root", root] + arguments, environment)
  }

  /// The app's home, or nil when it is not installed.
  public func home(root: String? = nil) throws -> String? {
    let result = try run(["path", app], root: root)
    guard result.status == 0 else { return nil }
    return result.out.trimmingCharacters(in: .newlines)
  }

  /// The app's installed version and data (nil version: not installed).
  public func state(root: String? = nil) throws -> AppState {
    guard let home = try home(root: root) else { return AppState(version: nil, data: [:]) }
    let list = try run(["--json", "list"], root: root)
    let apps = (try? JSONSerialization.jsonObject(with: Data(list.stdout))) as? [[String: Any]] ?? []
    let version = apps.first { $0["bundleIdentifier"] as? String == app }?["version"] as? String
    let bundle = (try? FileManager.default.contentsOfDirectory(atPath: home))?.first { $0.hasSuffix(".app") }
    // The container's metadata file is made with each home (an update's new one too).
    let data = try captureTree(
      home,
      skipping: [
        bundle ?? "Notes.app", "tmp", "Library/Caches", ".com.apple.mobile_container_manager.metadata.plist",
      ])
    return AppState(version: version, data: data)
  }

  /// Backs the app up (`extra`: more options) and records the snapshot in the ledger.
  @discardableResult
  public func backup(_ extra: [String] = []) throws -> String {
    let data = try state().data
    let result = try run(["--json", "backup", app] + extra)
    guard result.status == 0,
      let array = try? JSONSerialization.jsonObject(with: Data(result.stdout)) as? [[String: Any]],
      let id = array.first?["snapshot"] as? String
    else { throw SystemError("backup: \(result.err)", path: root, errno: .ioError) }
    ledger.record(id, data)
    return id
  }

  /// Keeps the current state as the one every run starts from.
  public func saveTemplate() throws {
    let template = directory.url("template")
    try? FileTree.remove(atPath: template)
    try copyTree(work, to: template)
    templateLedger = ledger.copy()
    templateHome = try home()
  }

  /// Back to the saved starting state. `keepingHome`: the app's home is not copied but kept
  /// as it is (renamed aside and back), for a command that must leave it unchanged (checked
  /// after each run), so that its files keep their inodes.
  public func reset(keepingHome: Bool = false) throws {
    let home = keepingHome ? templateHome : nil
    let kept = directory.url("kept-home")
    if let home { guard rename(home, kept) == 0 else { throw SystemError("keep the home", path: home) } }
    try FileTree.remove(atPath: work)
    try copyTree(directory.url("template"), to: work)
    if let home {
      try FileTree.remove(atPath: home)
      guard rename(kept, home) == 0 else { throw SystemError("put the kept home back", path: home) }
    }
    ledger = templateLedger.copy()
  }

  /// A fresh directory for a device that never saw the app.
  public func freshRoot() -> TemporaryDirectory { TemporaryDirectory("faults-fresh") }
}

/// What the app's state may be after a faulted command.
public enum StateExpectation: Sendable {
  /// The command never changes it (backup, forget, repo passwd).
  case unchanged
  /// All or nothing: the state before, or the state after (restore, import, update, revert).
  case allOrNothing
}

/// One command, swept over faults.
public struct FaultSweep {
  public var name: String
  public var workspace: FaultWorkspace
  /// appbox's arguments (after `--root ROOT`).
  public var command: [String]
  public var input: [UInt8] = []
  public var expectation: StateExpectation
  /// What runs after the faulted command, normally; it may record snapshots in the ledger.
  public var next: (FaultWorkspace) throws -> [String] = { workspace in
    let result = try workspace.run("device", "init")
    return result.status == 0 ? [] : ["device init after it: \(result.status) \(result.err)"]
  }
  /// Extra checks after the verification (space reclaimed...).
  public var finally: (FaultWorkspace, ProcessResult) throws -> [String] = { _, _ in [] }
  /// Keep the app's home between runs instead of copying it (`FaultWorkspace.reset`): for a
  /// command, and a `next`, that leave the home as it is (a backup); the check of each run
  /// still compares the home with the state before.
  public var keepsHome = false

  public init(_ name: String, workspace: FaultWorkspace, command: [String], expectation: StateExpectation) {
    self.name = name
    self.workspace = workspace
    self.command = command
    self.expectation = expectation
  }

  /// Whether the whole sweep was asked for (`make test-faults`).
  public static var isFull: Bool { ProcessInfo.processInfo.environment["APPBOX_FAULTS_FULL"] == "1" }

  static func isDirectory(_ path: String) -> Bool {
    var st = stat()
    return stat(path, &st) == 0 && st.st_mode & S_IFMT == S_IFDIR
  }

  /// Every fault at every counted call: killed, EIO, ENOSPC. `APPBOX_FAULTS_ONLY` (a comma
  /// list of faults and system calls, "EIO,fsync") narrows a full run to those.
  public static func everyPoint(_ counts: [DurableSyscall: Int]) -> [FaultPoint] {
    let only = (ProcessInfo.processInfo.environment["APPBOX_FAULTS_ONLY"] ?? "").split(separator: ",").map(
      String.init)
    let faults = [InjectedFault.kill, .error("EIO"), .error("ENOSPC")].filter { fault in
      let named = only.filter { ["kill", "EIO", "ENOSPC"].contains($0) }
      return named.isEmpty || named.contains(fault.description)
    }
    let syscalls = DurableSyscall.allCases.filter { syscall in
      let named = only.compactMap { DurableSyscall(rawValue: $0) }
      return named.isEmpty || named.contains(syscall)
    }
    var points: [FaultPoint] = []
    for syscall in syscalls {
      for occurrence in stride(from: 1, through: counts[syscall] ?? 0, by: 1) {
        for fault in faults { points.append(FaultPoint(syscall, occurrence, fault)) }
      }
    }
    return points
  }

  /// Runs the sweep: the faults `bounded` picks from the counts, or every one under
  /// APPBOX_FAULTS_FULL=1. Returns the problems found, one line each (empty: all held).
  public func run(bounded: ([DurableSyscall: Int]) -> [FaultPoint]) throws -> [String] {
    let before = try workspace.state()
    try workspace.saveTemplate()
    let line = workspace.commandLine(command)
    let (reference, counts) = try Strace.count(
      line.executable, line.arguments, environment: line.environment, input: input)
    guard reference.status == 0 else {
      return ["\(name): the unfaulted run failed: \(reference.status) \(reference.err)"]
    }
    let after = try workspace.state()
    var problems: [String] = []
    let points = Self.isFull ? Self.everyPoint(counts) : bounded(counts)
    if points.isEmpty { problems.append("\(name): no fault points (counts \(counts)): \(reference.err)") }
    var reached = 0
    for point in points {
      try workspace.reset(keepingHome: keepsHome)
      let line = workspace.commandLine(command)
      let (result, injected, file) = try Strace.runReporting(
        line.executable, line.arguments, injecting: point, environment: line.environment, input: input)
      if result.status != 0 { reached += 1 }
      var found = try check(result, before: before, after: after)
      // A sync that failed and a command that says nothing: the error vanished. (SQLite
      // ignores, by design, a failed fdatasync of the directory it made a WAL in.)
      if injected, result.status == 0, case .error = point.fault,
        [DurableSyscall.fsync, .fdatasync, .syncfs].contains(point.syscall),
        !result.err.contains("warning: "),
        !(point.syscall == .fdatasync && file.map(Self.isDirectory) == true)
      {
        found.append("succeeded without a word although the \(point.syscall) of \(file ?? "?") failed")
      }
      problems += found.map { "\(name), \(point): \($0)" }
    }
    if !points.isEmpty && reached == 0 { problems.append("\(name): no fault was reached (counts \(counts))") }
    return problems
  }

  private func check(_ result: ProcessResult, before: AppState, after: AppState) throws -> [String] {
    var problems: [String] = []
    let failed = result.status != 0 && !result.wasKilled
    if failed {
      let errors = result.errorLines.filter { $0.hasPrefix("Error: ") }
      if errors.count != 1 {
        problems.append("failed (\(result.status)) without exactly one Error line: \(result.err)")
      }
    }
    if result.status == 128 + SIGSEGV || result.status == 128 + SIGBUS || result.status == 128 + SIGABRT
      || result.status == 128 + SIGILL || result.status == 128 + SIGTRAP
    {
      problems.append("crashed (\(result.status)): \(result.err)")
    }
    // What the command left, before anything recovers.
    let left = try workspace.state()
    problems += try next(workspace)
    let now = try workspace.state()
    switch expectation {
    case .unchanged:
      if left != before {
        problems.append("the app changed: " + left.differences(from: before).joined(separator: "; "))
      }
    case .allOrNothing:
      if result.status == 0, now != after {
        problems.append(
          "succeeded, but the app is not as after: " + now.differences(from: after).joined(separator: "; "))
      } else if failed, now != before {
        problems.append(
          "failed (\(result.status)), but the app is not as before: "
            + now.differences(from: before).joined(separator: "; "))
      } else if now != before && now != after {
        problems.append(
          "the app is neither as before nor as after: " + now.differences(from: after).joined(separator: "; ")
        )
      }
      if failed, left != before {
        problems.append(
          "failed (\(result.status)), but had changed the app: "
            + left.differences(from: before).joined(separator: "; "))
      }
    }
    // A snapshot the faulted command made holds the data from before it.
    problems += try verifyRepository(madeByTheCommand: before.data)
    problems += try finally(workspace, result)
    return problems
  }

  /// `check --read-data`, then every snapshot restored on a new device against the ledger;
  /// snapshots the ledger lacks against `madeByTheCommand`.
  public func verifyRepository(madeByTheCommand pending: [[UInt8]: CapturedEntry]? = nil) throws -> [String] {
    var problems: [String] = []
    let repository = ["--repo", workspace.repository] + workspace.repositoryOptions
    var environment: [String: String] = [:]
    var listing = ProcessResult(status: 1, stdout: [], stderr: [])
    for candidate in workspace.verificationEnvironments {
      environment = candidate
      listing = try workspace.run(["--json", "snapshots"] + repository, environment: candidate)
      if listing.status == 0 { break }
    }
    let check = try workspace.run(["check", "--read-data"] + repository, environment: environment)
    if check.status != 0 { problems.append("check --read-data: \(check.status) \(check.out) \(check.err)") }
    guard listing.status == 0,
      let snapshots = try? JSONSerialization.jsonObject(with: Data(listing.stdout)) as? [[String: Any]]
    else { return problems + ["snapshots: \(listing.status) \(listing.err)"] }
    for snapshot in snapshots {
      guard let id = snapshot["snapshot"] as? String, let app = snapshot["app"] as? String,
        app == workspace.app
      else { continue }
      guard let expected = workspace.ledger.data(of: id) ?? pending else {
        problems.append("snapshot \(id) is not one the test made")
        continue
      }
      let fresh = workspace.freshRoot()
      defer { withExtendedLifetime(fresh) {} }
      let root = fresh.url("root")
      // Only install and device init create a device.
      let made = try workspace.run(["device", "init"], environment: environment, root: root)
      guard made.status == 0 else {
        problems.append("device init of a new device: \(made.status) \(made.err)")
        continue
      }
      let restored = try workspace.run(
        ["restore", app, "--snapshot", id] + repository, environment: environment, root: root)
      guard restored.status == 0 else {
        problems.append("restore of \(id) on a new device: \(restored.status) \(restored.err)")
        continue
      }
      let data = try workspace.state(root: root).data
      let lines = differences(expected, data)
      if !lines.isEmpty {
        problems.append("snapshot \(id) restores wrong: " + lines.prefix(4).joined(separator: "; "))
      }
    }
    return problems
  }
}
