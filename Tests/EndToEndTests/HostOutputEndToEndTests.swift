import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// What appbox shows and writes on the host for hostile names and secret files (issue 24,
/// item 11): commands safe to paste into dash, an advice page without direction characters,
/// a warning for a password file others can read, a private catalog.
struct HostOutputEndToEndTests {
  /// A name that runs `touch PWNED` when pasted into dash quoted the old way
  /// (`$'Documents/x\'$(touch PWNED) #\x0a.bin'`: dash ends the quote at `\'`).
  static let breakout = "Documents/x'$(touch PWNED) #\n.bin"
  /// A name U+202E shows reversed ("exe.bin" reads as "nib.exe").
  static let reversed = "Documents/\u{202E}nib.exe"

  /// Notes whose two hostile files change before each of three backups after the first.
  static func churningHostileNames() throws -> Device {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    for round in 0..<4 {
      for (index, name) in [breakout, reversed].enumerated() {
        try Data(repeating: UInt8(round * 2 + index), count: 1_100_000)
          .write(to: URL(fileURLWithPath: device.home + "/" + name))
      }
      if round > 0 { try device.trustSnapshots() }
      _ = try device.backup()
    }
    try device.trustSnapshots()
    return device
  }

  /// Whether `text` holds a byte or character that changes how a terminal or a page shows it.
  static func hasControlOrDirection(_ text: String) -> Bool {
    text.unicodeScalars.contains {
      $0.value < 0x20 || $0.value == 0x7F || (0x80...0x9F).contains($0.value)
        || [0x061C, 0x200E, 0x200F, 0x2028, 0x2029].contains($0.value) || (0x202A...0x202E).contains($0.value)
        || (0x2066...0x2069).contains($0.value)
    }
  }

  @Test func suggestedCommandsRunInDashAsTheyShowAndTheHTMLPageShowsNoDirectionCharacters() throws {
    let device = try Self.churningHostileNames()
    let page = device.dir.url("advice.html")
    let report = try device.run("--json", "advise", "com.example.notes", "--html", page)
    #expect(report.status == 0, "\(report.err)")
    let object = try #require(try JSONSerialization.jsonObject(with: Data(report.stdout)) as? [String: Any])
    let findings = try #require(object["findings"] as? [[String: Any]])
    var commands: [String: String] = [:]
    for finding in findings {
      if let path = finding["path"] as? String, let command = finding["command"] as? String {
        commands[path] = command
      }
    }
    // Findings name paths as people read them (controls and direction characters escaped).
    let raw = [
      "Documents/x'$(touch PWNED) #\\x0a.bin": Self.breakout, "Documents/\\u{202e}nib.exe": Self.reversed,
    ]
    #expect(Set(commands.keys) == Set(raw.keys), "\(findings)")
    let text = try device.run("advise", "com.example.notes")
    #expect(!Self.hasControlOrDirection(text.out.replacingOccurrences(of: "\n", with: " ")))

    // Pasted into dash (and the other shells), each command marks exactly its file, and
    // nothing else runs.
    var environment = ProcessInfo.processInfo.environment
    environment["APPBOX_ROOT"] = device.root
    environment["PATH"] = productsDirectory + ":" + (environment["PATH"] ?? "/usr/bin:/bin")
    let cwd = device.dir.url("cwd")
    try FileManager.default.createDirectory(atPath: cwd, withIntermediateDirectories: true)
    for (shown, command) in commands.sorted(by: { $0.key < $1.key }) {
      let path = try #require(raw[shown])
      #expect(!Self.hasControlOrDirection(command), "\(command)")
      #expect(text.out.contains("$ " + command), "the text output shows the same command")
      for shell in ["/usr/bin/dash", "/bin/sh", "/usr/bin/bash"] {
        let result = try runProcess(shell, ["-c", command], environment: environment, currentDirectory: cwd)
        #expect(result.status == 0, "\(shell) \(command): \(result.err)")
        #expect(isExcluded(device.home + "/" + path), "\(shell): \(command)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: cwd).isEmpty, "nothing ran: \(command)")
        #expect(try device.run("exclude", "com.example.notes", path, "--undo").status == 0)
      }
    }
    #expect(!FileManager.default.fileExists(atPath: device.home + "/Documents/PWNED"))

    let html = try String(contentsOfFile: page, encoding: .utf8)
    #expect(!Self.hasControlOrDirection(html.replacingOccurrences(of: "\n", with: " ")))
    #expect(html.contains("Documents/\\u{202e}nib.exe"), "escaped as the text output escapes it")
  }

  @Test func aPasswordFileOthersCanReadWorksWithAWarning() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    let loose = try device.dir.write("loose", "pw\n", mode: 0o644)
    let repository = device.dir.url("vault")
    let initialized = try device.run(
      "repo", "init", "--repo", repository, "--encrypt", "--password-file", loose)
    #expect(initialized.status == 0, "\(initialized.err)")
    let warnings = initialized.err.split(separator: "\n").filter { $0.hasPrefix("warning: ") }
    #expect(
      warnings.count == 1 && warnings[0].contains("'\(loose)' may be read by others (mode 644)")
        && warnings[0].contains("chmod 600"), "\(initialized.err)")
    let backup = try device.run("backup", "com.example.notes", "--repo", repository, "--password-file", loose)
    #expect(backup.status == 0 && backup.err.contains("may be read by others"), "\(backup.err)")
    // A private file: no warning.
    #expect(chmod(loose, 0o600) == 0)
    let quiet = try device.run("snapshots", "--repo", repository, "--password-file", loose)
    #expect(quiet.status == 0 && !quiet.err.contains("warning"), "\(quiet.err)")
  }

  @Test func aPlainRepositorysCatalogIsPrivate() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    let repository = device.dir.url("plain")
    #expect(try device.run("repo", "init", "--repo", repository).status == 0)
    #expect(try device.run("backup", "com.example.notes", "--repo", repository).status == 0)
    #expect(try device.run("backup", "com.example.notes").status == 0)
    for path in [repository + "/catalog.db", device.root + "/Backups/catalog.db"] {
      var st = stat()
      #expect(
        stat(path, &st) == 0 && st.st_mode & 0o777 == 0o600,
        "\(path): \(String(st.st_mode & 0o777, radix: 8))")
    }
  }
}
