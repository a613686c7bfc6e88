// The README's tour runs as written: the ```sh block right after `<!-- tour -->` in README.md,
// under `bash -euo pipefail`, from the top of the checkout, with a fresh HOME and TMPDIR (so its
// `$HOME/.local` install and its `mktemp -d` scratch directory, device root included, are
// the test's own) and none of the caller's APPBOX_* or AWS_* variables.
//
// One substitution: the tour's first step, `make install PREFIX=DIR`, builds the release
// configuration first, which cannot happen inside `swift test` (SwiftPM holds the build
// directory's lock while tests run) and would take minutes. A shell function named `make`
// runs the Makefile's own copy step instead, `make install-files BIN_DIR=<the debug build's
// products> PREFIX=DIR`, so the executables the tour uses are these tests' build, installed
// side by side by the same recipe; any other `make` command fails the tour.

import AppboxTestSupport
import Foundation
import Testing

enum ReadmeTour {
  static let marker = "<!-- tour -->"

  /// The tour's commands: the ```sh block right after the marker line.
  static func script(fromReadme text: String) throws -> String {
    let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
    let markers = lines.indices.filter { lines[$0].trimmingCharacters(in: .whitespaces) == marker }
    try #require(markers.count == 1, "README.md must have exactly one \(marker) line")
    let open = markers[0] + 1
    try #require(open < lines.count && lines[open] == "```sh", "\(marker) must be followed by a ```sh line")
    let close = try #require(
      lines[(open + 1)...].firstIndex { $0 == "```" }, "the tour's block is not closed")
    return lines[(open + 1)..<close].joined(separator: "\n") + "\n"
  }

  /// What runs before the tour: `make install PREFIX=DIR` as the Makefile's copy step.
  static func prelude(products: String, checkout: String) -> String {
    """
    make() {
      if [ "$#" -eq 2 ] && [ "$1" = install ] && [ "${2%%=*}" = PREFIX ]; then
        command make --no-print-directory -C \(shellQuoted(checkout)) install-files \
          BIN_DIR=\(shellQuoted(products)) "$2"
      else
        echo "README tour: only 'make install PREFIX=DIR' is expected here, not: make $*" >&2
        return 64
      fi
    }

    """
  }

  static func shellQuoted(_ text: String) -> String {
    "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'"
  }
}

struct ReadmeTourTests {
  @Test func theTourRunsTopToBottomOnAFreshDevice() throws {
    let readme = try String(contentsOfFile: repositoryRoot + "/README.md", encoding: .utf8)
    let tour = try ReadmeTour.script(fromReadme: readme)
    // The shape the issue asks for: installed first, a device made before it is used, a
    // repository initialised before it is written, and no placeholder in place of an id.
    let commands = tour.split(separator: "\n").filter { !$0.hasPrefix("#") && !$0.isEmpty }
    #expect(commands.first?.hasPrefix("make install PREFIX=") == true)
    #expect(tour.contains("export PATH="))
    let initDevice = try #require(tour.range(of: "appbox device init"))
    let install = try #require(tour.range(of: "appbox install"))
    #expect(initDevice.lowerBound < install.lowerBound)
    for repository in tour.matches(of: /--repo\s+("[^"]+"|\S+)/).map({ String($0.output.1) }) {
      let initialised = try #require(
        tour.range(of: "repo init --repo \(repository)"), "\(repository) is used uninitialised")
      let firstUse = try #require(tour.range(of: "--repo \(repository)"))
      #expect(initialised.upperBound == firstUse.upperBound, "\(repository) is used before `repo init`")
    }
    #expect(!tour.contains("…"), "the tour has a placeholder")
    #expect(tour.firstMatch(of: /\b[0-9a-f]{8}\b/) == nil, "the tour has a literal snapshot id")

    let work = TemporaryDirectory("tour")
    try FileManager.default.createDirectory(atPath: work.url("home"), withIntermediateDirectories: true)
    try FileManager.default.createDirectory(atPath: work.url("tmp"), withIntermediateDirectories: true)
    let script = try work.write(
      "tour.sh", ReadmeTour.prelude(products: productsDirectory, checkout: repositoryRoot) + tour)
    let environment = [
      "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin",
      "HOME": work.url("home"), "TMPDIR": work.url("tmp"), "LANG": "C.UTF-8",
    ]
    let result = try runProcess(
      "/bin/bash", ["-euo", "pipefail", "-x", script], environment: environment,
      currentDirectory: repositoryRoot)
    #expect(
      result.status == 0,
      "the README tour failed (exit \(result.status)); its trace ends:\n\(String(result.err.suffix(6000)))")

    // Installed side by side, where the tour put them.
    for name in ["appbox", "appbox-sandbox", "appbox-secitem"] {
      #expect(FileManager.default.isExecutableFile(atPath: work.url("home/.local/bin/" + name)), "\(name)")
    }
    // What the tour made is in its scratch directory (the device root among it), not elsewhere.
    let scratch = try FileManager.default.contentsOfDirectory(atPath: work.url("tmp"))
    #expect(scratch.count == 1, "\(scratch)")
    if let directory = scratch.first {
      for made in [
        "device/device.plist", "report.pdf", "big.bin", "copy.pdf", "data.tar", "advice.html", "vault/config",
      ] {
        #expect(work.exists("tmp/\(directory)/\(made)"), "\(made)")
      }
    }
  }
}
