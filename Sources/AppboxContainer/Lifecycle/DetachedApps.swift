// `launch APP --detach`: a confined app in the background, with a supervisor that lives as
// long as it does.
//
// A running app needs an appbox process: it holds the app's running lock (so uninstall and
// its kin wait), serves the app's keychain broker, owns the jail (bubblewrap dies with it),
// and pumps the app's output into its bounded log (LaunchLog.swift). For a detached launch
// that process is a supervisor: the appbox executable started again (/proc/self/exe) with
// the reserved first argument `DetachedLaunch.supervisorArgument`, in a session of its own.
//
// Protocol: the launching appbox writes the request (a binary property list) to the
// supervisor's stdin and closes it; the supervisor replies once on its descriptor 3, either
// "started" (the run record, with the app's pid, and the log's path) as soon as the jail is
// up, or "failed" (an exit status and one line) when the launch could not start (a broken
// seal, no bubblewrap, an offloaded app...). The launching appbox prints the reply and exits;
// the supervisor runs the launch as `launch` does in the foreground and exits with the app.
// A supervisor that ends without replying is an I/O error (74) for the launcher.
// stdin, stdout and stderr of the supervisor are /dev/null and the app's stdin is too; the
// app's stdout and stderr go to the log (or to the files simctl's --stdout/--stderr name).

import AppboxCore
import AppboxPlist
import CSystem
import Foundation
import Glibc

/// What a detached launch is asked to do.
public struct DetachedLaunchRequest: Sendable, Equatable {
  public var root: String
  /// The app's container id (a reinstall or update meanwhile makes it another app).
  public var containerID: String
  public var arguments: [String]
  public var network: JailNetwork
  public var allowUnconfined: Bool
  public var prewarm: Bool
  /// Variables the app gets (an opened URL, SIMCTL_CHILD_*).
  public var environment: [String: String]
  /// Files for the app's stdout and stderr instead of the log (simctl's --stdout/--stderr).
  public var standardOutputPath: String?
  public var standardErrorPath: String?

  public init(
    root: String, containerID: String, arguments: [String] = [], network: JailNetwork = .own,
    allowUnconfined: Bool = false, prewarm: Bool = false, environment: [String: String] = [:],
    standardOutputPath: String? = nil, standardErrorPath: String? = nil
  ) {
    self.root = root
    self.containerID = containerID
    self.arguments = arguments
    self.network = network
    self.allowUnconfined = allowUnconfined
    self.prewarm = prewarm
    self.environment = environment
    self.standardOutputPath = standardOutputPath
    self.standardErrorPath = standardErrorPath
  }

  var propertyList: PropertyList {
    var record: [String: PropertyList] = [
      "Root": .string(root), "ContainerID": .string(containerID),
      "Arguments": .array(arguments.map(PropertyList.string)), "Network": .string(network.rawValue),
      "AllowUnconfined": .bool(allowUnconfined), "Prewarm": .bool(prewarm),
      "Environment": .dictionary(environment.mapValues(PropertyList.string)),
    ]
    if let standardOutputPath { record["StandardOutput"] = .string(standardOutputPath) }
    if let standardErrorPath { record["StandardError"] = .string(standardErrorPath) }
    return .dictionary(record)
  }

  init?(propertyList plist: PropertyList) {
    guard let root = plist["Root"]?.string, let containerID = plist["ContainerID"]?.string,
      let network = plist["Network"]?.string.flatMap(JailNetwork.init(rawValue:))
    else { return nil }
    self.init(
      root: root, containerID: containerID, arguments: plist["Arguments"]?.array?.compactMap(\.string) ?? [],
      network: network, allowUnconfined: plist["AllowUnconfined"]?.bool ?? false,
      prewarm: plist["Prewarm"]?.bool ?? false,
      environment: (plist["Environment"]?.dictionary.map { dictionary in
        Dictionary(
          dictionary.compactMap { key, value in value.string.map { (key, $0) } },
          uniquingKeysWith: { a, _ in a })
      }) ?? [:],
      standardOutputPath: plist["StandardOutput"]?.string, standardErrorPath: plist["StandardError"]?.string)
  }
}

/// A detached launch that started.
public struct DetachedLaunchStart: Sendable {
  public var run: RunRecord
  /// The log's path (nil when the output goes to files).
  public var log: String?
}

/// A failure the supervisor reported, with its exit status.
public struct DetachedLaunchFailure: AppboxFailure {
  public var kind: FailureKind
  public var message: String
  public var description: String { message }
}

/// Starting a supervisor, and the supervisor's side of the protocol (see the header).
public enum DetachedLaunch {
  /// The first argument that makes the appbox executable a supervisor.
  public static let supervisorArgument = "--appbox-detached-supervisor"
  /// The supervisor's reply descriptor.
  static let replyDescriptor: Int32 = 3

