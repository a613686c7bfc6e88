import AppboxCore
import CSystem
import Foundation
import Glibc
import Synchronization

/// The result of running a program to completion.
public struct ProcessResult: Sendable {
  public var status: Int32
  public var stdout: [UInt8]
  public var stderr: [UInt8]
  public var out: String { String(decoding: stdout, as: UTF8.self) }
  public var err: String { String(decoding: stderr, as: UTF8.self) }

  public init(status: Int32, stdout: [UInt8], stderr: [UInt8]) {
    self.status = status
    self.stdout = stdout
    self.stderr = stderr
  }
}

/// The directory of the built products (`.build/<triple>/debug`), where the test bundle runs.
public let productsDirectory: String = {
  let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? ""
  var directory = splitPath(executable).directory
  // `swift test` runs `<products>/appboxPackageTests.xctest`, a file in the products directory.
  while !FileManager.default.fileExists(atPath: directory + "/appbox"), directory.count > 1 {
    directory = splitPath(directory).directory
  }
  return directory
}()

/// A started child process (see `spawnProcess`).
public struct SpawnedProcess: Sendable {
  public let pid: pid_t

  /// Waits for the child; its exit status, or 128 + N when signal N ended it.
  public func wait() -> Int32 {
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    return exitStatus(ofWaitStatus: status)
  }
}

/// A child's exit status from `waitpid(2)`'s raw status, as a shell gives it: 128 + N when
/// signal N ended it.
public func exitStatus(ofWaitStatus status: Int32) -> Int32 {
  let signal = status & 0x7F
  return signal == 0 ? (status >> 8) & 0xFF : 128 + signal
}

/// A child started in the background and watched with `waitpid(2)` (see `startProcess`):
/// the few members of Foundation's `Process` the tests use, with the same meanings, and no
/// run loop. `waitUntilExit` and `isRunning` may be called from any thread.
public final class StartedProcess: Sendable {
  public enum TerminationReason: Sendable { case exit, uncaughtSignal }

  public let processIdentifier: pid_t
  /// The raw wait status once the child has been reaped.
  private let reaped = Mutex<Int32?>(nil)

  init(_ pid: pid_t) { processIdentifier = pid }

  /// Whether the child still runs (reaps it when it has ended).
  public var isRunning: Bool { reap() == nil }

  /// Waits for the child to end. The wait itself leaves the child unreaped (`WNOWAIT`) and
  /// holds no lock, so `isRunning` from another thread answers meanwhile.
  public func waitUntilExit() {
    while reap() == nil {
      var info = siginfo_t()
      if waitid(P_PID, id_t(processIdentifier), &info, WEXITED | WNOWAIT) < 0 && errno != EINTR { return }
    }
  }

  /// Why the child ended (call after it has).
  public var terminationReason: TerminationReason {
    (status & 0x7F) == 0 ? .exit : .uncaughtSignal
  }

  /// The child's exit status, or the number of the signal that ended it (call after it has).
  public var terminationStatus: Int32 {
    terminationReason == .exit ? (status >> 8) & 0xFF : status & 0x7F
  }

  /// Sends SIGTERM.
  public func terminate() { kill(processIdentifier, SIGTERM) }

  private var status: Int32 {
    guard let status = reaped.withLock({ $0 }) else { preconditionFailure("the process still runs") }
    return status
  }

  /// The raw wait status, reaping the child if it has ended; nil while it runs.
  private func reap() -> Int32? {
    reaped.withLock { reaped in
      if let reaped { return reaped }
      var status: Int32 = 0
      var result: pid_t
      repeat { result = waitpid(processIdentifier, &status, WNOHANG) } while result < 0 && errno == EINTR
      if result == processIdentifier { reaped = status }
      return reaped
    }
  }
}

/// Starts `executable` in the background with no descriptors but stdin, stdout and stderr,
/// which are /dev/null unless `output` is true (then the test's own stdout and stderr).
/// `blocking` lists signals the child starts with blocked.
public func startProcess(
  _ executable: String, _ arguments: [String], environment: [String: String]? = nil, output: Bool = false,
  blocking: [Int32] = []
) throws -> StartedProcess {
  let null = try FileDescriptor.open("/dev/null", O_RDWR)
  defer { null.close() }
  let quiet = output ? nil : null.rawValue
  let child = try spawnProcess(
    executable, arguments, environment: environment, stdin: null.rawValue, stdout: quiet, stderr: quiet,
    blocking: blocking)
  return StartedProcess(child.pid)
}

