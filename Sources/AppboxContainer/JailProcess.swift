// Starting one app in its jail and waiting until nothing of it is left.
//
// Algorithm:
// 1. Pipes: one for bubblewrap's JSON status (--json-status-fd), two carrying the jail's
//    /etc/passwd and /etc/group (`enter` --etc-data; written whole before the start); a
//    socket pair on which `confine` says the app starts (--start-fd).
// 2. Spawn `appbox-sandbox enter ... -- bwrap ... -- appbox-sandbox confine ... -- CMD`
//    with stdio, those descriptors and the ones the caller passes to the app.
//    The running lock stays in appbox (close-on-exec): no descriptor of appbox's state
//    reaches the jail.
// 3. Read the status until bubblewrap reports "child-pid": the host pid of the jail's
//    pid 1 (bubblewrap's reaper), whose process group is the app's. Open a pidfd on it.
//    Then wait until `confine` says it is about to exec the app (a socket pair, --start-fd):
//    until then the process group may hold only that pid 1, which drops signals.
// 4. Wait for bubblewrap, passing SIGTERM, SIGINT, SIGHUP and SIGQUIT on to that process
//    group (the reaper, as a pid namespace's init, ignores them; the app, or `confine` just
//    before it execs the app, gets them). One that came earlier is passed on then; if the
//    jail never said the app starts, it stops the start instead: the jail's pid 1 is killed,
//    which ends the whole pid namespace.
// 5. bubblewrap exits as soon as the app's first process does; with --die-with-parent the
//    reaper then gets SIGKILL, and the kernel kills every process left in the pid
//    namespace (a daemonised child included) before the reaper itself is gone. Wait on
//    the pidfd for that, so the caller releases the running lock only when no process
//    of the app is alive.
// 6. The exit status is the app's ("exit-code", written only once the command was
//    executed); without it, the jail could not be built: exit 69, bubblewrap's own
//    message being on stderr already.
// With a network of its own (the default), two more channels reach the jail's start, and
// between steps 2 and 3 appbox starts pasta in the app's network namespace and the network
// gate, which holds the app's first sockets until pasta is up; the app does not wait for
// pasta to start. Should pasta fail, the jail is stopped and appbox exits 69 with pasta's
// words; pasta stops after step 5 (UserModeNetwork.swift, NetworkGate.swift).

import AppboxCore
import CSystem
import Foundation
import Glibc

