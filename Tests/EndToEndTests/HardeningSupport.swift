import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// Whether the tests can run appbox as an unprivileged owner (`nobody`): root, with setpriv.
let canRunAsNobody = getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")

extension Device {
  /// Hands the whole device (and its temp directory) to `nobody`, as if it had created it.
  func giveToNobody() throws {
    #expect(try runProcess("/bin/chown", ["-R", "65534:65534", dir.path]).status == 0)
  }

  /// Runs `appbox --root ROOT ARGS` as `nobody` (root reads everything, so only an
  /// unprivileged owner meets the permission errors an app can set up).
  @discardableResult
  func runAsNobody(_ arguments: String...) throws -> ProcessResult {
    try runProcess(
      "/usr/bin/setpriv",
      ["--reuid=65534", "--regid=65534", "--clear-groups", productsDirectory + "/appbox", "--root", root]
        + arguments)
  }

  /// Runs a /bin/sh script confined to `app` as `nobody`.
  @discardableResult
  func shAsNobody(_ app: String, _ script: String) throws -> ProcessResult {
    try runProcess(
      "/usr/bin/setpriv",
      [
        "--reuid=65534", "--regid=65534", "--clear-groups", productsDirectory + "/appbox", "--root", root,
        "run", app, "--", "/bin/sh", "-c", script,
      ])
  }

  /// Starts `appbox ARGS` so that it stops itself (SIGSTOP) at crash point `point`.
  func startPausing(at point: String, asNobody: Bool = false, _ arguments: String...) throws -> PausingProcess
  {
    try PausingProcess(
      executable: asNobody ? "/usr/bin/setpriv" : productsDirectory + "/appbox",
      arguments: (asNobody
        ? ["--reuid=65534", "--regid=65534", "--clear-groups", productsDirectory + "/appbox"] : [])
        + ["--root", root] + arguments,
      point: point, directory: dir)
  }
}

/// An appbox process started with APPBOX_PAUSE_AT: the test waits until it stops at the
/// point, changes the disk the way a racing app would, then lets it continue.
final class PausingProcess {
  let child: SpawnedProcess
  private let outPath: String
  private let errPath: String
  private var exitStatus: Int32?

  init(
    executable: String, arguments: [String], point: String, directory: TemporaryDirectory,
    environment extra: [String: String] = [:]
  ) throws {
    let tag = UUID().uuidString
    outPath = directory.url("pause-\(tag).out")
    errPath = directory.url("pause-\(tag).err")
    let out = open(outPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
    let err = open(errPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
    let null = open("/dev/null", O_RDONLY | O_CLOEXEC)
    defer {
      close(out)
      close(err)
      close(null)
    }
    var environment = ProcessInfo.processInfo.environment.merging(extra) { $1 }
    environment.removeValue(forKey: "APPBOX_ROOT")
    environment["APPBOX_PAUSE_AT"] = point
    child = try spawnProcess(
      executable, arguments, environment: environment, stdin: null, stdout: out, stderr: err)
  }

  /// Waits until the process stops at its point (true) or exits without reaching it (false).
  func waitUntilPaused() -> Bool {
    var status: Int32 = 0
    while waitpid(child.pid, &status, WUNTRACED) < 0 && errno == EINTR {}
    if status & 0xFF == 0x7F { return true }  // WIFSTOPPED
    exitStatus = AppboxTestSupport.exitStatus(ofWaitStatus: status)
    return false
  }

  func resume() { kill(child.pid, SIGCONT) }

  /// Lets the process run on, stopping at the point again each time it comes back there,
  /// until it exits; returns its status and output.
  func finish() -> ProcessResult {
    while exitStatus == nil {
      resume()
      _ = waitUntilPaused()
    }
    return ProcessResult(
      status: exitStatus!, stdout: FileManager.default.contents(atPath: outPath).map(Array.init) ?? [],
      stderr: FileManager.default.contents(atPath: errPath).map(Array.init) ?? [])
  }
}

/// The permission bits of `path` (not following a symlink).
func permissions(_ path: String) -> mode_t? {
  var st = stat()
  return lstat(path, &st) == 0 ? st.st_mode & 0o7777 : nil
}
