// The app's own network: a network namespace of its own, connected outward by pasta, which
// starts beside the app rather than before it.
//
// Algorithm (JailProcess runs these steps around the jail's start):
// 1. `enter` writes one byte on a pipe once it is in the app's new network namespace (and the
//    user namespace owning it, which maps only the app's uid); `confine` sends the network
//    gate's listener with the message that says the app starts (NetworkGate.swift), and
//    execs the app without waiting for the network.
// 2. On that byte, appbox opens both namespaces (/proc/<enter>/ns/user and net: a reference of
//    its own, so pasta joins them whatever the jail does meanwhile, even when the app has
//    already ended) and starts `appbox-sandbox network [--user UID:GID] -- pasta ...`: pasta runs
//    as the uid owning those namespaces (the app's own when appbox is root; never root), dies
//    with appbox, starts at nice 19 when appbox is root (the jail's start, which the app
//    waits for, goes first on a busy CPU; pasta is back at 0 once ready), joins both
//    namespaces through the descriptors it inherits, and configures a tap
//    interface with the host's addresses and routes. It relays what the app sends out through
//    ordinary sockets of the host, and forwards no port in either direction (-t/-u/-T/-U
//    none), nor maps the gateway address to the host's loopback (--no-map-gw); DHCP, DHCPv6
//    and router advertisements are off (the addresses are configured directly). It writes its
//    pid on descriptor 3 once it is ready (its -P file is that pipe, handed to its uid).
// 3. A thread of appbox waits for that pid (and drains pasta's stderr): then it opens the
//    gate, and the app's held socket() calls go on. bubblewrap builds the jail, `confine`
//    confines it and the app runs meanwhile: pasta's start overlaps all of them.
// 4. If pasta ends before it is ready, the thread makes the held and later socket() calls fail
//    with ENETDOWN, then stops the jail (SIGKILL to its pid 1, once JailProcess knows it:
//    the whole pid namespace ends), and `finish` hands JailProcess pasta's own words (exit 69).
//    A failure after the app's first process has ended is not one: the app did not need the
//    network.
// 5. Once the app's first process has ended, appbox closes the gate and kills pasta
//    (SIGKILL); the thread reaps it.
// Invariants: no socket but AF_UNIX works before pasta is up (it waits, or fails with
// ENETDOWN); pasta never runs as root and never outlives the run (PR_SET_PDEATHSIG, and the
// stop above); nothing of appbox's state reaches pasta (it gets /dev/null, its readiness
// pipe, an error pipe and the two namespaces only).

import AppboxCore
import CSystem
import Foundation
import Glibc
import Synchronization

/// pasta and the network gate, started for one run of an app with a network of its own.
final class UserModeNetwork: Sendable {
  /// The options pasta gets besides the namespaces and its readiness descriptor (see the
  /// file's header).
  static let pastaOptions = [
    "--config-net", "--foreground", "--quiet", "-t", "none", "-u", "none", "-T", "none", "-U", "none",
    "--no-map-gw", "--no-dhcp", "--no-dhcpv6", "--no-ra",
  ]

  /// The errno a socket() call held by the gate gets when pasta fails: the network did not
  /// come up (and the jail is being stopped).
  static let failedNetworkError = Errno(rawValue: ENETDOWN)

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

  /// What the run knows of pasta's outcome and of the jail (see `jailStarted` and `finish`).
  private struct Outcome {
    /// pasta failed before it was ready, while the app ran.
    var failure: ContainerError?
    /// Stops the jail: set once its pid 1 is known.
    var stopJail: (@Sendable () -> Void)?
    /// The app's first process has ended: a failure from now on is none.
    var over = false
  }

  let app: AppRecord
  private let pid: pid_t
  /// A pidfd on pasta, so that no signal reaches another process once pasta is reaped.
  private let process: FileDescriptor?
  private let gate: NetworkGate
  private let outcome = Mutex(Outcome())
  /// pasta starts at `startingNiceness` (as root only) and is raised back to 0 once ready.
  private let reniceWhenReady: Bool