/// Starts `executable` with `posix_spawn(3)` — Foundation's `Process` spends ~50 ms per
/// start on this machine, which would swamp what the tests and benchmarks measure, and its
/// `waitUntilExit` waits on a run loop for a termination notice that can be missed, which
/// parks a test thread for good (the CI run that hung until its time ran out).
/// The child gets default signal dispositions, none blocked but `blocking`;
/// `stdin`/`stdout`/`stderr` replace the caller's when given. It inherits no other
/// descriptor: a pipe that another test thread opened without close-on-exec must not stay
/// open in a long-lived child (an object-store daemon), or that test never sees its end.
public func spawnProcess(
  _ executable: String, _ arguments: [String], environment: [String: String]? = nil,
  stdin: Int32? = nil, stdout: Int32? = nil, stderr: Int32? = nil, blocking: [Int32] = []
) throws -> SpawnedProcess {
  var actions = posix_spawn_file_actions_t()
  posix_spawn_file_actions_init(&actions)
  defer { posix_spawn_file_actions_destroy(&actions) }
  for (source, target) in [(stdin, Int32(0)), (stdout, 1), (stderr, 2)] {
    if let source { posix_spawn_file_actions_adddup2(&actions, source, target) }
  }
  appbox_spawn_close_from(&actions, 3)
  var attributes = posix_spawnattr_t()
  posix_spawnattr_init(&attributes)
  defer { posix_spawnattr_destroy(&attributes) }
  var none = sigset_t()
  sigemptyset(&none)
  for signal in blocking { sigaddset(&none, signal) }
  var all = sigset_t()
  sigfillset(&all)
  posix_spawnattr_setsigmask(&attributes, &none)
  posix_spawnattr_setsigdefault(&attributes, &all)
  posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
  let argv = ([executable] + arguments).map { strdup($0) } + [nil]
  let env =
    (environment ?? ProcessInfo.processInfo.environment).map { strdup("\($0.key)=\($0.value)") } + [nil]
  defer {
    for pointer in argv { free(pointer) }
    for pointer in env { free(pointer) }
  }
  var pid = pid_t()
  let result = posix_spawn(&pid, executable, &actions, &attributes, argv, env)
  guard result == 0 else { throw SystemError("start", path: executable, errno: Errno(rawValue: result)) }
  return SpawnedProcess(pid: pid)
}

/// Runs `executable` with `arguments`, feeding `input` on stdin; returns status and output.
/// Reads both pipes concurrently so a chatty child cannot deadlock. With
/// `currentDirectory`, runs it through `/bin/sh` after a `cd`.
public func runProcess(
  _ executable: String, _ arguments: [String], environment: [String: String]? = nil, input: [UInt8] = [],
  currentDirectory: String? = nil
) throws -> ProcessResult {
  if let currentDirectory {
    return try runProcess(
      "/bin/sh", ["-c", "cd \"$0\" && exec \"$@\"", currentDirectory, executable] + arguments,
      environment: environment, input: input)
  }
  // The test's ends live until the child ends: out of the low numbers that every open reuses.
  func makePipe(testReads: Bool) throws -> (read: Int32, write: Int32) {
    let pipe = try FileDescriptor.pipe()
    let (read, write) = (pipe.read.rawValue, pipe.write.rawValue)
    return testReads ? (parkHigh(read), write) : (read, parkHigh(write))
  }
  let inputPipe = try makePipe(testReads: false)
  let outputPipe = try makePipe(testReads: true)
  let errorPipe = try makePipe(testReads: true)
  let child: SpawnedProcess
  do {
    child = try spawnProcess(
      executable, arguments, environment: environment, stdin: inputPipe.read, stdout: outputPipe.write,
      stderr: errorPipe.write)
  } catch {
    for fd in [
      inputPipe.read, inputPipe.write, outputPipe.read, outputPipe.write, errorPipe.read, errorPipe.write,
    ] {
      close(fd)
    }
    throw error
  }
  close(inputPipe.read)
  close(outputPipe.write)
  close(errorPipe.write)
  let writer = inputPipe.write
  let group = DispatchGroup()
  nonisolated(unsafe) var errorDrain = Drained()
  DispatchQueue.global().async(group: group) { errorDrain = drain(errorPipe.read) }
  DispatchQueue.global().async(group: group) {
    signal(SIGPIPE, SIG_IGN)  // a child that does not read its input must not kill the tests
    _ = try? FileDescriptor(rawValue: writer).writeAll(input)
    close(writer)
  }
  let outputDrain = drain(outputPipe.read)
  group.wait()
  let status = child.wait()
  for (drained, stream) in [(outputDrain, "stdout"), (errorDrain, "stderr")] {
    if let failure = drained.failure {
      throw SystemError("read \(splitPath(executable).name)'s \(stream) (exit \(status))", errno: failure)
    }
  }
  return ProcessResult(status: status, stdout: outputDrain.bytes, stderr: errorDrain.bytes)
}

/// Moves `fd` to a number of 700 or more (close-on-exec), where no other thread's stale
/// `close` of a recently freed low number can take it: the pipe a test reads a child's
/// output from must stay open until the child ends (a CI run saw a child die of SIGPIPE,
/// its reader gone). Keeps `fd` when the descriptor limit leaves no such number.
private func parkHigh(_ fd: Int32) -> Int32 {
  let high = fcntl(fd, F_DUPFD_CLOEXEC, 700)
  guard high >= 0 else { return fd }
  close(fd)
  return high
}

/// What `drain` read, and the error that ended it early, if one did.
struct Drained {
  var bytes: [UInt8] = []
  var failure: Errno?
}

/// Reads `fd` to its end, then closes it. A read error is kept, not taken for the end:
/// EBADF here means another thread closed this descriptor (whose number is then not ours
/// to close again).
func drain(_ fd: Int32) -> Drained {
  var result = Drained()
  defer { if result.failure != .badDescriptor { close(fd) } }
  var chunk = [UInt8](repeating: 0, count: 65536)
  while true {
    let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
    if n < 0 && errno == EINTR { continue }
    if n < 0 { result.failure = Errno(rawValue: errno) }
    if n <= 0 { return result }
    result.bytes += chunk[0..<n]
  }
}

/// Runs the built `appbox` with `--root root` prepended.
public func appbox(
  _ arguments: [String], root: String?, environment extra: [String: String] = [:], input: [UInt8] = []
)
  throws -> ProcessResult
{
  var environment = ProcessInfo.processInfo.environment
  environment.removeValue(forKey: "APPBOX_ROOT")
  for (key, value) in extra { environment[key] = value }
  let args = (root.map { ["--root", $0] } ?? []) + arguments
  return try runProcess(productsDirectory + "/appbox", args, environment: environment, input: input)
}
