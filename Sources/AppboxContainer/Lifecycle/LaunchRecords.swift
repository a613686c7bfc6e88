// What appbox keeps about the runs of apps, outside the homes (an app never sees it):
//
//     .appbox/runs/<CONTAINER-ID>.<OWNER-PID>.plist   one per run of `run` or `launch` (either
//                                                     mode) while it lasts: the owner (the
//                                                     appbox process that holds the app's
//                                                     running lock and serves its keychain),
//                                                     the jail's pid 1, the app's first
//                                                     process, start time, command, mode
//     .appbox/runs/<CONTAINER-ID>.<OWNER-PID>.terminating   written by `terminate` before it
//                                                     signals: the end it causes is no crash
//     .appbox/logs/<CONTAINER-ID>/<LAUNCH-ID>.log     a detached launch's stdout and stderr
//                 (and .log.1, the part before)       (LaunchLog.swift), the last few launches
//     .appbox/crashes/<CONTAINER-ID>/<LAUNCH-ID>.plist  a launch that died by a signal
//
// A launch id sorts by time: `YYYYMMDDTHHMMSS.mmmZ-<OWNER-PID>`. Processes are known by pid
// and start time (field 22 of /proc/PID/stat), so a pid the kernel reused for another
// process is not taken for the run's: a record whose owner is gone is stale, ignored, and
// deleted by whoever finds it.

import AppboxCore
import AppboxPlist
import Foundation
import Glibc

/// A process, named so that a reused pid does not pass for it.
public struct ProcessIdentity: Sendable, Equatable {
  public var pid: pid_t
  /// Clock ticks after boot when it started (/proc/PID/stat, field 22).
  public var startTime: UInt64

  /// The process `pid` as it is now, or nil when there is none.
  public init?(pid: pid_t) {
    guard pid > 0, let start = ProcessIdentity.startTime(of: pid) else { return nil }
    self.pid = pid
    startTime = start
  }

  public init(pid: pid_t, startTime: UInt64) {
    self.pid = pid
    self.startTime = startTime
  }

  /// Whether this very process is still alive (not a zombie, not a reused pid).
  public var isAlive: Bool {
    ProcessIdentity.startTime(of: pid) == startTime && !ProcessIdentity.isZombie(pid)
  }

  static func stat(of pid: pid_t) -> [Substring]? {
    guard let text = readSmallFile("/proc/\(pid)/stat"), let close = text.lastIndex(of: ")") else {
      return nil
    }
    // Fields after the command name (which may hold spaces and parentheses): 3 (state) on.
    return text[text.index(after: close)...].split(separator: " ")
  }

  static func startTime(of pid: pid_t) -> UInt64? {
    guard let fields = stat(of: pid), fields.count > 19 else { return nil }
    return UInt64(fields[19])
  }

  static func isZombie(_ pid: pid_t) -> Bool { stat(of: pid)?.first == "Z" }

  /// The pid namespace of `pid` ("pid:[4026532…]"), or nil.
  static func pidNamespace(of pid: pid_t) -> String? { readLinkTarget("/proc/\(pid)/ns/pid") }

  /// The children of `pid` (/proc/PID/task/PID/children).
  static func children(of pid: pid_t) -> [pid_t] {
    (readSmallFile("/proc/\(pid)/task/\(pid)/children") ?? "").split(separator: " ").compactMap {
      pid_t($0.trimmingCharacters(in: .whitespacesAndNewlines))
    }
  }
}

/// One run of an app, as `ps` shows it and `terminate` finds it.
public struct RunRecord: Sendable, Equatable {
  public var bundleIdentifier: String
  public var containerID: String
  /// The appbox process that owns the run (a detached launch's supervisor).
  public var owner: ProcessIdentity
  /// The jail's pid 1, in the host's pid namespace.
  public var jail: ProcessIdentity?
  /// The app's first process, in the host's pid namespace.
  public var appPID: pid_t?
  public var started: Date
  public var command: [String]
  public var detached: Bool
  /// `launch` (a launch id) or `run` (nil).
  public var launchID: String?

  /// The record's file name in `.appbox/runs`.
  var fileName: String { "\(containerID).\(owner.pid).plist" }
  var terminationMarker: String { "\(containerID).\(owner.pid).terminating" }

  var propertyList: PropertyList {
    var record: [String: PropertyList] = [
      "BundleIdentifier": .string(bundleIdentifier), "ContainerID": .string(containerID),
      "OwnerPID": .integer(Int64(owner.pid)), "OwnerStart": .integer(Int64(owner.startTime)),
      "Started": .date(started), "Command": .array(command.map(PropertyList.string)),
      "Detached": .bool(detached),
    ]
    if let jail {
      record["JailPID"] = .integer(Int64(jail.pid))
      record["JailStart"] = .integer(Int64(jail.startTime))
    }
    if let appPID { record["AppPID"] = .integer(Int64(appPID)) }
    if let launchID { record["LaunchID"] = .string(launchID) }
    return .dictionary(record)
  }

