// Fault injection at durable system calls, through strace(1): a command is run once to count
// the calls that make its changes durable or visible (fsync, fdatasync, rename, unlink,
// syncfs), then again with one of them replaced by a fault: SIGKILL on entering it (a power
// cut or OOM kill at that instant), or a failure with EIO or ENOSPC (the call is not made).
// (strace 6.1 drops injected signals under `--seccomp-bpf`, so killing runs stop at every
// system call: about 0.3 s more per run.)
//
// strace counts per system call and per thread (`inject=SYSCALL:...:when=N` acts on each
// thread's Nth call), so the count reported for a system call is the most any one thread of
// the run made, and `when=N` for N up to it reaches every call of the busiest thread and the
// first N of the others. Runs with `--seccomp-bpf`: only the traced calls stop the process,
// so a traced run costs about what an untraced one does.

import AppboxCore
import Foundation
import Glibc

/// A system call that makes a change durable or visible.
public enum DurableSyscall: String, CaseIterable, Sendable {
  case fsync, fdatasync, rename, unlink, syncfs

  /// The names strace knows for it (glibc reaches some through the `*at` variants).
  public var systemCalls: [String] {
    switch self {
    case .rename: return ["rename", "renameat", "renameat2"]
    case .unlink: return ["unlink", "unlinkat"]
    default: return [rawValue]
    }
  }

  /// Which call a traced name belongs to.
  static func of(_ name: Substring) -> DurableSyscall? {
    allCases.first { $0.systemCalls.contains(String(name)) }
  }
}

/// What happens at the chosen call.
public enum InjectedFault: Sendable, Equatable, CustomStringConvertible {
  /// SIGKILL on entering the call: the process stops there, as at a power cut.
  case kill
  /// The call is not made and fails with this errno name ("EIO", "ENOSPC").
  case error(String)

  public var description: String {
    switch self {
    case .kill: return "kill"
    case .error(let name): return name
    }
  }

  var straceAction: String {
    switch self {
    case .kill: return "signal=KILL"
    case .error(let name): return "error=" + name
    }
  }
}

/// One injected fault: the `occurrence`th call of `syscall` (per thread) gets `fault`.
public struct FaultPoint: Sendable, Equatable, CustomStringConvertible {
  public var syscall: DurableSyscall
  public var occurrence: Int
  public var fault: InjectedFault

  public init(_ syscall: DurableSyscall, _ occurrence: Int, _ fault: InjectedFault) {
    self.syscall = syscall
    self.occurrence = occurrence
    self.fault = fault
  }

  public var description: String { "\(fault) at \(syscall) #\(occurrence)" }

  /// strace's `-e inject=` expression.
  var injection: String {
    "inject=\(syscall.systemCalls.joined(separator: ",")):\(fault.straceAction):when=\(occurrence)"
  }
}

/// Running programs under strace.
public enum Strace {
  public static let path = "/usr/bin/strace"

  /// Whether strace is installed (the Makefile's APT_PACKAGES install it).
  public static var isAvailable: Bool { access(path, X_OK) == 0 }

  /// Runs `executable` and counts its durable calls: for each, the most one thread made.
  public static func count(
    _ executable: String, _ arguments: [String], environment: [String: String]? = nil, input: [UInt8] = []
  ) throws -> (result: ProcessResult, counts: [DurableSyscall: Int]) {
    let directory = TemporaryDirectory("strace")
    defer { withExtendedLifetime(directory) {} }
    let log = directory.url("trace")
    let names = DurableSyscall.allCases.flatMap(\.systemCalls).joined(separator: ",")
    let result = try runProcess(
      path, ["-f", "-qq", "--seccomp-bpf", "-e", "trace=" + names, "-o", log, "--", executable] + arguments,
      environment: environment, input: input)
    var perThread: [String: Int] = [:]
    let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
    for line in text.split(separator: "\n") {
      // "1234 fsync(7) = 0", "1234 fsync(7 <unfinished ...>" (no pid while only one process
      // was ever traced); a "<... fsync resumed>" line is the same call again.
      var fields = line.split(separator: " ", maxSplits: 1).map { $0.drop { $0 == " " } }
      if let first = fields.first, first.contains("(") { fields.insert("main", at: 0) }
      guard fields.count == 2, !fields[1].hasPrefix("<..."), let open = fields[1].firstIndex(of: "("),
        let call = DurableSyscall.of(fields[1][..<open])
      else { continue }
      perThread["\(fields[0]) \(call.rawValue)", default: 0] += 1
    }
    var counts: [DurableSyscall: Int] = [:]
    for (key, count) in perThread {
      guard let call = DurableSyscall(rawValue: String(key.split(separator: " ")[1])) else { continue }
      counts[call] = max(counts[call] ?? 0, count)
    }
    return (result, counts)
  }

  /// Runs `executable` with `point` injected; its status is 128 + 9 when the kill was reached.
  public static func run(
    _ executable: String, _ arguments: [String], injecting point: FaultPoint,
    environment: [String: String]? = nil, input: [UInt8] = []
  ) throws -> ProcessResult {
    try runReporting(executable, arguments, injecting: point, environment: environment, input: input).result
  }

  /// `run`, also saying whether the fault was injected at all (the call was reached), and on
  /// which file's descriptor, when it had one.
  public static func runReporting(
    _ executable: String, _ arguments: [String], injecting point: FaultPoint,
    environment: [String: String]? = nil, input: [UInt8] = []
  ) throws -> (result: ProcessResult, injected: Bool, file: String?) {
    let directory = TemporaryDirectory("strace")
    defer { withExtendedLifetime(directory) {} }
    let log = directory.url("trace")
    // strace 6.1 does not deliver an injected signal under --seccomp-bpf (errors it injects).
    let filter = point.fault == .kill ? [] : ["--seccomp-bpf"]
    let result = try runProcess(
      path,
      ["-f", "-qq"] + filter + [
        "-y", "-o", log, "-e", "trace=" + point.syscall.systemCalls.joined(separator: ","), "-e",
        point.injection, "--", executable,
      ] + arguments, environment: environment, input: input)
    let trace = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
    let line = trace.split(separator: "\n").first { $0.contains("(INJECTED)") }
    // "fsync(7</root/Backups>) = -1 EIO (...) (INJECTED)": the descriptor's path.
    var file: String?
    if let line, let open = line.firstIndex(of: "<"), let close = line[open...].firstIndex(of: ">") {
      file = String(line[line.index(after: open)..<close])
    }
    return (result, line != nil || trace.contains("killed by SIGKILL"), file)
  }
}

extension ProcessResult {
  /// Whether the process was ended by SIGKILL.
  public var wasKilled: Bool { status == 128 + SIGKILL }

  /// The non-empty lines of stderr.
  public var errorLines: [Substring] { err.split(separator: "\n") }
}
