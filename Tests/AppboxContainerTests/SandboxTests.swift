import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

@testable import AppboxContainer

/// A device root in a temp directory with Notes installed, driven in-process.
final class TestDevice: @unchecked Sendable {
  let dir = TemporaryDirectory("container")
  let root: DeviceRoot
  let app: AppRecord

  init(_ fixture: String = "Notes-1.0/Notes.app") throws {
    root = DeviceRoot(path: dir.url("root"))
    let session = try DeviceSession.open(root: root, mutating: true)
    app = try session.install(bundleAt: fixturePath("bundles/" + fixture)).app
  }

  var home: Home { Home(root: root, app: app) }

  func session(mutating: Bool = false, environment: [String: String] = [:]) throws -> DeviceSession {
    try DeviceSession.open(root: root, mutating: mutating, environment: environment)
  }
}

struct SandboxTests {
  @Test func theProfileGrantsTheHomeTheSystemAndNothingElse() throws {
    let device = try TestDevice()
    let home = device.home
    let profile = SandboxProfile(home: home)
    #expect(profile.readWrite == [home.path + "/Documents", home.path + "/Library", home.path + "/tmp"])
    #expect(profile.readOnly == [home.path])
    #expect(profile.readExecute.first == home.path + "/Notes.app")
    #expect(profile.readExecute.contains("/usr") && profile.readExecute.contains("/opt"))
    #expect(profile.readExecute.contains("/proc/self") && !profile.readExecute.contains("/proc"))
    #expect(profile.devices.contains("/dev/null") && profile.devices.contains("/dev/urandom"))
    // Nothing of the device outside this home is granted, not even by a prefix.
    let everything = profile.readWrite + profile.readOnly + profile.readExecute + profile.devices
    for path in everything where path.hasPrefix(device.root.path) {
      #expect(path.hasPrefix(home.path), "\(path)")
    }
    #expect(!everything.contains("/tmp") && !everything.contains("/") && !everything.contains("/root"))
    let arguments = profile.helperArguments
    #expect(arguments.count == 2 * everything.count)
    #expect(Array(arguments.prefix(2)) == ["--rw", home.path + "/Documents"])
  }

  @Test func theEnvironmentKeepsOnlyTheListedVariables() throws {
    let device = try TestDevice()
    let environment = Sandbox.environment(
      for: device.home,
      inheriting: [
        "PATH": "/bin", "LANG": "C", "LC_ALL": "C", "HOME": "/root", "APPBOX_ROOT": "/x",
        "SSH_AUTH_SOCK": "/s", "TERM": "dumb",
      ])
    #expect(
      environment == [
        "PATH": "/bin", "LANG": "C", "LC_ALL": "C", "TERM": "dumb", "HOME": device.home.path,
        "CFFIXED_USER_HOME": device.home.path, "TMPDIR": device.home.path + "/tmp",
        "APPBOX_PROTECTED_DATA_AVAILABLE": "1",
      ])
    #expect(Sandbox.environment(for: device.home, inheriting: [:])["PATH"] == "/usr/local/bin:/usr/bin:/bin")
  }

  @Test func theHelperIsFoundBesideTheExecutableOrWhereTheEnvironmentSays() throws {
    let beside = try Sandbox.helperPath(environment: [:])
    #expect(beside.hasSuffix("/appbox-sandbox") && access(beside, X_OK) == 0)
    #expect(try Sandbox.helperPath(environment: ["APPBOX_SANDBOX_HELPER": "/bin/true"]) == "/bin/true")
    do {
      _ = try Sandbox.helperPath(environment: ["APPBOX_SANDBOX_HELPER": "/nonexistent/helper"])
      Issue.record("a missing helper was accepted")
    } catch let error as ContainerError {
      #expect(error.code == .unavailable && error.kind == .unavailable)
      #expect(error.message.contains("'/nonexistent/helper'"))
    }
    #expect(Sandbox.isLandlockAvailable(environment: [:]) == (Landlock.abiVersion > 0))
    #expect(!Sandbox.isLandlockAvailable(environment: ["APPBOX_ASSUME_NO_LANDLOCK": "1"]))
  }

  @Test func childProcessesReportExitAndSignalStatuses() throws {
    func status(_ script: String) throws -> Int32 {
      let pid = try ChildProcess.spawn(
        "/bin/sh", arguments: ["sh", "-c", script], environment: [:], inherited: [])
      return try ChildProcess.wait(for: pid)
    }
    #expect(try status("exit 0") == 0)
    #expect(try status("exit 7") == 7)
    #expect(try status("kill -KILL $$") == 128 + SIGKILL)
    #expect(try status("kill -SEGV $$") == 128 + SIGSEGV)
    // Signals are at their defaults in the child, whatever this process does with SIGPIPE.
    #expect(try status("kill -PIPE $$") == 128 + SIGPIPE)
    #expect(throws: SystemError.self) {
      _ = try ChildProcess.spawn("/nonexistent", arguments: ["x"], environment: [:], inherited: [])
    }
    #expect(ChildProcess.freeTarget(avoiding: [0, 1, 2, 3, 4, 6]) == 5)
  }
}

struct SandboxCarveTests {
  @Test func aRootInsideASystemLocationIsCarvedOut() throws {
    let dir = TemporaryDirectory("carve")
    try dir.makeDirectory("opt/swift/usr")
    try dir.makeDirectory("opt/appbox/devices/one")
    try dir.makeDirectory("opt/appbox/tools")
    try dir.write("opt/readme", "x")
    let carved = SandboxProfile.carve(dir.url("opt"), around: dir.url("opt/appbox/devices/one"))
    #expect(carved == [dir.url("opt/appbox/tools"), dir.url("opt/readme"), dir.url("opt/swift")])
    #expect(SandboxProfile.carve("/usr", around: dir.url("root")) == ["/usr"])
  }
}