  /// The nice value pasta starts at when appbox is root: the jail's start, which the app
  /// waits for, goes first on a busy CPU; an app's first socket waits for pasta anyway, and
  /// the CPU is pasta's then. Unprivileged, pasta starts at the usual priority, since an
  /// unprivileged appbox could not raise it back.
  static let startingNiceness = 19

  /// Steps 2 and 3: waits for the jail's namespace, starts pasta in it and the gate, and
  /// returns without waiting for pasta. Returns nil when the jail failed first (`enter` before
  /// making the namespace, or bubblewrap: their message is on stderr, and waiting for the jail
  /// reports it).
  static func start(
    for app: AppRecord, namespaceReady: FileDescriptor, jailPID: pid_t, helper: String, pasta: String,
    environment: [String: String], user: UInt32?
  ) throws -> UserModeNetwork? {
    var byte: UInt8 = 0
    let got = (try? withUnsafeMutableBytes(of: &byte) { try namespaceReady.read(into: $0) }) ?? 0
    guard got == 1 else { return nil }
    // The namespaces, held here: `enter` is bubblewrap's first process by now, and may end
    // (with the whole jail) before pasta gets to them.
    guard let userNamespace = try? FileDescriptor.open("/proc/\(jailPID)/ns/user", O_RDONLY) else {
      return nil
    }
    defer { userNamespace.close() }
    guard let networkNamespace = try? FileDescriptor.open("/proc/\(jailPID)/ns/net", O_RDONLY) else {
      return nil
    }
    defer { networkNamespace.close() }
    let ready = try FileDescriptor.pipe()
    var readyRead: FileDescriptor? = ready.read
    defer { readyRead?.close() }
    let errors: (read: FileDescriptor, write: FileDescriptor)
    let pid: pid_t
    do {
      // Only pasta may hold the write ends once it runs: their end of file is its end.
      defer { ready.write.close() }
      if let user { try ready.write.setOwner(user, user) }  // pasta reopens it as that uid
      errors = try FileDescriptor.pipe()
      defer { errors.write.close() }
      let null = try FileDescriptor.open("/dev/null", O_RDWR)
      defer { null.close() }
      var arguments = [Sandbox.helperName, "network"]
      if let user { arguments += ["--user", "\(user):\(user)", "--nice", String(startingNiceness)] }
      arguments += ["--", pasta] + pastaOptions
      arguments += ["--userns", "/proc/self/fd/4", "--netns", "/proc/self/fd/5", "--pid", "/proc/self/fd/3"]
      do {
        pid = try ChildProcess.spawn(
          helper, arguments: arguments, environment: ["PATH": environment["PATH"] ?? "/usr/bin:/bin"],
          inherited: [
            .init(source: null, target: 0), .init(source: null, target: 1),
            .init(source: errors.write, target: 2), .init(source: ready.write, target: 3),
            .init(source: userNamespace, target: 4), .init(source: networkNamespace, target: 5),
          ])
      } catch {
        errors.read.close()
        throw error
      }
    }
    let gate: NetworkGate
    do {
      gate = try NetworkGate()
    } catch {
      kill(pid, SIGKILL)
      ChildProcess.reap(pid)
      errors.read.close()
      throw error
    }
    let network = UserModeNetwork(app: app, pid: pid, gate: gate, reniceWhenReady: user != nil)
    readyRead = nil
    network.watch(ready: ready.read, errors: errors.read)
    return network
  }

  private init(app: AppRecord, pid: pid_t, gate: NetworkGate, reniceWhenReady: Bool) {
    self.app = app
    self.pid = pid
    self.reniceWhenReady = reniceWhenReady
    let descriptor = appbox_pidfd_open(pid)
    process = descriptor >= 0 ? FileDescriptor(rawValue: descriptor) : nil
    self.gate = gate
  }

  deinit { process?.close() }

