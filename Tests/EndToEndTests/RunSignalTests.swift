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
