import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// appbox never closes a descriptor twice. A double close that lands on a number another
/// open has taken meanwhile closes somebody else's file (a catalog, a pipe another thread
/// reads) and shows only when threads race; `libappbox-preload-probes.so` (Tests/PreloadProbes),
/// preloaded, keeps freed numbers occupied for a while so that a second close is caught every
/// time, with the stacks of both closes in its log.
/// The probes the tests preload (Tests/PreloadProbes): the descriptor quarantine here, the exit
/// handlers' log in ExitHandlerTests.
let preloadProbes = productsDirectory + "/libappbox-preload-probes.so"

struct DescriptorHygieneTests {
  /// The environment that preloads the quarantine into programs named `executable`.
  func quarantine(_ log: String, executable: String = "appbox") -> [String: String] {
    ["LD_PRELOAD": preloadProbes, "APPBOX_FD_QUARANTINE_LOG": log, "APPBOX_FD_QUARANTINE_EXE": executable]
  }

  /// The quarantine finds a double close: the shell closes descriptor 3 twice. Also under a
  /// descriptor limit of 256, where it holds fewer numbers.
  @Test(arguments: [nil, 256])
  func theQuarantineCatchesADoubleClose(descriptorLimit: Int?) throws {
    let directory = TemporaryDirectory("fd-quarantine")
    let log = directory.url("log")
    var environment = ProcessInfo.processInfo.environment
    environment.merge(quarantine(log, executable: "dash")) { $1 }
    let limit = descriptorLimit.map { "ulimit -n \($0) && " } ?? ""
    func dash(_ script: String) throws -> ProcessResult {
      try runProcess(
        "/usr/bin/dash", ["-c", limit + "exec /usr/bin/dash -c '\(script)'"], environment: environment)
    }
    let once = try dash("exec 3</dev/null; exec 3<&-; echo ok")
    #expect(once.status == 0 && once.out == "ok\n", "\(once.err)")
    #expect(contents(log) ?? [] == [])
    let twice = try dash("exec 3</dev/null; exec 3<&-; exec 3<&-; echo ok")
    #expect(twice.status == 0, "\(twice.err)")
    let text = String(decoding: contents(log) ?? [], as: UTF8.self)
    #expect(text.contains("double close of descriptor 3") && text.contains("first closed by"), "\(text)")
  }

  /// The commands of an app's life, each run with the quarantine: none closes a descriptor
  /// twice (`launch --detach` did: the request pipe's end it had closed, once more on return).
  @Test func noCommandClosesADescriptorTwice() throws {
    try #require(FileManager.default.fileExists(atPath: preloadProbes), "the quarantine is not built")
    let device = Device()
    let log = device.dir.url("quarantine.log")
    let app = "com.example.notes"
    func step(_ arguments: [String]) throws -> ProcessResult {
      let result = try appbox(arguments, root: device.root, environment: quarantine(log))
      #expect(result.status == 0, "\(arguments): \(result.err)")
      return result
    }
    _ = try step(["install", try device.makeScriptBundle(script: "exec sleep 86400")])
    let home = device.root + "/ApplicationRoot/" + (device.applicationRootEntries().first ?? "")
    try writeSampleData(home: home)
    func backup() throws -> String {
      let made = try step(["--json", "backup", app])
      let reply = try JSONSerialization.jsonObject(with: Data(made.stdout)) as? [[String: Any]]
      return reply?.first?["snapshot"] as? String ?? ""
    }
    let first = try backup()
    try Data("changed".utf8).write(to: URL(fileURLWithPath: home + "/Documents/changed.txt"))
    let second = try backup()
    for arguments in [
      ["snapshots", app], ["diff", first, second], ["ls", second], ["check"], ["restore", app],
      ["run", app, "--", "/bin/true"], ["launch", app, "--detach"], ["ps"], ["terminate", app],
      ["forget", app, "--keep-last", "1"], ["uninstall", app],
    ] {
      _ = try step(arguments)
    }
    let text = String(decoding: contents(log) ?? [], as: UTF8.self)
    #expect(text.isEmpty, "\(text)")
  }
}
