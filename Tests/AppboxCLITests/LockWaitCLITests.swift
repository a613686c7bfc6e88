import AppboxCore
import AppboxTestSupport
import Foundation
import Testing

@testable import AppboxCLI

/// `--wait` and `$APPBOX_LOCK_TIMEOUT` are parsed once, by the runner, into one LockWait:
/// a value that is no number of seconds is a usage error naming where it came from, and an
/// endless or huge one is capped (it used to trap converting to a Duration).
struct LockWaitCLITests {
  @Test(arguments: ["nan", "-1", "soon", ""])
  func aBadVariableIsAUsageErrorNamingIt(_ value: String) {
    let root = TemporaryDirectory("lock-wait")
    let result = runCLI(["--root", root.url("device"), "list"], environment: ["APPBOX_LOCK_TIMEOUT": value])
    #expect(result.status == 64, "\(value): \(result.err)")
    #expect(result.err.contains("APPBOX_LOCK_TIMEOUT"), "\(result.err)")
  }

  @Test(arguments: ["nan", "-1", "-inf"])
  func aBadWaitIsAUsageError(_ value: String) {
    let root = TemporaryDirectory("lock-wait")
    let result = runCLI(["--root", root.url("device"), "--wait", value, "list"])
    #expect(result.status == 64, "\(value): \(result.err)")
    #expect(result.err.contains("--wait"), "\(result.err)")
  }

  @Test(arguments: ["inf", "1e300"])
  func endlessWaitsDoNotTrap(_ value: String) {
    let root = TemporaryDirectory("lock-wait")
    #expect(runCLI(["--root", root.url("device"), "device", "init"]).status == 0)
    let flag = runCLI(["--root", root.url("device"), "--wait", value, "list"])
    #expect(flag.status == 0, "\(flag.err)")
    let variable = runCLI(
      ["--root", root.url("device"), "list"], environment: ["APPBOX_LOCK_TIMEOUT": value])
    #expect(variable.status == 0, "\(variable.err)")
  }

  @Test func theFlagWinsOverTheVariable() throws {
    var globals = GlobalOptions()
    globals.wait = LockWait(seconds: 2)
    let wait = try LockWait.of(globals, environment: ["APPBOX_LOCK_TIMEOUT": "nan"])
    #expect(wait.duration == .seconds(2))
    #expect(
      try LockWait.of(GlobalOptions(), environment: ["APPBOX_LOCK_TIMEOUT": "0.5"]).duration
        == .milliseconds(500))
    #expect(try LockWait.of(GlobalOptions(), environment: [:]) == LockWait.none)
  }

  /// An unreadable password or credentials file is not "no such snapshot" (66): here a
  /// directory, which cannot be read (EISDIR), is a malformed request (64), and the error
  /// names the file.
  @Test func anUnreadablePasswordFileIsNotNotFound() {
    let root = TemporaryDirectory("password-file")
    let device = root.url("device")
    #expect(runCLI(["--root", device, "device", "init"]).status == 0)
    let directory = root.url("not-a-file")
    try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    let result = runCLI([
      "--root", device, "repo", "init", "--repo", root.url("vault"), "--encrypt", "--password-file",
      directory,
    ])
    #expect(result.status != 66, "\(result.err)")
    #expect(result.status == 64, "\(result.err)")
    #expect(result.err.contains(directory), "\(result.err)")
    let credentials = runCLI([
      "--root", device, "snapshots", "--repo", "s3://bucket/prefix", "--endpoint", "http://127.0.0.1:9",
      "--credentials-file", directory,
    ])
    #expect(credentials.status != 66, "\(credentials.err)")
    #expect(credentials.err.contains(directory), "\(credentials.err)")
  }
}