enum JailProcess {
  /// Runs `command` in `jail` and returns its exit status (128 + N for signal N).
  /// `started` hears the host pid of the jail's pid 1 once the jail exists (run records).
  static func run(
    _ jail: Jail, command: [String], options: SandboxOptions, helper: String, bubblewrap: String,
    environment: [String: String], cgroup: DelegatedCgroup?, landlock: Bool, pasta: String? = nil,
    started: ((pid_t) -> Void)? = nil
  ) throws -> Int32 {
    let status = try FileDescriptor.pipe()
    defer { status.read.close() }
    var statusWrite: FileDescriptor? = status.write
    defer { statusWrite?.close() }
    let passwd = try dataPipe(jail.passwd)
    defer { passwd.close() }
    let group = try dataPipe(jail.group)
    defer { group.close() }

    // The app's own descriptors keep their numbers; ours go above them.
    let passed = options.passedDescriptors
    for item in passed where item.number < 3 {
      throw ContainerError(
        .invalidRequest, "Descriptor number \(item.number) is the app's stdio; use 3 or more")
    }
    let base = max(3, (passed.map(\.number).max() ?? 2) + 1)
    var descriptors = Jail.Descriptors(status: base, passwd: base + 1, group: base + 2, start: base + 3)
    let start = try StartChannel()
    defer { start.close() }
    let namespaceReady = options.network == .own ? try FileDescriptor.pipe() : nil
    var namespaceReadyWrite = namespaceReady?.write
    defer {
      namespaceReady?.read.close()
      namespaceReadyWrite?.close()
    }
    if namespaceReady != nil { descriptors.networkNamespaceReady = base + 4 }
    var inherited: [ChildProcess.Inherited] = []
    for (descriptor, number) in [
      (options.standardInput, 0), (options.standardOutput, 1), (options.standardError, 2),
    ] {
      if let descriptor { inherited.append(.init(source: descriptor, target: Int32(number))) }
    }
    inherited += [
      .init(source: status.write, target: descriptors.status),
      .init(source: passwd, target: descriptors.passwd),
      .init(source: group, target: descriptors.group),
      .init(source: start.jailEnd, target: base + 3),
    ]
    inherited += passed.map { .init(source: $0.descriptor, target: $0.number) }
    if let namespaceReady { inherited.append(.init(source: namespaceReady.write, target: base + 4)) }

    var runCgroup: String?
    if let cgroup {
      runCgroup = try cgroup.makeChild(
        named: "appbox-\(jail.app.containerID)-\(getpid())-\(UInt32.random(in: 0...UInt32.max))",
        limits: options.limits)
    }
    defer { if let runCgroup { cgroup?.removeChild(runCgroup) } }

    let arguments = jail.commandLine(
      helper: helper, bubblewrap: bubblewrap, command: command, options: options,
      keptDescriptors: passed.map(\.number), descriptors: descriptors, cgroup: runCgroup, landlock: landlock,
      privileged: AppUser.isPrivileged)
    // Forwarding starts before the child does: a SIGTERM from now on reaches the app.
    let signalMask = SignalForwarder.install()
    defer { SignalForwarder.remove(restoring: signalMask) }
    let pid = try ChildProcess.spawn(
      helper, arguments: arguments, environment: Sandbox.environment(for: jail, inheriting: environment),
      inherited: inherited)
    status.write.close()
    statusWrite = nil
    start.closeJailEnd()
    namespaceReadyWrite?.close()
    namespaceReadyWrite = nil

    var network: UserModeNetwork?
    if let namespaceReady {
      do {
        network = try UserModeNetwork.start(
          for: jail.app, namespaceReady: namespaceReady.read, jailPID: pid, helper: helper,
          pasta: pasta ?? "pasta", environment: environment, user: AppUser.isPrivileged ? jail.uid : nil)
      } catch {
        // `confine` finds the start channel closed and ends without starting the app.
        start.close()
        ChildProcess.reap(pid)
        throw error
      }
    }

    var report = StatusReport()
    report.read(from: status.read, until: { $0.childPID != nil })
    let reaper = report.childPID.flatMap { Reaper(pid: $0) }
    defer { reaper?.close() }
    // Closes the gate before the reaper's pidfd is closed (defers run last first).
    var networkFinished = false
    defer { if !networkFinished { _ = network?.finish() } }
    var appStarting = false
    if let childPID = report.childPID {
      started?(childPID)
      // Should pasta fail, the jail stops: its pid 1 ends, and with it the whole pid namespace.
      if let reaper {
        network?.jailStarted(stop: reaper.killer)
      } else {
        network?.jailStarted(stop: { _ = kill(childPID, SIGKILL) })
      }
      // Until `confine` says the app starts, the app's process group may hold only the jail's
      // pid 1, which drops signals: one that comes meanwhile is passed on once it has said so.
      let announcement = start.awaitAnnouncement()
      appStarting = announcement.arrived
      if let listener = announcement.descriptor {
        if let network { network.attach(gateListener: listener) } else { listener.close() }
      }
    }
    // A signal while the jail was being built, which never said the app starts, stops the
    // start: killing its first process ends the whole pid namespace (nothing of the app can
    // outlive it), and appbox ends as that signal says.
    let stoppedBy = SignalForwarder.setTarget(report.childPID.map { -$0 } ?? pid, appStarting: appStarting) {
      kill(report.childPID ?? pid, SIGKILL)
    }
    let exit = try ChildProcess.wait(for: pid)
    // The app's first process is gone: the gate closes, and pasta ends while the rest does.
    let networkFailure = network?.finish()
    networkFinished = true
    report.read(from: status.read, until: { _ in false })
    reaper?.waitUntilGone()

    if let stoppedBy { return 128 + stoppedBy }
    // pasta failed while the jail ran, which was stopped for it (its status is that SIGKILL's).
    if report.childPID != nil, let networkFailure { throw networkFailure }
    if let code = report.exitCode { return code }
    if exit == 1 || report.childPID != nil {
      throw ContainerError(
        .unavailable,
        "Cannot start \(jail.app.bundleIdentifier): bubblewrap could not build its jail (see its message above)"
      )
    }
    return exit  // the helper's own refusal (64, 69, 71...), already explained on stderr
  }

  /// A pipe's read end holding `text` whole (the write end is closed).
  private static func dataPipe(_ text: String) throws -> FileDescriptor {
    let pipe = try FileDescriptor.pipe()
    defer { pipe.write.close() }
    do {
      try pipe.write.writeAll(Array(text.utf8))  // a few hundred bytes: well within a pipe's buffer
    } catch {
      pipe.read.close()
      throw error
    }
    return pipe.read
  }
}

