import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

struct RunSignalTests {
  /// Stopping appbox stops the confined app: SIGTERM is passed on to the app, appbox exits
  /// with the app's status (128 + 15), and once it has, no process of the app is left (so
  /// uninstall goes through at once).
  @Test func terminatingAppboxTerminatesTheApp() throws {
    let device = Device()
    let id = try device.install("Notes-1.0/Notes.app")
    let home = device.root + "/ApplicationRoot/" + id
    let process = try device.start(
      "run", "com.example.notes", "--", "/bin/sh", "-c",
      "trap 'echo term > Documents/got-term; exit 143' TERM; touch Documents/started; "
        + "while :; do sleep 0.05; done")
    defer { kill(process.processIdentifier, SIGKILL) }
    #expect(eventually { exists(home + "/Documents/started") })
    kill(process.processIdentifier, SIGTERM)
    process.waitUntilExit()
    #expect(process.terminationReason == .exit)
    #expect(process.terminationStatus == 128 + SIGTERM)
    #expect(contents(home + "/Documents/got-term") == Array("term\n".utf8), "the app did not get SIGTERM")
    let uninstall = try device.run("uninstall", "com.example.notes")
    #expect(uninstall.status == 0, "\(uninstall.err)")
  }

  /// A SIGTERM that reaches appbox while it is still starting the app is not lost: the app
  /// gets it once it runs, and appbox ends. appbox starts here with SIGTERM blocked, as
  /// Foundation's `Process` used to start it: the signal waited pending, and the wait used to
  /// set it ignored before listening, which discarded it: appbox then waited forever on an
  /// app that never heard it.
  @Test(arguments: [0, 30, 120])
  func aSIGTERMDuringStartIsPassedOn(afterMilliseconds delay: Int) throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    let process = try device.start(
      "run", "com.example.notes", "--", "/bin/sh", "-c",
      "touch Documents/started; while :; do sleep 0.05; done", blocking: [SIGTERM])
    defer { kill(process.processIdentifier, SIGKILL) }
    usleep(useconds_t(delay * 1000))
    kill(process.processIdentifier, SIGTERM)
    // No timing assertion: a generous bound on how long to wait before calling it a hang.
    #expect(eventually(within: 60) { !process.isRunning }, "appbox did not end after SIGTERM")
    guard !process.isRunning else { return }
    if process.terminationReason == .exit {
      #expect(process.terminationStatus == 128 + SIGTERM)
    }
    // Whether or not the app had started, nothing of it is left.
    #expect(try eventually { try device.run("uninstall", "com.example.notes").status == 0 })
  }

  /// SIGKILL of appbox (nothing passed on) still ends the app: the jail dies with appbox.
  @Test func killingAppboxKillsTheJail() throws {
    let device = Device()
    let id = try device.install("Notes-1.0/Notes.app")
    let home = device.root + "/ApplicationRoot/" + id
    let app = try device.startSleepingApp("com.example.notes", home: home)
    #expect(try device.run("uninstall", "com.example.notes").status == 75)
    app.stop()
    // The lock is free once the kernel has torn the namespace down.
    #expect(try eventually { try device.run("uninstall", "com.example.notes").status == 0 })
  }
}
