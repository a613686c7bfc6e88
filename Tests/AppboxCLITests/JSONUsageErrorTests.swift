import AppboxTestSupport
import Foundation
import Testing

@testable import AppboxCLI

/// Under --json every outcome is exactly one JSON document on stdout. Usage errors (64)
/// printed nothing there: `--json backup`, `--json list --bogus`, `--json forget APP`.
struct JSONUsageErrorTests {
  static let cases: [[String]] = [
    ["--json", "backup"],
    ["--json", "list", "--bogus"],
    ["--json", "forget", "com.example.notes"],
    ["backup", "--json"],
    ["--json"],
    ["--json", "instal", "Notes.app"],
    ["--json", "keychain", "get", "--service", "s", "--account", "a"],
    ["--json", "keychain", "com.example.notes", "add", "--service", "s", "--account", "a"],
    ["--json", "keychain", "com.example.notes"],
    ["--json", "device", "frob"],
    ["--json", "backup", "--all", "--compress", "bz2"],
    ["--json", "backup", "--all", "com.example.notes"],
    ["--json", "restore"],
    ["--json", "path", "com.example.notes", "nowhere"],
    ["--json", "diff", "a"],
    ["--json", "list", "extra"],
    ["--json", "list", "--groups=yes"],
    ["--json", "--wait", "soon", "list"],
    ["--json", "help", "bogus"],
    ["--json", "import", "com.example.notes", "a.tar", "--max-size", "lots"],
    ["--json", "archive", "decrypt", "1a2b3c4d"],
    ["--json", "run", "com.example.notes", "--", "true"],
    ["--json", "launch", "com.example.notes"],
  ]

  @Test(arguments: cases)
  func usageErrorsAreOneJSONDocumentOnStdout(_ arguments: [String]) throws {
    let root = TemporaryDirectory("json-usage")
    let result = runCLI(["--root", root.url("device")] + arguments)
    #expect(result.status == 64, "\(arguments): \(result.err)")
    let document = try JSONSerialization.jsonObject(with: Data(result.out.utf8))
    let error = try #require((document as? [String: Any])?["error"] as? [String: Any], "\(result.out)")
    #expect(error["status"] as? Int == 64)
    let message = try #require(error["message"] as? String)
    #expect(!message.isEmpty)
    #expect((error["help"] as? String)?.hasPrefix("appbox help") == true)
    // The person at the terminal still gets the error line, with the same message.
    #expect(result.err.hasPrefix("Error: \(message)\n"), "\(result.err)")
    // Nothing was made: a malformed command line changes nothing.
    #expect(!FileManager.default.fileExists(atPath: root.url("device")))
  }

  /// `run` and `launch` print the app's own output: under --json they are refused, before
  /// anything starts, with one line saying why.
  @Test func runAndLaunchRefuseJSON() throws {
    for arguments in [["run", "com.example.notes", "--", "echo", "hi"], ["launch", "com.example.notes"]] {
      let result = runCLI(["--json"] + arguments)
      #expect(result.status == 64)
      #expect(
        result.err.hasPrefix(
          "Error: --json is refused here: the app writes its own output to stdout, which cannot be one JSON "
            + "document (leave --json out)\n"), "\(result.err)")
      let document = try JSONSerialization.jsonObject(with: Data(result.out.utf8)) as? [String: Any]
      #expect((document?["error"] as? [String: Any])?["status"] as? Int == 64)
      // Their pages say so.
      #expect(runCLI([arguments[0], "--help"]).out.contains("--json given"))
    }
  }

  /// Help and the version are documents too under --json.
  @Test func helpAndVersionAreDocuments() throws {
    let help = runCLI(["--json", "help", "keychain", "get"])
    #expect(help.status == 0)
    let page = try JSONSerialization.jsonObject(with: Data(help.out.utf8)) as? [String: Any]
    #expect(page?["command"] as? String == "keychain get")
    #expect((page?["help"] as? String)?.hasPrefix("OVERVIEW: Print an item's data") == true)
    let root = try JSONSerialization.jsonObject(with: Data(runCLI(["--json", "--help"]).out.utf8))
    #expect((root as? [String: Any])?["command"] as? String == "")
    let version = try JSONSerialization.jsonObject(with: Data(runCLI(["--json", "--version"]).out.utf8))
    #expect((version as? [String: Any])?["version"] as? String == AppboxCLI.version)
  }

  /// With --json-progress, stderr's lines are JSON too, the usage error's included.
  @Test func usageErrorsUnderJSONProgressAreJSONLines() throws {
    let result = runCLI(["--json-progress", "forget", "com.example.notes"])
    #expect(result.status == 64)
    #expect(result.out.isEmpty)
    let line = try JSONSerialization.jsonObject(with: Data(result.err.utf8)) as? [String: Any]
    #expect(line?["type"] as? String == "error")
    #expect(line?["status"] as? Int == 64)
    #expect(
      line?["message"] as? String
        == "missing --keep-last N (or --keep-hourly/daily/weekly/monthly/yearly N, --keep-within D, --keep-tag T)"
    )
    #expect(result.err.hasSuffix("\n") && result.err.dropLast().contains("\n") == false)
  }
}
