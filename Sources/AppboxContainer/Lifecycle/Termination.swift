// `terminate APP [--signal S] [--grace SECONDS]`: ending every process of an app's jails.
//
// Each run has a jail of its own (bubblewrap, a pid namespace of its own). The run record
// (LaunchRecords.swift) names the jail's pid 1 in the host's namespace. For each run of the
// app:
// 1. write the run's termination marker (the end this causes is not a crash);
// 2. send the signal (default SIGTERM) to every process whose pid namespace is the jail's
//    (/proc/*/ns/pid), the app's first process and anything it started, daemons that left
//    its session included; the jail's pid 1 itself is left alone (it ignores what it has no
//    handler for, as any namespace's init);
// 3. wait up to the grace period (default 5 s) for the jail's pid 1 to end;
// 4. if it has not, SIGKILL it: when a pid namespace's init dies, the kernel kills every
//    process left in the namespace; wait (up to 10 s) until it is gone;
// 5. wait (up to 10 s) until the owner (the appbox process that holds the running lock and
//    serves the keychain) has ended, so that when this returns the app no longer runs:
//    reset, offload, uninstall, update and erase go through at once.
// Processes are signalled through pidfds opened after checking that the pid is the one
// recorded (ProcessIdentity), so a pid the kernel reused is never signalled.

import AppboxCore
import CSystem
import Foundation
import Glibc

/// What `terminate` did.
public struct TerminationReport: Sendable {
  public var app: AppRecord
  /// The runs that were ended.
  public var runs: [RunRecord]
  /// The processes the signal was sent to.
  public var signalled: Int
  /// Whether some jail outlived the grace period and was killed.
  public var killed: Bool
}

extension DeviceSession {
  /// Ends every run of `app` (see the header). An app that does not run is no error (no
  /// runs). A run the records do not show (a start in progress) is waited for briefly.
  public func terminate(_ app: AppRecord, signal: Int32 = SIGTERM, grace: Duration = .seconds(5)) throws
    -> TerminationReport
  {
    var runs = self.runs(of: app)
    if runs.isEmpty, try isRunning(app) {
      // A run between taking its lock and writing its record: give it a moment.
      let deadline = ContinuousClock.now + .seconds(3)
      while runs.isEmpty, ContinuousClock.now < deadline, try isRunning(app) {
        usleep(20_000)
        runs = self.runs(of: app)
      }
    }
    var report = TerminationReport(app: app, runs: runs, signalled: 0, killed: false)
    var jails: [(run: RunRecord, pidfd: FileDescriptor?, namespace: String?)] = []
    for run in runs {
      _ = try? makePrivateDirectory(root.runsDirectory)
      let marker = root.runsDirectory + "/" + run.terminationMarker
      let fd = Glibc.open(marker, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
      if fd >= 0 { close(fd) }
      guard let jail = run.jail, jail.isAlive, let namespace = ProcessIdentity.pidNamespace(of: jail.pid),
        namespace != ProcessIdentity.pidNamespace(of: getpid())
      else {
        jails.append((run, nil, nil))
        continue
      }
      let pidfd = appbox_pidfd_open(jail.pid)
      jails.append((run, pidfd >= 0 && jail.isAlive ? FileDescriptor(rawValue: pidfd) : nil, namespace))
    }
    defer { for jail in jails { jail.pidfd?.close() } }
    let namespaces = Set(jails.compactMap(\.namespace))
    let initPIDs = Set(jails.compactMap(\.run.jail?.pid))
    if signal == SIGKILL {
      for jail in jails { if let fd = jail.pidfd { _ = appbox_pidfd_send_signal(fd.rawValue, SIGKILL) } }
    } else {
      report.signalled = Self.signalProcesses(inNamespaces: namespaces, except: initPIDs, signal: signal)
    }
    let deadline = ContinuousClock.now + grace
    var remaining = jails.compactMap(\.pidfd)
    while !remaining.isEmpty, ContinuousClock.now < deadline {
      remaining = remaining.filter { !Self.hasExited($0, waiting: .milliseconds(20)) }
    }
    for fd in remaining {
      report.killed = true
      _ = appbox_pidfd_send_signal(fd.rawValue, SIGKILL)
    }
    let killDeadline = ContinuousClock.now + .seconds(10)
    while !remaining.isEmpty, ContinuousClock.now < killDeadline {
      remaining = remaining.filter { !Self.hasExited($0, waiting: .milliseconds(20)) }
    }
    // The owners release the running lock once the jail is gone.
    let ownerDeadline = ContinuousClock.now + .seconds(10)
    while ContinuousClock.now < ownerDeadline, runs.contains(where: { $0.owner.isAlive }) { usleep(10_000) }
    while ContinuousClock.now < ownerDeadline, try isRunning(app) { usleep(10_000) }
    return report
  }

  /// Sends `signal` to every process whose pid namespace is one of `namespaces`, except the
  /// pids in `excluded`; returns how many. Each pid is checked again through a pidfd.
  static func signalProcesses(
    inNamespaces namespaces: Set<String>, except excluded: Set<pid_t>, signal: Int32
  )
    -> Int
  {
    guard !namespaces.isEmpty else { return 0 }
    var count = 0
    let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
    for name in names {
      guard let pid = pid_t(name), !excluded.contains(pid),
        let namespace = ProcessIdentity.pidNamespace(of: pid), namespaces.contains(namespace)
      else { continue }
      let fd = appbox_pidfd_open(pid)
      guard fd >= 0 else { continue }
      defer { close(fd) }
      // The pidfd names the process that has this pid now: check that it is still the jail's.
      guard ProcessIdentity.pidNamespace(of: pid) == namespace else { continue }
      if appbox_pidfd_send_signal(fd, signal) == 0 { count += 1 }
    }
    return count
  }

  /// Whether the process of `pidfd` has exited, waiting up to `waiting`.
  static func hasExited(_ pidfd: FileDescriptor, waiting: Duration) -> Bool {
    var entry = pollfd(fd: pidfd.rawValue, events: Int16(POLLIN), revents: 0)
    return poll(&entry, 1, Int32(waiting.components.attoseconds / 1_000_000_000_000_000)) > 0
  }
}