  /// Step 3 and 4, on a thread of its own: reads pasta's pid from `ready` and what it says on
  /// `errors` (kept for a failure's message) until both close, then reaps pasta.
  private func watch(ready: FileDescriptor, errors: FileDescriptor) {
    Thread.detachNewThread { [self] in
      var said: [UInt8] = []
      var announced: [UInt8] = []
      var isReady = false
      var open = [ready, errors]
      var buffer = [UInt8](repeating: 0, count: 4096)
      while !open.isEmpty {
        var entries = open.map { pollfd(fd: $0.rawValue, events: Int16(POLLIN), revents: 0) }
        guard poll(&entries, nfds_t(entries.count), -1) >= 0 else {
          if Errno.current == .interrupted { continue }
          break
        }
        for (index, entry) in entries.enumerated().reversed() where entry.revents != 0 {
          let descriptor = open[index]
          let count = (try? buffer.withUnsafeMutableBytes { try descriptor.read(into: $0) }) ?? 0
          if count <= 0 {
            descriptor.close()
            open.remove(at: index)
            continue
          }
          if descriptor == ready {
            announced += buffer[0..<count]
            if !isReady && announced.contains(UInt8(ascii: "\n")) {
              isReady = true
              // pasta, not yet reaped, is still this pid. Uses `setpriority(2)`.
              if reniceWhenReady { _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), id_t(pid), 0) }
              gate.open()
            }
          } else if said.count < 16 << 10 {
            said += buffer[0..<count]
          }
        }
      }
      for descriptor in open { descriptor.close() }
      let status = ChildProcess.reap(pid)
      if !isReady { fail(reason: failureReason(said: said, status: status)) }
    }
  }

  /// Step 4: pasta ended before it was ready.
  private func fail(reason: String) {
    let error = ContainerError(
      .unavailable,
      "Cannot give \(app.bundleIdentifier) a network of its own: pasta failed (\(reason))"
        + "; run with --network none (no network) or --network host (the host's, loopback included)")
    let recorded = outcome.withLock { outcome -> Bool in
      guard !outcome.over else { return false }
      outcome.failure = error
      return true
    }
    guard recorded else { return }
    // The app sees its held calls fail before the jail stops.
    gate.refuse(with: Self.failedNetworkError)
    outcome.withLock { outcome in
      if !outcome.over { outcome.stopJail?() }
    }
  }

  /// The gate's listener, which `confine` sent as the app starts.
  func attach(gateListener listener: FileDescriptor) { gate.attach(listener) }

  /// The jail's pid 1 exists: `stop` ends the jail (now, if pasta has failed already).
  func jailStarted(stop: @escaping @Sendable () -> Void) {
    outcome.withLock { outcome in
      outcome.stopJail = stop
      if outcome.failure != nil && !outcome.over { stop() }
    }
  }

  /// Step 5, once the app's first process has ended: closes the gate and kills pasta (reaped by
  /// the watching thread: tearing down its buffers and namespaces takes the kernel tens of
  /// milliseconds, which the caller need not wait for). Returns pasta's failure, when it failed
  /// while the app ran (the jail was stopped for it).
  func finish() -> ContainerError? {
    let failure = outcome.withLock { outcome -> ContainerError? in
      outcome.over = true
      outcome.stopJail = nil
      return outcome.failure
    }
    gate.stop()
    if let process {
      _ = appbox_pidfd_send_signal(process.rawValue, SIGKILL)
    } else {
      kill(pid, SIGKILL)  // no pidfd: Linux before 5.3, which has no Landlock either
    }
    return failure
  }

  /// What pasta said, without its complaints about a missing system logger.
  private func failureReason(said: [UInt8], status: Int32) -> String {
    let lines = String(decoding: said, as: UTF8.self).split(separator: "\n").map {
      $0.trimmingCharacters(in: .whitespaces)
    }
    let words = lines.filter { !$0.isEmpty && !$0.hasPrefix("Failed to send") }.joined(separator: "; ")
    var reason = words.isEmpty ? "exit status \(status)" : words
    var st = stat()
    if words.contains("tun"), stat("/dev/net/tun", &st) == 0, st.st_mode & 0o006 != 0o006 {
      reason +=
        "; /dev/net/tun is mode \(String(st.st_mode & 0o777, radix: 8)): pasta needs it readable and "
        + "writable by every user, as udev makes it (chmod 0666 /dev/net/tun)"
    }
    return reason
  }
}
