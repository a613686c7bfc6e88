import AppboxCore
import Foundation
import Glibc

/// Starting a program and waiting for it, with `posix_spawn(3)` rather than Foundation's
/// `Process`: appbox must choose exactly which descriptors the child inherits (its stdio
/// and the running lock) and must reset signal dispositions that the Swift runtime
/// changed (an ignored SIGPIPE would stay ignored across exec and break pipelines).
enum ChildProcess {
  /// A descriptor of this process to install at `target` in the child.
  struct Inherited {
    var source: FileDescriptor
    var target: Int32
  }

  /// Starts `executable` with `arguments` (argv[0] included) and exactly `environment`.
  /// The child gets this process's stdin, stdout and stderr unless `inherited` replaces
  /// them, plus each `inherited` descriptor; everything else appbox opens is close-on-exec.
  /// All signals are reset to their defaults and none is blocked. Uses `posix_spawn(3)`.
  static func spawn(
    _ executable: String, arguments: [String], environment: [String: String], inherited: [Inherited]
  ) throws -> pid_t {
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    for descriptor in inherited {
      let result = posix_spawn_file_actions_adddup2(&actions, descriptor.source.rawValue, descriptor.target)
      guard result == 0 else { throw SystemError("start '\(executable)'", errno: Errno(rawValue: result)) }
    }
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

  /// Waits for `pid` to end; returns its exit status, or 128 + N when signal N killed it
  /// (the shell's convention). Uses `waitpid(2)`.
  /// While waiting, SIGTERM, SIGINT, SIGHUP and SIGQUIT sent to appbox are passed on to the
  /// child, so stopping appbox stops the app it runs.
  static func wait(for pid: pid_t) throws -> Int32 {
    let forwarded = [SIGTERM, SIGINT, SIGHUP, SIGQUIT]
    let sources = forwarded.map { number -> any DispatchSourceSignal in
      Glibc.signal(number, SIG_IGN)  // delivered to the source below instead; the child gets defaults
      let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
      source.setEventHandler { kill(pid, number) }
      source.resume()
      return source
    }
    defer {
      for source in sources { source.cancel() }
      for number in forwarded { Glibc.signal(number, SIG_DFL) }
    }
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 {
      guard Errno.current == .interrupted else { throw SystemError("wait for process \(pid)") }
    }
    // WIFEXITED, WEXITSTATUS and WTERMSIG are macros Swift does not import.
    let signal = status & 0x7F
    return signal == 0 ? (status >> 8) & 0xFF : 128 + signal
  }

  /// The lowest descriptor number from 3 up that none of `used` occupies.
  static func freeTarget(avoiding used: [Int32]) -> Int32 {
    var target: Int32 = 3
    while used.contains(target) { target += 1 }
    return target
  }
}
