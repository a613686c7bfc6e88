import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

extension Device {
  /// A copy of Notes 1.0 whose executable is the /bin/sh `script`, as `identifier` at
  /// `version`, claiming the URL `schemes`. Returns the bundle's path.
  func makeScriptBundle(
    identifier: String = "com.example.notes", version: String = "1.0", schemes: [String] = [], script: String
  ) throws -> String {
    let directory = dir.url("bundle-\(UUID().uuidString)")
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    let bundle = directory + "/Notes.app"
    try copyTree(fixturePath("bundles/Notes-1.0/Notes.app"), to: bundle)
    let infoPath = bundle + "/Info.plist"
    let urlTypes =
      schemes.isEmpty
      ? ""
      : "<key>CFBundleURLTypes</key><array><dict><key>CFBundleURLName</key><string>\(identifier)</string>"
        + "<key>CFBundleURLSchemes</key><array>" + schemes.map { "<string>\($0)</string>" }.joined()
        + "</array></dict></array>"
    let info = try String(contentsOfFile: infoPath, encoding: .utf8)
      .replacingOccurrences(of: "<string>com.example.notes</string>", with: "<string>\(identifier)</string>")
      .replacingOccurrences(of: "<string>1.0</string>", with: "<string>\(version)</string>")
      .replacingOccurrences(of: "</dict>\n</plist>", with: urlTypes + "</dict>\n</plist>")
    try info.write(toFile: infoPath, atomically: false, encoding: .utf8)
    if identifier != "com.example.notes" {
      let entitlements = """
        <?xml version="1.0" encoding="UTF-8"?>
        <plist version="1.0"><dict>
        <key>application-identifier</key><string>ABCDE12345.\(identifier)</string>
        <key>com.apple.developer.team-identifier</key><string>ABCDE12345</string>
        </dict></plist>
        """
      try entitlements.write(
        toFile: bundle + "/archived-expanded-entitlements.xcent", atomically: false, encoding: .utf8)
    }
    try ("#!/bin/sh\n" + script + "\n").write(toFile: bundle + "/Notes", atomically: false, encoding: .utf8)
    chmod(bundle + "/Notes", 0o755)
    return bundle
  }

  /// `launch APP --detach --json`: the reply (pid, launch, log).
  func launchDetached(_ app: String = "com.example.notes", _ extra: String...) throws -> [String: Any] {
    let result = try appbox(["--json", "launch", app, "--detach"] + extra, root: root)
    #expect(result.status == 0, "launch --detach: \(result.err)")
    return try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [String: Any] ?? [:]
  }

  /// The runs `ps --json` lists.
  func runs() throws -> [[String: Any]] { try json("ps") as? [[String: Any]] ?? [] }
}

/// Whether process `pid` exists (and is not a zombie).
func processExists(_ pid: pid_t) -> Bool {
  guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
    let close = stat.lastIndex(of: ")")
  else { return false }
  return !stat[stat.index(after: close)...].hasPrefix(" Z")
}

/// The pids of every process whose command line contains `marker`.
func processes(containing marker: String) -> [pid_t] {
  let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
  return names.compactMap { name -> pid_t? in
    guard let pid = pid_t(name), pid != getpid(),
      let bytes = FileManager.default.contents(atPath: "/proc/\(name)/cmdline")
    else { return nil }
    let line = String(decoding: bytes.map { $0 == 0 ? 0x20 : $0 }, as: UTF8.self)
    return line.contains(marker) && processExists(pid) ? pid : nil
  }
}
