import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

@testable import AppboxContainer

/// A pipe whose read end collects what a child writes to the other.
private struct Capture {
  let read: FileDescriptor
  let write: FileDescriptor

  init() throws {
    // Close-on-exec from the start, as everything appbox opens: the child gets them only as
    // its stdio.
    (read, write) = try FileDescriptor.pipe()
  }

  /// Closes the write end and reads everything written.
  func text() throws -> String {
    write.close()
    return try read.closeAfter { String(decoding: try $0.readAll(), as: UTF8.self) }
  }
}

struct RunningAppsTests {
  @Test func runConfinesTheCommandAndHandsItTheGivenDescriptors() throws {
    let device = try TestDevice()
    let out = try Capture()
    let err = try Capture()
    let status = try device.session().run(
      device.app,
      command: ["/bin/sh", "-c", "echo \"$HOME\"; pwd; echo x > /etc/appbox-test-escape; ls /proc/$$/fd"],
      options: SandboxOptions(standardOutput: out.write, standardError: err.write))
    #expect(status == 0)
    let lines = try out.text().split(separator: "\n").map(String.init)
    let inside = Jail(home: device.home).home
    #expect(lines.prefix(2) == [inside, inside])
    // The shell holds stdin, stdout, stderr and the keychain broker's door (3): nothing else
    // leaked in, not even the running lock.
    #expect(Array(lines.dropFirst(2)) == ["0", "1", "2", "3"])
    #expect(try err.text().contains("/etc/appbox-test-escape: Read-only file system"))
    #expect(access("/etc/appbox-test-escape", F_OK) != 0)
  }

  /// The extension point for a broker (issue 14): a descriptor passed on purpose reaches the
  /// app at the number asked for, and nothing else does.
  @Test func aPassedDescriptorReachesTheAppAtItsNumber() throws {
    let device = try TestDevice()
    let out = try Capture()
    let channel = try Capture()
    let status = try device.session().run(
      device.app, command: ["/bin/sh", "-c", "echo through-the-channel >&5; ls /proc/$$/fd"],
      options: SandboxOptions(standardOutput: out.write, passedDescriptors: [(channel.write, 5)]))
    #expect(status == 0)
    #expect(try channel.text() == "through-the-channel\n")
    #expect(try out.text() == "0\n1\n2\n3\n5\n")  // 3: the keychain broker's door
  }

  @Test func aRunningAppCannotBeUninstalledAndBlocksNothingElse() throws {
    let device = try TestDevice()
    let documents = device.home.path(of: .documents)
    let root = device.root
    let app = device.app
    nonisolated(unsafe) var backgroundStatus: Int32 = -1
    let group = DispatchGroup()
    DispatchQueue.global().async(group: group) {
      let session = try? DeviceSession.open(root: root, mutating: false)
      backgroundStatus =
        (try? session?.run(
          app,
          command: [
            "/bin/sh", "-c", "touch Documents/up; while [ ! -e Documents/stop ]; do sleep 0.02; done",
          ]))
        ?? -2
    }
    defer {
      _ = FileManager.default.createFile(atPath: documents + "/stop", contents: nil)
      group.wait()
    }
    let deadline = Date().addingTimeInterval(10)
    while access(documents + "/up", F_OK) != 0 && Date() < deadline { usleep(10_000) }

    let session = try device.session(mutating: true)
    try session.lockApp(bundleIdentifier: app.bundleIdentifier)
    #expect(try session.isRunning(app))
    do {
      try session.uninstall(app)
      Issue.record("uninstalled a running app")
    } catch let error as ContainerError {
      #expect(error.code == .appRunning && error.kind == .busy)
    }
    #expect(access(device.home.path, F_OK) == 0)
    #expect(try session.registry.appIfPresent(app.bundleIdentifier) != nil)
    // Another confined process of the same app starts while the first runs.
    #expect(try device.session().run(app, command: ["/bin/true"]) == 0)

    #expect(FileManager.default.createFile(atPath: documents + "/stop", contents: nil))
    group.wait()
    #expect(backgroundStatus == 0)
    #expect(try !session.isRunning(app))
  }

  @Test func whileUninstallHoldsTheLockNoLaunchStarts() throws {
    let device = try TestDevice()
    let session = try device.session(mutating: true)
    try session.lockApp(bundleIdentifier: device.app.bundleIdentifier)
    var held: FileLock? = try session.ensureNotRunning(device.app)
    let out = try Capture()
    #expect(throws: LockBusyError.self) {
      _ = try device.session(lockWait: LockWait(seconds: 0.1)!)
        .launch(device.app, options: SandboxOptions(standardOutput: out.write))
    }
    #expect(try out.text().isEmpty)
    #expect(access(device.home.path(of: .documents) + "/Notes", F_OK) != 0)
    #expect(held != nil)
    held = nil
    // Released: launches proceed, and a launch after an uninstall is refused.
    let launched = try Capture()
    #expect(
      try device.session().launch(device.app, options: SandboxOptions(standardOutput: launched.write)) == 0)
    #expect(try launched.text() == "Notes 1.0: 1 note(s) in Documents/Notes\n")
    try session.uninstall(device.app)
    // Named again, the app is gone (66); launched from a stale record, the missing bundle
    // fails the seal check before anything runs.
    do {
      _ = try device.session().app(device.app.bundleIdentifier)
      Issue.record("found an uninstalled app")
    } catch let error as ContainerError {
      #expect(error.code == .appNotFound && error.kind == .notFound)
    }
    do {
      _ = try device.session().launch(device.app)
      Issue.record("launched an uninstalled app")
    } catch let error as ContainerError {
      #expect(error.code == .sealBroken && error.message.contains("the bundle directory is gone"))
    }
  }

  @Test func launchRefusesABrokenSealBeforeTouchingTmp() throws {
    let device = try TestDevice()
    let tmp = device.home.path(of: .tmp)
    #expect(FileManager.default.createFile(atPath: tmp + "/kept", contents: Data("kept".utf8)))
    #expect(
      FileManager.default.createFile(
        atPath: device.home.bundlePath + "/Injected.dylib", contents: Data("x".utf8)))
    do {
      _ = try device.session().launch(device.app)
      Issue.record("launched a tampered bundle")
    } catch let error as ContainerError {
      #expect(error.code == .sealBroken && error.kind == .badData)
      #expect(error.message.contains("'Injected.dylib' was added after sealing"))
    }
    #expect(FileManager.default.contents(atPath: tmp + "/kept") == Data("kept".utf8))
  }
}
