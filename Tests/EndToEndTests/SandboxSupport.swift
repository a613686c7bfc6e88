import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

extension Device {
  /// The home of container `id`.
  func home(_ id: String) -> String { root + "/ApplicationRoot/" + id }

  /// Runs a /bin/sh script confined to `app`'s sandbox.
  @discardableResult
  func sh(_ app: String, _ script: String, environment: [String: String] = [:]) throws -> ProcessResult {
    try appbox(["run", app, "--", "/bin/sh", "-c", script], root: root, environment: environment)
  }

  /// Starts `appbox ARGS` without waiting, with `blocking` signals blocked; its output is
  /// discarded.
  func start(_ arguments: String..., blocking: [Int32] = []) throws -> StartedProcess {
    try startAppbox(arguments, root: root, blocking: blocking)
  }
}

/// An app kept running under `appbox run`: the appbox process, which holds the running
/// lock and whose death takes the whole jail with it.
struct RunningApp {
  let appbox: StartedProcess

  /// Kills appbox, and with it (bubblewrap's --die-with-parent) the app; waits for appbox.
  func stop() {
    kill(appbox.processIdentifier, SIGKILL)
    appbox.waitUntilExit()
  }
}

extension Device {
  /// Starts `app` confined, sleeping until stopped; returns once the app has written a
  /// mark into its Documents (appbox holds the running lock by then).
  func startSleepingApp(_ app: String, home: String) throws -> RunningApp {
    let process = try start(
      "run", app, "--", "/bin/sh", "-c", "touch Documents/started && exec sleep 30")
    guard eventually({ FileManager.default.fileExists(atPath: home + "/Documents/started") }) else {
      process.terminate()
      throw SystemError("start app", path: app, errno: .noEntry)
    }
    return RunningApp(appbox: process)
  }
}

/// The bytes of the file at `path`, or nil when there is none.
func contents(_ path: String) -> [UInt8]? {
  FileManager.default.contents(atPath: path).map(Array.init)
}

/// Whether anything (even a dangling symlink) exists at `path`.
func exists(_ path: String) -> Bool {
  var st = stat()
  return lstat(path, &st) == 0
}

/// Waits until `condition` holds, polling every 10 ms; false after `seconds`.
func eventually(within seconds: Double = 10, _ condition: () throws -> Bool) rethrows -> Bool {
  let deadline = Date().addingTimeInterval(seconds)
  while Date() < deadline {
    if try condition() { return true }
    usleep(10_000)
  }
  return try condition()
}

/// Every path below `root` with its type, size, permissions, modification time, symlink
/// target and exclude-from-backup mark: two equal snapshots mean nothing was touched.
func treeSnapshot(_ root: String) -> [String: String] {
  var result: [String: String] = [:]
  var stack = [""]
  while let relative = stack.popLast() {
    let path = relative.isEmpty ? root : root + "/" + relative
    var st = stat()
    guard lstat(path, &st) == 0 else { continue }
    let status = FileStatus(st)
    var line =
      "\(status.type) \(status.permissions) \(status.size) \(status.modificationTime.totalNanoseconds)"
    if status.type == .symlink {
      line += " -> " + ((try? FileManager.default.destinationOfSymbolicLink(atPath: path)) ?? "?")
    } else if let fd = try? FileDescriptor.open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK) {
      if (try? fd.extendedAttribute(excludeFromBackupAttributeName)) != nil { line += " excluded" }
      fd.close()
    }
    result[relative.isEmpty ? "." : relative] = line
    if status.type == .directory {
      for name in (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? [] {
        stack.append(relative.isEmpty ? name : relative + "/" + name)
      }
    }
  }
  return result
}

/// The attribute `exclude` sets (AppboxContainer's `excludeFromBackupAttribute`; the
/// end-to-end tests link only AppboxCore, so it is spelled out).
let excludeFromBackupAttributeName = "user.appbox.exclude-from-backup"

/// Whether the file at `path` carries the exclude-from-backup mark (not following a symlink).
func isExcluded(_ path: String) -> Bool {
  guard let fd = try? FileDescriptor.open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK) else { return false }
  defer { fd.close() }
  return (try? fd.extendedAttribute(excludeFromBackupAttributeName)) != nil
}
