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

  /// The last signal the `SignalForwarder` passed on (0: none): an app that ends by it
  /// was stopped through appbox, not crashed (LaunchRecords.swift).
  static let lastForwardedSignal = Atomic<Int32>(0)

  /// Waits for `pid` to end; returns its exit status, or 128 + N when signal N killed it
  /// (the shell's convention). Uses `waitpid(2)`. Signals are passed on by a
  /// `SignalForwarder` the caller installed before it started the child.
  static func wait(for pid: pid_t) throws -> Int32 {
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 {
      guard Errno.current == .interrupted else { throw SystemError("wait for process \(pid)") }
    }
    // WIFEXITED, WEXITSTATUS and WTERMSIG are macros Swift does not import.
    let signal = status & 0x7F
    return signal == 0 ? (status >> 8) & 0xFF : 128 + signal
  }
}

/// Passes SIGTERM, SIGINT, SIGHUP and SIGQUIT sent to appbox on to the app it runs, from the
/// moment it is installed (before the child starts) until it is removed.
///
/// A plain `sigaction(2)` handler, installed synchronously: a dispatch signal source registers
/// on dispatch's manager thread after `resume()` returns, and a signal that arrived in between
/// was ignored and lost, leaving appbox waiting on an app that never heard it. A signal that
/// arrives before the target is known is kept and sent once it is (`setTarget`). The handler
/// only touches atomics and calls `kill(2)`, which are async-signal-safe.
enum SignalForwarder {
  /// Where signals go: a pid, or a negative process group; 0 while not known yet.
  private static let target = Atomic<Int32>(0)
  /// A signal received while no target was known (or not yet sent), 0 when none.
  private static let pending = Atomic<Int32>(0)

  /// Installs the handler for every forwarded signal, then unblocks them in the calling
  /// thread (a parent may have started appbox with them blocked: Foundation's `Process`
  /// does, from a dispatch thread), so that one that is already pending is delivered now.
  /// Returns the thread's mask before, for `remove`. Uses `sigaction(2)` and
  /// `pthread_sigmask(3)`.
  static func install() -> sigset_t {
    target.store(0, ordering: .sequentiallyConsistent)
    pending.store(0, ordering: .sequentiallyConsistent)
    for number in ChildProcess.forwardedSignals {
      var action = sigaction()
      action.__sigaction_handler.sa_handler = { number in
        ChildProcess.lastForwardedSignal.store(number, ordering: .sequentiallyConsistent)
        // Whoever takes the pending signal (here or in setTarget) sends it, exactly once.
        SignalForwarder.pending.store(number, ordering: .sequentiallyConsistent)
        let target = SignalForwarder.target.load(ordering: .sequentiallyConsistent)
        if target != 0, SignalForwarder.pending.exchange(0, ordering: .sequentiallyConsistent) != 0 {
          kill(target, number)
        }
      }
      sigemptyset(&action.sa_mask)
      action.sa_flags = SA_RESTART
      sigaction(number, &action, nil)
    }
    var forwarded = sigset_t()
    sigemptyset(&forwarded)
    for number in ChildProcess.forwardedSignals { sigaddset(&forwarded, number) }
    var previous = sigset_t()
    pthread_sigmask(SIG_UNBLOCK, &forwarded, &previous)
    return previous
  }

  /// Sends signals to `pid` from now on. A signal that came before is sent there too when
  /// `appStarting` (`confine` has said it is about to exec the app: the app's process group
  /// holds `confine` or the app, and either gets it). Otherwise (the jail failed, or never
  /// said so) the app may not exist, and the jail's first process drops signals it has no
  /// handler for, so it would be lost and the start would go on: `cancel` runs instead (it ends
  /// the jail), and the signal is returned: the start was stopped.
  static func setTarget(_ pid: pid_t, appStarting: Bool, cancellingPendingWith cancel: () -> Void) -> Int32? {
    target.store(pid, ordering: .sequentiallyConsistent)
    let signal = pending.exchange(0, ordering: .sequentiallyConsistent)
    guard signal != 0 else { return nil }
    if appStarting {
      kill(pid, signal)
      return nil
    }
    cancel()
    return signal
  }

  /// Restores the default dispositions and the thread's mask `install` returned; nothing is
  /// passed on any more.
  static func remove(restoring mask: sigset_t) {
    var mask = mask
    pthread_sigmask(SIG_SETMASK, &mask, nil)
    for number in ChildProcess.forwardedSignals { Glibc.signal(number, SIG_DFL) }
    target.store(0, ordering: .sequentiallyConsistent)
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
