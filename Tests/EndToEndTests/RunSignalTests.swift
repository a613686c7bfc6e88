import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

struct RunSignalTests {
  /// Stopping appbox stops the confined app: SIGTERM is passed on, and appbox exits with
  /// the app's status (128 + 15).
  @Test func terminatingAppboxTerminatesTheApp() throws {
    let device = Device()
    let id = try device.install("Notes-1.0/Notes.app")
    let home = device.root + "/ApplicationRoot/" + id
    let app = try device.startSleepingApp("com.example.notes", home: home)
    defer { kill(app.pid, SIGKILL) }
    kill(app.appbox.processIdentifier, SIGTERM)
    app.appbox.waitUntilExit()
    let process = app.appbox
    #expect(process.terminationReason == .exit)
    #expect(process.terminationStatus == 128 + SIGTERM)
    #expect(kill(app.pid, 0) != 0, "the app is still running")
  }
}