  init?(propertyList plist: PropertyList) {
    guard let bundle = plist["BundleIdentifier"]?.string, let container = plist["ContainerID"]?.string,
      let pid = plist["OwnerPID"]?.integer, let start = plist["OwnerStart"]?.integer,
      let started = plist["Started"]?.date
    else { return nil }
    bundleIdentifier = bundle
    containerID = container
    owner = ProcessIdentity(pid: pid_t(truncatingIfNeeded: pid), startTime: UInt64(truncatingIfNeeded: start))
    if let jailPID = plist["JailPID"]?.integer, let jailStart = plist["JailStart"]?.integer {
      jail = ProcessIdentity(
        pid: pid_t(truncatingIfNeeded: jailPID), startTime: UInt64(truncatingIfNeeded: jailStart))
    }
    appPID = plist["AppPID"]?.integer.map { pid_t(truncatingIfNeeded: $0) }
    self.started = started
    command = plist["Command"]?.array?.compactMap(\.string) ?? []
    detached = plist["Detached"]?.bool ?? false
    launchID = plist["LaunchID"]?.string
  }

  init(app: AppRecord, owner: ProcessIdentity, command: [String], detached: Bool, launchID: String?) {
    bundleIdentifier = app.bundleIdentifier
    containerID = app.containerID
    self.owner = owner
    started = Date()
    self.command = command
    self.detached = detached
    self.launchID = launchID
  }
}

/// A launch that died by a signal.
public struct CrashRecord: Sendable, Equatable {
  public var bundleIdentifier: String
  public var containerID: String
  public var launchID: String
  public var signal: Int32
  /// The exit status as the shell reports it (128 + the signal).
  public var exitStatus: Int32
  public var time: Date
  public var detached: Bool
  public var command: [String]
  /// The end of the launch's log (detached launches), at most `LaunchRecords.tailBytes`.
  public var logTail: [UInt8]

  public var signalName: String { SignalName.name(of: signal) }

  var propertyList: PropertyList {
    .dictionary([
      "BundleIdentifier": .string(bundleIdentifier), "ContainerID": .string(containerID),
      "LaunchID": .string(launchID), "Signal": .integer(Int64(signal)),
      "ExitStatus": .integer(Int64(exitStatus)),
      "Time": .date(time), "Detached": .bool(detached), "Command": .array(command.map(PropertyList.string)),
      "LogTail": .data(Data(logTail)),
    ])
  }

  init?(propertyList plist: PropertyList) {
    guard let bundle = plist["BundleIdentifier"]?.string, let container = plist["ContainerID"]?.string,
      let launch = plist["LaunchID"]?.string, let signal = plist["Signal"]?.integer,
      let status = plist["ExitStatus"]?.integer, let time = plist["Time"]?.date
    else { return nil }
    bundleIdentifier = bundle
    containerID = container
    launchID = launch
    self.signal = Int32(truncatingIfNeeded: signal)
    exitStatus = Int32(truncatingIfNeeded: status)
    self.time = time
    detached = plist["Detached"]?.bool ?? false
    command = plist["Command"]?.array?.compactMap(\.string) ?? []
    logTail = plist["LogTail"]?.data.map(Array.init) ?? []
  }

  init(run: RunRecord, launchID: String, signal: Int32, logTail: [UInt8]) {
    bundleIdentifier = run.bundleIdentifier
    containerID = run.containerID
    self.launchID = launchID
    self.signal = signal
    exitStatus = 128 + signal
    time = Date()
    detached = run.detached
    command = run.command
    self.logTail = logTail
  }
}

/// The places and rules of run records, logs and crash records (see the header).
public enum LaunchRecords {
  /// The directories of `.appbox` they live in (an erase sets them aside).
  static let stateDirectories = ["runs", "logs", "crashes"]
  /// Launch logs kept per app, and crash records.
  public static let keptLogs = 5
  public static let keptCrashes = 10
  /// How much of the log a crash record keeps.
  public static let tailBytes = 4096

  /// A new launch id for a launch owned by this process.
  public static func newLaunchID() -> String {
    let formatter = DateFormatter()
    formatter.locale = Locale(identifier: "en_US_POSIX")
    formatter.timeZone = TimeZone(identifier: "UTC")
    formatter.dateFormat = "yyyyMMdd'T'HHmmss.SSS'Z'"
    return formatter.string(from: Date()) + "-\(getpid())"
  }

  static func isLaunchID(_ text: String) -> Bool {
    !text.isEmpty && text.count < 64 && text.allSatisfy { $0.isASCII && ($0.isNumber || "TZ.-".contains($0)) }
  }
}

extension DeviceRoot {
  var runsDirectory: String { stateDirectory + "/runs" }
  /// Where the launch logs of container `id` are.
  public func logDirectory(_ containerID: String) -> String { stateDirectory + "/logs/" + containerID }
  func crashDirectory(_ containerID: String) -> String { stateDirectory + "/crashes/" + containerID }
}