  /// Starts a supervisor for `request` (this executable again) and waits until it reports.
  public static func start(_ request: DetachedLaunchRequest, environment: [String: String]) throws
    -> DetachedLaunchStart
  {
    guard let executable = readLinkTarget("/proc/self/exe") else {
      throw ContainerError(.unavailable, "Cannot find appbox's own executable (/proc/self/exe) to detach")
    }
    let requestPipe = try FileDescriptor.pipe()
    var requestWrite: FileDescriptor? = requestPipe.write
    defer { requestWrite?.close() }
    let reply = try FileDescriptor.pipe()
    defer { reply.read.close() }
    let null = try FileDescriptor.open("/dev/null", O_RDWR)
    defer { null.close() }
    do {
      _ = try ChildProcess.spawn(
        executable, arguments: [executable, supervisorArgument], environment: environment,
        inherited: [
          .init(source: requestPipe.read, target: 0), .init(source: null, target: 1),
          .init(source: null, target: 2),
          .init(source: reply.write, target: replyDescriptor),
        ])
    } catch {
      requestPipe.read.close()
      reply.write.close()
      throw error
    }
    requestPipe.read.close()
    reply.write.close()
    signal(SIGPIPE, SIG_IGN)
    try? requestPipe.write.writeAll(Array(request.propertyList.binaryData()))
    requestPipe.write.close()  // the supervisor reads the request to its end
    requestWrite = nil
    let bytes = try reply.read.readAll(limit: 1 << 20)
    guard let plist = try? PropertyList.decode(Data(bytes)) else {
      throw DetachedLaunchFailure(
        kind: .io,
        message: "The detached launch's supervisor ended before it reported; see 'appbox logs' for its output"
      )
    }
    if let run = plist["Run"].flatMap(RunRecord.init(propertyList:)) {
      return DetachedLaunchStart(run: run, log: plist["Log"]?.string)
    }
    let status = plist["Status"]?.integer ?? 74
    throw DetachedLaunchFailure(
      kind: Self.kind(ofStatus: Int32(truncatingIfNeeded: status)),
      message: plist["Message"]?.string ?? "the detached launch failed")
  }

  static func kind(ofStatus status: Int32) -> FailureKind {
    switch status {
    case 64: return .invalidArgument
    case 65: return .badData
    case 66: return .notFound
    case 69: return .unavailable
    case 73: return .cannotCreate
    case 75: return .busy
    case 77: return .denied
    default: return .io
    }
  }

  // MARK: The supervisor's side

  /// Becomes a supervisor: a session of its own, the reply descriptor kept from the jail,
  /// and the request read from stdin (which becomes /dev/null).
  public static func becomeSupervisor() throws -> DetachedLaunchRequest {
    _ = appbox_detach_session(0)
    _ = fcntl(replyDescriptor, F_SETFD, FD_CLOEXEC)
    let stdin = FileDescriptor(rawValue: 0)
    let bytes = try stdin.readAll(limit: 1 << 20)
    let null = Glibc.open("/dev/null", O_RDONLY)
    if null >= 0 {
      dup2(null, 0)
      Glibc.close(null)
    }
    guard let plist = try? PropertyList.decode(Data(bytes)),
      let request = DetachedLaunchRequest(propertyList: plist)
    else {
      throw ContainerError(.invalidRequest, "A detached launch's supervisor got no valid request")
    }
    return request
  }

  /// Reports that the launch started (once).
  public static func replyStarted(_ run: RunRecord, log: String?) {
    var record: [String: PropertyList] = ["Run": run.propertyList]
    if let log { record["Log"] = .string(log) }
    send(.dictionary(record))
  }

  /// Reports that the launch could not start.
  public static func replyFailed(status: Int32, message: String) {
    send(.dictionary(["Status": .integer(Int64(status)), "Message": .string(message)]))
  }

  private static func send(_ plist: PropertyList) {
    let descriptor = FileDescriptor(rawValue: replyDescriptor)
    try? descriptor.writeAll(Array(plist.binaryData()))
    descriptor.close()
  }
}

extension DeviceSession {
  /// The supervisor's work: the launch `request` describes, in the background (see the
  /// header). `replied` is called once with the start, before the app runs on; the launch's
  /// status is returned when it ends.
  public func superviseDetachedLaunch(
    _ request: DetachedLaunchRequest, started: @escaping (DetachedLaunchStart) -> Void
  ) throws -> Int32 {
    let app = try self.app(request.containerID)
    var options = SandboxOptions(
      allowUnconfined: request.allowUnconfined, network: request.network, prewarm: request.prewarm)
    options.environment = request.environment
    let null = try FileDescriptor.open("/dev/null", O_RDWR)
    defer { null.close() }
    options.standardInput = null
    var files: [FileDescriptor] = []
    defer { for file in files { file.close() } }
    let monitor: LaunchMonitor
    if request.standardOutputPath != nil || request.standardErrorPath != nil {
      func open(_ path: String?) throws -> FileDescriptor {
        guard let path else { return null }
        let fd = try FileDescriptor.open(path, O_WRONLY | O_CREAT | O_TRUNC, mode: 0o644)
        files.append(fd)
        return fd
      }
      options.standardOutput = try open(request.standardOutputPath)
      options.standardError = try open(request.standardErrorPath)
      monitor = LaunchMonitor(detached: true)
    } else {
      let launchID = LaunchRecords.newLaunchID()
      let limit = environment["APPBOX_LOG_LIMIT"].flatMap(Int.init) ?? LaunchLog.defaultLimit
      let log = try LaunchLog(directory: root.logDirectory(app.containerID), launchID: launchID, limit: limit)
      options.standardOutput = log.appDescriptor
      options.standardError = log.appDescriptor
      monitor = LaunchMonitor(launchID: launchID, detached: true, log: log)
    }
    monitor.started = { run in started(DetachedLaunchStart(run: run, log: monitor.log?.path)) }
    return try launch(app, arguments: request.arguments, options: options, monitor: monitor)
  }
}
