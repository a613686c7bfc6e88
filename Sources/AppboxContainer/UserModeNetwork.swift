// The app's own network: a network namespace of its own, connected outward by pasta.
//
// Algorithm (JailProcess runs these steps around the jail's start):
// 1. Two pipes go to the jail's start: `enter` writes one byte on the first once it is in
//    the app's new network namespace (and the user namespace owning it, which maps only the
//    app's uid); `confine` waits on the second for one byte before it execs the app.
// 2. On that byte, appbox starts `appbox-sandbox network [--user UID:GID] -- pasta ...`: pasta
//    runs as the uid owning those namespaces (the app's own when appbox is root; never root),
//    dies with appbox, joins /proc/<enter>/ns/user and /net (that process is bubblewrap's
//    first by then, still in both), and configures a tap interface with the host's
//    addresses and routes. It relays what the app sends out through ordinary sockets of the
//    host, and forwards no port in either direction (-t/-u/-T/-U none), nor maps the gateway
//    address to the host's loopback (--no-map-gw); DHCP, DHCPv6 and router advertisements
//    are off (the addresses are configured directly). It writes its pid on descriptor 3
//    once it is ready (its -P file is that pipe, handed to its uid).
// 3. appbox reads that pid and writes the byte `confine` waits for. bubblewrap builds the
//    jail meanwhile: pasta's start overlaps the jail's.
// 4. Once the app's first process has ended (bubblewrap exits then, and the kernel kills
//    the rest of the jail), appbox kills pasta (SIGKILL) and reaps it on another thread. If
//    pasta fails before it is ready, appbox closes the second pipe instead of writing: `confine`
//    exits without starting the app, and appbox reports pasta's own words (exit 69).
// Invariants: the app never starts before its network is up; pasta never runs as root and
// never outlives the run (PR_SET_PDEATHSIG, and the stop above); nothing of appbox's state
// reaches pasta (it gets /dev/null, its readiness pipe and an error pipe only).

import AppboxCore
import Foundation
import Glibc
import Synchronization

/// pasta, started for one run of an app with a network of its own.
final class UserModeNetwork: @unchecked Sendable {
  /// The options pasta gets besides the namespaces and its readiness descriptor (see the
  /// file's header).
  static let pastaOptions = [
    "--config-net", "--foreground", "--quiet", "-t", "none", "-u", "none", "-T", "none", "-U", "none",
    "--no-map-gw", "--no-dhcp", "--no-dhcpv6", "--no-ra",
  ]

  /// pasta: the first executable `pasta` in `$PATH` (default /usr/bin:/bin). Missing is exit
  /// 69: the app never gets the host's network instead.
  static func pastaPath(environment: [String: String], for app: AppRecord) throws -> String {
    let search = environment["PATH"].flatMap { $0.isEmpty ? nil : $0 } ?? "/usr/bin:/bin"
    for directory in search.split(separator: ":") where directory.hasPrefix("/") {
      let candidate = String(directory) + "/pasta"
      if access(candidate, X_OK) == 0 { return candidate }
    }
    throw ContainerError(
      .unavailable,
      "Cannot give \(app.bundleIdentifier) a network of its own: pasta is not installed (not found in "
        + "PATH=\(search)); install the 'passt' package, or run with --network none or --network host")
  }

  /// The pipes of step 1 (both ends close-on-exec here; the jail gets one end of each).
  struct Pipes {
    let namespaceReady: (read: FileDescriptor, write: FileDescriptor)
    let up: (read: FileDescriptor, write: FileDescriptor)

    static func make() throws -> Pipes {
      let first = try FileDescriptor.pipe()
      do {
        return Pipes(namespaceReady: first, up: try FileDescriptor.pipe())
      } catch {
        first.read.close()
        first.write.close()
        throw error
      }
    }

    /// The ends the jail holds, closed here once it started.
    func closeJailEnds() {
      namespaceReady.write.close()
      up.read.close()
    }

    func closeOwnEnds() {
      namespaceReady.read.close()
      up.write.close()
    }
  }

  let app: AppRecord
  private let pid: pid_t
  private let errors: FileDescriptor
  private let collected = Mutex<[UInt8]>([])
  private let drained = DispatchSemaphore(value: 0)