/// Names of signals, as `kill -l` spells them.
public enum SignalName {
  static let names: [Int32: String] = [
    SIGHUP: "HUP", SIGINT: "INT", SIGQUIT: "QUIT", SIGILL: "ILL", SIGTRAP: "TRAP", SIGABRT: "ABRT",
    SIGBUS: "BUS", SIGFPE: "FPE", SIGKILL: "KILL", SIGUSR1: "USR1", SIGSEGV: "SEGV", SIGUSR2: "USR2",
    SIGPIPE: "PIPE", SIGALRM: "ALRM", SIGTERM: "TERM", SIGCHLD: "CHLD", SIGCONT: "CONT", SIGSTOP: "STOP",
    SIGTSTP: "TSTP", SIGTTIN: "TTIN", SIGTTOU: "TTOU", SIGURG: "URG", SIGXCPU: "XCPU", SIGXFSZ: "XFSZ",
    SIGVTALRM: "VTALRM", SIGPROF: "PROF", SIGWINCH: "WINCH", SIGIO: "IO", SIGPWR: "PWR", SIGSYS: "SYS",
  ]

  /// "SIGSEGV", or "signal 40" for one without a name.
  public static func name(of signal: Int32) -> String {
    names[signal].map { "SIG" + $0 } ?? "signal \(signal)"
  }

  /// The signal `text` names: "TERM", "SIGTERM", "term" or "15"; nil for anything else.
  public static func parse(_ text: String) -> Int32? {
    if let number = Int32(text), (1...64).contains(number) { return number }
    var name = text.uppercased()
    if name.hasPrefix("SIG") { name.removeFirst(3) }
    return names.first { $0.value == name }?.key
  }
}

extension DeviceSession {
  /// Writes `record` (durable enough: a lost record is a run `ps` does not show).
  func writeRun(_ record: RunRecord) throws {
    try makePrivateDirectory(root.runsDirectory)
    let directory = try OwnedFileDescriptor.open(root.runsDirectory, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    try AtomicFile.write(
      record.propertyList.binaryData(), to: record.fileName, in: directory.borrowed, mode: 0o600,
      durable: false)
  }

  func removeRun(_ record: RunRecord) {
    _ = unlink(root.runsDirectory + "/" + record.fileName)
    _ = unlink(root.runsDirectory + "/" + record.terminationMarker)
  }

  /// Whether `terminate` asked for the end of `record`'s run.
  func isTerminationRequested(_ record: RunRecord) -> Bool {
    access(root.runsDirectory + "/" + record.terminationMarker, F_OK) == 0
  }

  /// The runs going on now, of every app or of `app`, oldest first; stale records (their
  /// owner is gone) are deleted.
  public func runs(of app: AppRecord? = nil) -> [RunRecord] {
    let names = (try? FileManager.default.contentsOfDirectory(atPath: root.runsDirectory)) ?? []
    var runs: [RunRecord] = []
    for name in names where name.hasSuffix(".plist") {
      if let app, !name.hasPrefix(app.containerID + ".") { continue }
      let path = root.runsDirectory + "/" + name
      guard let bytes = FileManager.default.contents(atPath: path), bytes.count < 1 << 20,
        let plist = try? PropertyList.decode(bytes), let record = RunRecord(propertyList: plist)
      else { continue }
      guard record.owner.isAlive else {
        removeRun(record)
        continue
      }
      runs.append(record)
    }
    return runs.sorted { ($0.started, $0.owner.pid) < ($1.started, $1.owner.pid) }
  }

  /// Makes a 0700 directory in `.appbox` (and its parent, for logs/ID and crashes/ID).
  func makePrivateDirectory(_ path: String) throws {
    for directory in [splitPath(path).directory, path] where mkdir(directory, 0o700) != 0 {
      guard Errno.current == .exists else { throw SystemError("create directory", path: directory) }
    }
  }

  // MARK: Crash records

  /// Writes `crash`, keeping the newest `keptCrashes` of the app.
  func writeCrash(_ crash: CrashRecord) throws {
    let path = root.crashDirectory(crash.containerID)
    try makePrivateDirectory(path)
    let directory = try OwnedFileDescriptor.open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    try AtomicFile.write(
      crash.propertyList.binaryData(), to: crash.launchID + ".plist", in: directory.borrowed,
      mode: 0o600)
    let names = ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).filter {
      $0.hasSuffix(".plist")
    }.sorted()
    for name in names.dropLast(LaunchRecords.keptCrashes) { _ = unlink(path + "/" + name) }
  }

  /// The app's crash records, newest first.
  public func crashes(of app: AppRecord) -> [CrashRecord] {
    let path = root.crashDirectory(app.containerID)
    let names = ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).filter {
      $0.hasSuffix(".plist")
    }.sorted().reversed()
    return names.compactMap { name in
      guard let bytes = FileManager.default.contents(atPath: path + "/" + name), bytes.count < 1 << 20,
        let plist = try? PropertyList.decode(bytes)
      else { return nil }
      return CrashRecord(propertyList: plist)
    }
  }

  /// Deletes the app's launch logs and crash records (its uninstall).
  func removeLaunchRecords(of app: AppRecord) {
    for path in [root.logDirectory(app.containerID), root.crashDirectory(app.containerID)] {
      try? FileTree.remove(atPath: path)
    }
  }
}
