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
    let process = Process()
    process.executableURL = URL(fileURLWithPath: productsDirectory + "/appbox")
    process.arguments = [
      "--root", device.root, "run", "com.example.notes", "--", "/bin/sh", "-c",
      "echo $$ > Documents/pid.tmp && mv Documents/pid.tmp Documents/pid && exec sleep 30",
    ]
    try process.run()
    for _ in 0..<500 where !FileManager.default.fileExists(atPath: home + "/Documents/pid") { usleep(10_000) }
    let pid = try #require(
      Int32(
        try String(contentsOfFile: home + "/Documents/pid", encoding: .utf8)
          .trimmingCharacters(in: .whitespacesAndNewlines)))
    defer { kill(pid, SIGKILL) }
    kill(process.processIdentifier, SIGTERM)
    process.waitUntilExit()
    #expect(process.terminationReason == .exit)
    #expect(process.terminationStatus == 128 + SIGTERM)
    #expect(kill(pid, 0) != 0, "the app is still running")
  }
}
