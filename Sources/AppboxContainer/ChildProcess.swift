import AppboxCore
import Foundation
import Glibc
import Synchronization

/// Starting a program and waiting for it, with `posix_spawn(3)` rather than Foundation's
/// `Process`: appbox must choose exactly which descriptors the child inherits and at which
/// numbers, and must reset signal dispositions that the Swift runtime changed (an ignored
/// SIGPIPE would stay ignored across exec and break pipelines).
enum ChildProcess {
  /// A descriptor of this process to install at `target` in the child.
  struct Inherited {
    var source: FileDescriptor
    var target: Int32
  }

  /// Starts `executable` with `arguments` (argv[0] included) and exactly `environment`.
  /// The child gets this process's stdin, stdout and stderr unless `inherited` replaces
  /// them, plus each `inherited` descriptor at its target number; everything else appbox
  /// opens is close-on-exec. All signals are reset to their defaults and none is blocked.
  /// Uses `posix_spawn(3)`.
  static func spawn(
    _ executable: String, arguments: [String], environment: [String: String], inherited: [Inherited]
  ) throws -> pid_t {
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    // Two steps, so that no target overwrites a source still to be copied: every source
    // first goes above all the numbers in play, then to its target.
    let parking = (inherited.flatMap { [$0.source.rawValue, $0.target] }.max() ?? 2) + 1
    var steps: [(Int32, Int32)] = []
    for (index, descriptor) in inherited.enumerated() {
      steps.append((descriptor.source.rawValue, parking + Int32(index)))
    }
    for (index, descriptor) in inherited.enumerated() {
      steps.append((parking + Int32(index), descriptor.target))
    }
    for (source, target) in steps {
      let result = posix_spawn_file_actions_adddup2(&actions, source, target)
      guard result == 0 else { throw SystemError("start '\(executable)'", errno: Errno(rawValue: result)) }
    }
    for index in inherited.indices { posix_spawn_file_actions_addclose(&actions, parking + Int32(index)) }
    var attributes = posix_spawnattr_t()
    posix_spawnattr_init(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }
    var noSignals = sigset_t()
    sigemptyset(&noSignals)
    var allSignals = sigset_t()
    sigfillset(&allSignals)
    posix_spawnattr_setsigmask(&attributes, &noSignals)
    posix_spawnattr_setsigdefault(&attributes, &allSignals)
    posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

    let argv = arguments.map { strdup($0) } + [nil]
    let envp = environment.sorted { $0.key < $1.key }.map { strdup("\($0.key)=\($0.value)") } + [nil]
    defer {
      for pointer in argv { free(pointer) }
      for pointer in envp { free(pointer) }
    }
    var pid = pid_t()
    let result = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
    guard result == 0 else { throw SystemError("start", path: executable, errno: Errno(rawValue: result)) }
    return pid
  }

  /// The signals appbox passes on while it waits: stopping appbox stops the app it runs.
  static let forwardedSignals = [SIGTERM, SIGINT, SIGHUP, SIGQUIT]

  /// The last signal `wait(for:forwardingTo:)` passed on (0: none): an app that ends by it
  /// was stopped through appbox, not crashed (LaunchRecords.swift).
  static let lastForwardedSignal = Atomic<Int32>(0)

  /// Waits for `pid` to end; returns its exit status, or 128 + N when signal N killed it
  /// (the shell's convention). Uses `waitpid(2)`. While waiting, SIGTERM, SIGINT, SIGHUP
  /// and SIGQUIT sent to appbox are passed on with `kill(target(), signal)` (by default
  /// to `pid`; a negative target is a process group).
  static func wait(for pid: pid_t, forwardingTo target: (@Sendable () -> pid_t)? = nil) throws -> Int32 {
    let sources = forwardedSignals.map { number -> any DispatchSourceSignal in
      Glibc.signal(number, SIG_IGN)  // delivered to the source below instead; the child gets defaults
      let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
      source.setEventHandler {
        lastForwardedSignal.store(number, ordering: .sequentiallyConsistent)
        kill(target?() ?? pid, number)
      }
      source.resume()
      return source
    }
    defer {
      for source in sources { source.cancel() }
      for number in forwardedSignals { Glibc.signal(number, SIG_DFL) }
    }
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 {
      guard Errno.current == .interrupted else { throw SystemError("wait for process \(pid)") }
    }
    // WIFEXITED, WEXITSTATUS and WTERMSIG are macros Swift does not import.
    let signal = status & 0x7F
    return signal == 0 ? (status >> 8) & 0xFF : 128 + signal
  }
}

extension ChildProcess {
  /// Waits for `pid` to end, passing no signal on; its status as `wait(for:)` gives it, or -1
  /// when it cannot be waited for. Uses `waitpid(2)`.
  @discardableResult
  static func reap(_ pid: pid_t) -> Int32 {
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 {
      guard Errno.current == .interrupted else { return -1 }
    }
    let signal = status & 0x7F
    return signal == 0 ? (status >> 8) & 0xFF : 128 + signal
  }

  /// Whether the child `pid` has ended, without waiting or reaping it (a later wait still
  /// gets its status). Uses `waitid(2)` with WNOWAIT.
  static func hasEnded(_ pid: pid_t) -> Bool {
    var info = siginfo_t()
    guard waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 else { return true }
    return info._sifields._sigchld.si_pid == pid
  }
}

/// A process id shared with signal handlers.
final class SharedProcessID: Sendable {
  private let value = Atomic<Int32>(0)

  func set(_ pid: pid_t) { value.store(pid, ordering: .sequentiallyConsistent) }
  var pid: pid_t { value.load(ordering: .sequentiallyConsistent) }
}
