import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// `openurl URL`: the app that claims the scheme, launched with the URL (issue 29).
struct OpenURLEndToEndTests {
  /// An app of `identifier` claiming `schemes` that records how it was opened.
  func install(_ device: Device, _ identifier: String, schemes: [String]) throws -> String {
    try device.install(
      path: try device.makeScriptBundle(
        identifier: identifier, schemes: schemes,
        script: "printf 'arg=%s env=%s\\n' \"$1\" \"$APPBOX_OPEN_URL\" | tee Documents/opened"))
  }

  @Test func theClaimingAppGetsTheURLAsArgumentAndInItsEnvironment() throws {
    let device = Device()
    let id = try install(device, "com.example.notes", schemes: ["notes", "x-notes"])
    let url = "NOTES://open?id=42&x=a%20b"
    let foreground = try device.run("openurl", url, "--foreground")
    #expect(foreground.status == 0, "\(foreground.err)")
    #expect(foreground.out == "arg=\(url) env=\(url)\n")
    // Detached (the default): it returns once the app runs.
    try FileTree.remove(atPath: device.home(id) + "/Documents/opened")
    let detached = try #require(try device.json("openurl", "x-notes:hello") as? [String: Any])
    #expect(
      detached["app"] as? String == "com.example.notes"
        && detached["scheme"] as? String == "x-notes")
    #expect(
      eventually {
        contents(device.home(id) + "/Documents/opened") == Array("arg=x-notes:hello env=x-notes:hello\n".utf8)
      })
  }

  @Test func unclaimedSchemesAndURLsWithoutOneAreRefused() throws {
    let device = Device()
    _ = try install(device, "com.example.notes", schemes: ["notes"])
    let unclaimed = try device.run("openurl", "mail://x")
    #expect(unclaimed.status == 66 && unclaimed.err.contains("'mail'"), "\(unclaimed.err)")
    let noScheme = try device.run("openurl", "just-text")
    #expect(noScheme.status == 64, "\(noScheme.err)")
    let json = try device.run("--json", "openurl", "notes://x", "--foreground")
    #expect(json.status == 64)
  }

  @Test func theFirstInstalledAppWinsAConflictAndKeepsItThroughOffload() throws {
    let device = Device()
    let first = try install(device, "com.example.zeta", schemes: ["shared"])
    let second = try install(device, "com.example.alpha", schemes: ["shared"])
    let result = try #require(try device.json("openurl", "shared://1") as? [String: Any])
    #expect(result["app"] as? String == "com.example.zeta")
    #expect(result["claimants"] as? [String] == ["com.example.zeta", "com.example.alpha"])
    #expect(eventually { exists(device.home(first) + "/Documents/opened") })
    #expect(!exists(device.home(second) + "/Documents/opened"))
    #expect(eventually { (try? device.runs().isEmpty) == true })
    // Offloaded, it keeps its claim: opening exits 69 until it is installed again.
    #expect(try device.run("offload", "com.example.zeta").status == 0)
    let offloaded = try device.run("openurl", "shared://2")
    #expect(offloaded.status == 69, "\(offloaded.err)")
    // Uninstalled, the claim passes to the next.
    #expect(try device.run("uninstall", "com.example.zeta").status == 0)
    let next = try #require(try device.json("openurl", "shared://3") as? [String: Any])
    #expect(next["app"] as? String == "com.example.alpha")
  }
}
