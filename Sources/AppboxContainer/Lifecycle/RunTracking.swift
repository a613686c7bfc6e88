// Every run and launch leaves a run record while it lasts, and a launch that dies by a
// signal a crash record (LaunchRecords.swift): how `ps` sees runs, `terminate` finds their
// jails, and `logs` and `inspect` report crashes.
//
// A crash is a launch whose exit status is 128 + N (bubblewrap's report of a death by
// signal N) unless the end was asked for: `terminate` marked the run first, or the owner
// passed on a signal it was sent itself (SIGTERM, SIGINT, SIGHUP, SIGQUIT to appbox). An app
// that exits with such a status on its own is indistinguishable from one killed by the
// signal, and is recorded as crashed (bubblewrap reports no more).

import AppboxCore
import Foundation
import Glibc

/// How a launch is watched: its id, its mode, its log, and who hears that it started.
public final class LaunchMonitor: @unchecked Sendable {
  public let launchID: String
  public let detached: Bool
  public let log: LaunchLog?
  /// Called once the jail is up, with the run's record (jail pid known, app pid not yet).
  public var started: ((RunRecord) -> Void)?

  public init(launchID: String = LaunchRecords.newLaunchID(), detached: Bool = false, log: LaunchLog? = nil) {
    self.launchID = launchID
    self.detached = detached
    self.log = log
  }
}

extension DeviceSession {
  /// Refuses (69) to launch an offloaded app (before a detached launch starts its supervisor).
  public func refuseOffloadedLaunch(_ app: AppRecord) throws { try refuseOffloaded(app, doing: "launch it") }

  /// Refuses (69) to start an offloaded app.
  func refuseOffloaded(_ app: AppRecord, doing what: String) throws {
    guard app.isOffloaded else { return }
    throw ContainerError(
      .unavailable,
      "Cannot \(what): \(app.bundleIdentifier) is offloaded (its data is kept, its bundle is not); install "
        + "its bundle again ('appbox install \(app.bundleDirectoryName)')")
  }

  /// Runs `confined` with a run record for as long as it lasts, and for a launch (`monitor`)
  /// a crash record if it dies by a signal nobody asked for.
  func runTracked(_ app: AppRecord, _ confined: ConfinedCommand, command: [String], monitor: LaunchMonitor?)
    throws -> Int32
  {
    guard let owner = ProcessIdentity(pid: getpid()) else {
      throw ContainerError(.unavailable, "Cannot read /proc/self/stat: /proc is needed to run apps")
    }
    var record = RunRecord(
      app: app, owner: owner, command: command, detached: monitor?.detached ?? false,
      launchID: monitor?.launchID)
    defer { removeRun(record) }
    ChildProcess.lastForwardedSignal.store(0, ordering: .sequentiallyConsistent)
    let status: Int32
    do {
      status = try confined.run { reaper in
        record.jail = ProcessIdentity(pid: reaper)
        // A detached launch reports the app's pid (as simctl does); a foreground one does not wait.
        if monitor?.detached == true, let jail = record.jail {
          record.appPID = self.firstProcess(ofJail: jail)
        }
        try? self.writeRun(record)
        monitor?.started?(record)
      }
    } catch {
      monitor?.log?.finish(timeout: .seconds(1))
      throw error
    }
    monitor?.log?.finish()
    let signal = status - 128
    if let monitor, record.jail != nil, (1...64).contains(signal), !isTerminationRequested(record),
      ChildProcess.lastForwardedSignal.load(ordering: .sequentiallyConsistent) != signal
    {
      try? writeCrash(
        CrashRecord(
          run: record, launchID: monitor.launchID, signal: signal, logTail: monitor.log?.tail() ?? []))
    }
    return status
  }

  /// The host pid of the first process of the jail whose pid 1 is `jail`, waiting up to
  /// `timeout` for it to appear (nil if the jail ends first).
  public func firstProcess(ofJail jail: ProcessIdentity, timeout: Duration = .seconds(2)) -> pid_t? {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline, jail.isAlive {
      if let child = ProcessIdentity.children(of: jail.pid).first { return child }
      usleep(2_000)
    }
    return ProcessIdentity.children(of: jail.pid).first
  }
}