  /// Step 2 and 3: waits for the jail's namespace, starts pasta in it and, once pasta is
  /// ready, lets the app start. Returns nil when the jail failed first (`enter` before making
  /// the namespace, or bubblewrap: their message is on stderr, and waiting for the jail
  /// reports it). When pasta fails, the jail `jailPID` ends without starting the app (the
  /// caller reaps it), and the error says why.
  static func start(
    for app: AppRecord, pipes: Pipes, jailPID: pid_t, helper: String, pasta: String,
    environment: [String: String], user: UInt32?
  ) throws -> UserModeNetwork? {
    defer { pipes.closeOwnEnds() }
    var byte: UInt8 = 0
    let got = (try? withUnsafeMutableBytes(of: &byte) { try pipes.namespaceReady.read.read(into: $0) }) ?? 0
    guard got == 1 else { return nil }
    let ready = try FileDescriptor.pipe()
    defer { ready.read.close() }
    let network: UserModeNetwork
    do {
      // Only pasta may hold the write ends once it runs: their end of file is its end.
      defer { ready.write.close() }
      if let user { try ready.write.setOwner(user, user) }  // pasta reopens it as that uid
      let errors = try FileDescriptor.pipe()
      defer { errors.write.close() }
      let null = try FileDescriptor.open("/dev/null", O_RDWR)
      defer { null.close() }
      var arguments = [Sandbox.helperName, "network"]
      if let user { arguments += ["--user", "\(user):\(user)"] }
      arguments += ["--", pasta] + pastaOptions
      arguments += [
        "--userns", "/proc/\(jailPID)/ns/user", "--netns", "/proc/\(jailPID)/ns/net", "--pid",
        "/proc/self/fd/3",
      ]
      do {
        let pid = try ChildProcess.spawn(
          helper, arguments: arguments, environment: ["PATH": environment["PATH"] ?? "/usr/bin:/bin"],
          inherited: [
            .init(source: null, target: 0), .init(source: null, target: 1),
            .init(source: errors.write, target: 2), .init(source: ready.write, target: 3),
          ])
        network = UserModeNetwork(app: app, pid: pid, errors: errors.read)
      } catch {
        errors.read.close()
        throw error
      }
    }
    return try network.awaitReady(ready.read, pipes: pipes, jailPID: jailPID)
  }

  private init(app: AppRecord, pid: pid_t, errors: FileDescriptor) {
    self.app = app
    self.pid = pid
    self.errors = errors
    // pasta may log while the app runs: its errors pipe is drained for the whole run, and
    // what it says first is kept for a failure's message.
    Thread.detachNewThread { [self] in
      var buffer = [UInt8](repeating: 0, count: 4096)
      while true {
        let count = (try? buffer.withUnsafeMutableBytes { try errors.read(into: $0) }) ?? 0
        if count <= 0 { break }
        collected.withLock { if $0.count < 16 << 10 { $0 += buffer[0..<count] } }
      }
      drained.signal()
    }
  }

  /// Reads pasta's pid from `ready`; then lets the app start. On failure, kills the jail and
  /// throws pasta's reason.
  private func awaitReady(_ ready: FileDescriptor, pipes: Pipes, jailPID: pid_t) throws -> UserModeNetwork? {
    var text: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 32)
    while !text.contains(UInt8(ascii: "\n")) {
      let count = (try? buffer.withUnsafeMutableBytes { try ready.read(into: $0) }) ?? 0
      if count <= 0 { break }
      text += buffer[0..<count]
    }
    if text.contains(UInt8(ascii: "\n")) {
      try? pipes.up.write.writeAll([UInt8(ascii: "u")])
      return self
    }
    let status = stop()
    if ChildProcess.hasEnded(jailPID) {
      // bubblewrap failed first (and so did pasta, its namespaces gone): waiting for the
      // jail reports bubblewrap's own failure.
      return nil
    }
    // The app has not started: `confine` waits for the byte. Seeing the pipe close instead
    // (`start` closes it as it returns), it exits 69 without a word, bubblewrap ends the jail
    // the usual way, and the caller reaps it. (Killing bubblewrap instead could leave its
    // jail's first process behind, if it came before that process asked to die with its
    // parent.)
    throw ContainerError(
      .unavailable,
      "Cannot give \(app.bundleIdentifier) a network of its own: pasta failed (\(failureReason(status: status)))"
        + "; run with --network none (no network) or --network host (the host's, loopback included)")
  }

  /// What pasta said, without its complaints about a missing system logger.
  private func failureReason(status: Int32) -> String {
    let lines = collected.withLock { String(decoding: $0, as: UTF8.self) }.split(separator: "\n").map {
      $0.trimmingCharacters(in: .whitespaces)
    }
    let said = lines.filter { !$0.isEmpty && !$0.hasPrefix("Failed to send") }.joined(separator: "; ")
    var reason = said.isEmpty ? "exit status \(status)" : said
    var st = stat()
    if said.contains("tun"), stat("/dev/net/tun", &st) == 0, st.st_mode & 0o006 != 0o006 {
      reason +=
        "; /dev/net/tun is mode \(String(st.st_mode & 0o777, radix: 8)): pasta needs it readable and "
        + "writable by every user, as udev makes it (chmod 0666 /dev/net/tun)"
    }
    return reason
  }

  /// Ends pasta (SIGKILL: it has nothing to save), without waiting for it.
  func requestStop() { kill(pid, SIGKILL) }

  /// Step 4: ends pasta and waits for it; returns its exit status.
  @discardableResult
  func stop() -> Int32 {
    requestStop()
    let status = ChildProcess.reap(pid)
    drained.wait()
    errors.close()
    return status
  }

  /// Step 4 when the run is over: ends pasta and reaps it on another thread. Tearing down
  /// its buffers and namespaces takes the kernel tens of milliseconds, which the caller
  /// need not wait for: pasta is dead to the app from the signal on.
  func stopInBackground() {
    requestStop()
    Thread.detachNewThread { [self] in stop() }
  }
}