/// The socket pair on which `confine` says it is about to exec the app (one byte, carrying the
/// network gate's listener when the app has a network of its own).
final class StartChannel {
  private var own: FileDescriptor?
  private(set) var jailEnd: FileDescriptor
  private var jailEndOpen = true

  init() throws {
    var pair: [Int32] = [-1, -1]
    guard appbox_socketpair(1, &pair) == 0 else { throw SystemError("create the jail's start channel") }
    own = FileDescriptor(rawValue: pair[0])
    jailEnd = FileDescriptor(rawValue: pair[1])
  }

  /// The jail's end, once the jail holds it.
  func closeJailEnd() {
    if jailEndOpen { jailEnd.close() }
    jailEndOpen = false
  }

  /// Waits for `confine`'s message, or for the channel to close without one (the jail failed
  /// before the app could start): whether it came, and the descriptor it carried, if any.
  /// Closes the channel. Uses `poll(2)` and `recvmsg(2)`.
  func awaitAnnouncement() -> (arrived: Bool, descriptor: FileDescriptor?) {
    guard let own else { return (false, nil) }
    defer { close() }
    while true {
      var entry = pollfd(fd: own.rawValue, events: Int16(POLLIN), revents: 0)
      guard poll(&entry, 1, -1) >= 0 || Errno.current == .interrupted else { return (false, nil) }
      guard entry.revents != 0 else { continue }
      var byte: UInt8 = 0
      var received: Int32 = -1
      var truncated: Int32 = 0
      let count = appbox_receive_descriptor(own.rawValue, &byte, 1, &received, &truncated)
      if count < 0 && (Errno.current == .wouldBlock || Errno.current == .interrupted) { continue }
      return (count > 0, received >= 0 ? FileDescriptor(rawValue: received) : nil)
    }
  }

  func close() {
    own?.close()
    own = nil
    closeJailEnd()
  }
}

/// What bubblewrap writes on its JSON status descriptor: `{ "child-pid": N, ... }` when
/// the jail's pid 1 exists, `{ "exit-code": N }` after the command ran and ended.
struct StatusReport {
  private(set) var text = ""

  var childPID: pid_t? { number(after: "\"child-pid\":") }
  var exitCode: Int32? { number(after: "\"exit-code\":") }

  /// Reads until `done` holds or the writer closed its end.
  mutating func read(from descriptor: FileDescriptor, until done: (StatusReport) -> Bool) {
    var buffer = [UInt8](repeating: 0, count: 4096)
    while !done(self) {
      let count = (try? buffer.withUnsafeMutableBytes { try descriptor.read(into: $0) }) ?? 0
      if count == 0 { return }
      text += String(decoding: buffer[0..<count], as: UTF8.self)
    }
  }

  private func number(after key: String) -> Int32? {
    guard let range = text.range(of: key) else { return nil }
    let digits = text[range.upperBound...].drop(while: { $0 == " " }).prefix(while: \.isNumber)
    return Int32(digits)
  }
}

/// The jail's pid 1, watched through a pidfd: it is gone only after every other process
/// of its pid namespace is.
struct Reaper {
  let descriptor: FileDescriptor

  /// A pidfd on `pid`, provided it is still a process of another pid namespace than
  /// this one (a pid that ended and was reused by a host process is not waited for).
  init?(pid: pid_t) {
    let fd = appbox_pidfd_open(pid)
    guard fd >= 0 else { return nil }
    descriptor = FileDescriptor(rawValue: fd)
    if let theirs = readLinkTarget("/proc/\(pid)/ns/pid"), let ours = readLinkTarget("/proc/self/ns/pid"),
      theirs == ours
    {
      descriptor.close()
      return nil
    }
  }

  /// Waits (up to 10 s, for a process stuck in the kernel) until the process is gone.
  func waitUntilGone() {
    var entry = pollfd(fd: descriptor.rawValue, events: Int16(POLLIN), revents: 0)
    let deadline = DispatchTime.now().uptimeNanoseconds + 10_000_000_000
    while poll(&entry, 1, 100) <= 0 && DispatchTime.now().uptimeNanoseconds < deadline {}
  }

  /// Sends SIGKILL to the process (pidfd_send_signal: never to a process that reused its pid);
  /// the closure must not run after `close`.
  var killer: @Sendable () -> Void {
    let descriptor = self.descriptor
    return { _ = appbox_pidfd_send_signal(descriptor.rawValue, SIGKILL) }
  }

  func close() { descriptor.close() }
}
