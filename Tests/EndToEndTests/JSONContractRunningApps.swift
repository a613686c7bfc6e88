import AppboxTestSupport
import Foundation
import Glibc
import Testing

extension JSONContractTests {
  /// Apps in the background: a detached launch, ps, logs, terminate, openurl, and a launch that
  /// dies by a signal (its crash record in `logs`). Every run is ended before this returns.
  func exerciseRunningApps(_ run: JSONContractRun) throws {
    let sleeper = "com.example.sleeper"
    let crasher = "com.example.crasher"
    let root = run.device.root
    func running(_ app: String) throws -> Bool {
      let result = try appbox(["--json", "ps", app], root: root)
      return !(JSON.document(result.stdout)?.elements.isEmpty ?? true)
    }
    func logged(_ app: String, _ text: String) throws -> Bool {
      let result = try appbox(["--json", "logs", app], root: root)
      return JSON.document(result.stdout)?["output"]?.string?.contains(text) == true
    }
    try run.run(
      "install",
      [
        "install",
        try scriptBundle(
          in: run.work, identifier: sleeper, schemes: ["sleeper"], script: "echo started; exec sleep 86400"),
      ])
    try run.run("launch --detach", ["launch", sleeper, "--detach"])
    try run.run("ps", ["ps"])
    try run.run("ps", ["ps", sleeper])
    #expect(try eventually(within: 20) { try logged(sleeper, "started") })
    try run.run("logs", ["logs", sleeper])
    try run.run("terminate", ["terminate", sleeper])
    #expect(try !running(sleeper))
    try run.run("terminate", ["terminate", sleeper])
    try run.run("openurl", ["openurl", "sleeper://note/1"])
    #expect(try running(sleeper))
    try run.run("terminate", ["terminate", sleeper, "--signal", "INT", "--grace", "1"])
    try run.run(
      "install",
      [
        "install",
        try scriptBundle(in: run.work, identifier: crasher, script: "echo about to crash; kill -SEGV $$"),
      ])
    try run.run("launch --detach", ["launch", crasher, "--detach"])
    #expect(try eventually(within: 20) { try !running(crasher) })
    let logs = try run.run("logs", ["logs", crasher])
    #expect(logs["crash"]?["signalName"] == .string("SIGSEGV"), "\(logs)")
  }

  /// A copy of Notes 1.0 as `identifier` (of team ABCDE12345) whose executable is the /bin/sh
  /// `script`, claiming the URL `schemes`. Returns the bundle's path.
  func scriptBundle(
    in work: TemporaryDirectory, identifier: String, schemes: [String] = [], script: String
  ) throws -> String {
    let bundle = work.url("bundle-\(identifier)/Notes.app")
    try FileManager.default.createDirectory(
      atPath: work.url("bundle-\(identifier)"), withIntermediateDirectories: true)
    try copyTree(fixturePath("bundles/Notes-1.0/Notes.app"), to: bundle)
    let urlTypes =
      schemes.isEmpty
      ? ""
      : "<key>CFBundleURLTypes</key><array><dict><key>CFBundleURLName</key><string>\(identifier)</string>"
        + "<key>CFBundleURLSchemes</key><array>" + schemes.map { "<string>\($0)</string>" }.joined()
        + "</array></dict></array>"
    let info = try String(contentsOfFile: bundle + "/Info.plist", encoding: .utf8)
      .replacingOccurrences(of: "<string>com.example.notes</string>", with: "<string>\(identifier)</string>")
      .replacingOccurrences(of: "</dict>\n</plist>", with: urlTypes + "</dict>\n</plist>")
    try info.write(toFile: bundle + "/Info.plist", atomically: false, encoding: .utf8)
    let entitlements = """
      <?xml version="1.0" encoding="UTF-8"?>
      <plist version="1.0"><dict>
      <key>application-identifier</key><string>ABCDE12345.\(identifier)</string>
      <key>com.apple.developer.team-identifier</key><string>ABCDE12345</string>
      </dict></plist>
      """
    try entitlements.write(
      toFile: bundle + "/archived-expanded-entitlements.xcent", atomically: false, encoding: .utf8)
    try ("#!/bin/sh\n" + script + "\n").write(toFile: bundle + "/Notes", atomically: false, encoding: .utf8)
    chmod(bundle + "/Notes", 0o755)
    return bundle
  }
}
