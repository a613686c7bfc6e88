import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// `launch --detach`, `ps`, `terminate` and `logs`: apps in the background (issue 29).
struct BackgroundAppTests {
  static let notes = "com.example.notes"

  /// A device with Notes installed as the /bin/sh `script`.
  func device(running script: String) throws -> (Device, String) {
    let device = Device()
    let id = try device.install(path: try device.makeScriptBundle(script: script))
    return (device, id)
  }

  /// Waits until `ps` shows no run of Notes.
  func waitUntilEnded(_ device: Device) throws -> Bool {
    try eventually(within: 20) { try device.runs().isEmpty }
  }

  @Test func aDetachedAppRunsUntilTerminateEndsItsWholeJailDaemonsIncluded() throws {
    let marker = "daemon-\(UUID().uuidString)"
    let (device, _) = try device(
      running: """
        echo started; echo "to stderr" >&2
        setsid sh -c 'sleep 86400; : \(marker)' </dev/null >/dev/null 2>&1 &
        exec sleep 86400
        """)
    let reply = try device.launchDetached()
    let pid = try #require((reply["pid"] as? Int).map(pid_t.init))
    #expect(processExists(pid))
    #expect(reply["log"] as? String != nil)
    // ps lists it, detached, with the same pid.
    let runs = try device.runs()
    #expect(runs.count == 1)
    #expect(runs.first?["pid"] as? Int == Int(pid) && runs.first?["detached"] as? Bool == true)
    #expect(try device.run("ps").out.contains("detached"))
    // The daemon that left the app's session is the app's too.
    #expect(eventually { !processes(containing: marker).isEmpty })
    #expect(eventually { (try? device.run("logs", Self.notes).out.contains("to stderr")) == true })
    let logs = try device.run("logs", Self.notes)
    #expect(logs.out.hasPrefix("started\n"), "\(logs.out)")
    // A running app blocks a reset.
    #expect(try device.run("reset", Self.notes).status == 75)
    let terminate = try device.run("--json", "terminate", Self.notes)
    #expect(terminate.status == 0, "\(terminate.err)")
    let report = try JSONSerialization.jsonObject(with: Data(terminate.stdout)) as? [String: Any]
    #expect(report?["runs"] as? Int == 1 && report?["killed"] as? Bool == false)
    // When terminate returns, every process is gone and the app no longer runs.
    #expect(processes(containing: marker).isEmpty)
    #expect(!processExists(pid))
    #expect(try device.runs().isEmpty)
    #expect(try device.run("reset", Self.notes).status == 0)
    // An end terminate asked for is no crash.
    let after = try #require(try device.json("logs", Self.notes) as? [String: Any])
    #expect(after["crash"] is NSNull)
  }

  @Test func anAppThatIgnoresTheSignalIsKilledAfterTheGracePeriod() throws {
    let (device, _) = try device(running: "trap '' TERM INT; echo ready; exec sleep 86400")
    let reply = try device.launchDetached()
    let pid = try #require((reply["pid"] as? Int).map(pid_t.init))
    #expect(eventually { (try? device.run("logs", Self.notes).out.contains("ready")) == true })
    let terminate = try device.run("--json", "terminate", Self.notes, "--grace", "0.5")
    #expect(terminate.status == 0, "\(terminate.err)")
    let report = try JSONSerialization.jsonObject(with: Data(terminate.stdout)) as? [String: Any]
    #expect(report?["killed"] as? Bool == true)
    #expect(!processExists(pid))
    #expect(try device.runs().isEmpty)
    let bad = try device.run("terminate", Self.notes, "--signal", "NOPE")
    #expect(bad.status == 64 && bad.err.contains("--signal"), "\(bad.err)")
  }

  @Test func aLaunchThatDiesByASignalLeavesACrashRecordThatLogsAndInspectShow() throws {
    let (device, _) = try device(running: "echo about to crash; kill -SEGV $$")
    _ = try device.launchDetached()
    #expect(try waitUntilEnded(device))
    let logs = try #require(try device.json("logs", Self.notes) as? [String: Any])
    let crash = try #require(logs["crash"] as? [String: Any], "\(logs)")
    #expect(crash["signal"] as? Int == Int(SIGSEGV) && crash["signalName"] as? String == "SIGSEGV")
    #expect(crash["exitStatus"] as? Int == 128 + Int(SIGSEGV))
    #expect((crash["logTail"] as? String)?.contains("about to crash") == true)
    let text = try device.run("logs", Self.notes)
    #expect(text.out.contains("about to crash\n"))
    #expect(text.out.contains("crashed: SIGSEGV (signal 11)"), "\(text.out)")
    let inspect = try #require(try device.json("inspect", Self.notes) as? [String: Any])
    #expect((inspect["lastCrash"] as? [String: Any])?["signalName"] as? String == "SIGSEGV")
    #expect(try device.run("inspect", Self.notes).out.contains("last crash    SIGSEGV"))
  }

  @Test func theLogIsBoundedAndKeepsTheNewestOutput() throws {
    let (device, id) = try device(
      running: "i=0; while [ $i -lt 3000 ]; do echo \"line $i of the output\"; i=$((i+1)); done")
    let reply = try appbox(
      ["--json", "launch", Self.notes, "--detach"], root: device.root,
      environment: ["APPBOX_LOG_LIMIT": "8192"])
    #expect(reply.status == 0, "\(reply.err)")
    #expect(try waitUntilEnded(device))
    let directory = device.root + "/.appbox/logs/" + id
    let files = try FileManager.default.contentsOfDirectory(atPath: directory)
    #expect(files.count == 2, "\(files)")
    for file in files {
      let size = try #require(contents(directory + "/" + file)).count
      #expect(size <= 8192, "\(file): \(size)")
    }
    let logs = try device.run("logs", Self.notes)
    #expect(logs.out.hasSuffix("line 2999 of the output\n"))
    #expect(!logs.out.contains("line 0 of the output"))
    // The app cannot see its log: nothing of .appbox is in its view.
    let probe = try device.sh(Self.notes, "ls \(directory) 2>&1; echo status=$?")
    #expect(probe.out.contains("status=") && !probe.out.contains(".log"), "\(probe.out)")
  }

  @Test func followPrintsUntilTheLaunchEnds() throws {
    let (device, _) = try device(
      running: "i=0; while [ $i -lt 10 ]; do echo tick $i; i=$((i+1)); sleep 0.1; done")
    _ = try device.launchDetached()
    let follow = try device.run("logs", Self.notes, "--follow")
    #expect(follow.status == 0, "\(follow.err)")
    #expect(follow.out.contains("tick 0\n") && follow.out.contains("tick 9\n"), "\(follow.out)")
  }

  @Test func psAndTerminateSeeAForegroundRunInAnotherShell() throws {
    let device = Device()
    let id = try device.install("Notes-1.0/Notes.app")
    let running = try device.startSleepingApp(Self.notes, home: device.home(id))
    defer { running.stop() }
    let runs = try device.runs()
    #expect(runs.count == 1 && runs.first?["detached"] as? Bool == false, "\(runs)")
    #expect((runs.first?["command"] as? [String])?.first == "/bin/sh")
    let terminate = try device.run("terminate", Self.notes)
    #expect(terminate.status == 0, "\(terminate.err)")
    running.appbox.waitUntilExit()
    #expect(try device.runs().isEmpty)
    let none = try device.run("terminate", Self.notes)
    #expect(none.status == 0 && none.out.contains("is not running"))
  }

  @Test func aDetachedLaunchThatCannotStartFailsWithTheLaunchsStatus() throws {
    let device = Device()
    let id = try device.install("Notes-1.0/Notes.app")
    try Data("tampered".utf8).write(to: URL(fileURLWithPath: device.home(id) + "/Notes.app/Notes"))
    let broken = try device.run("launch", Self.notes, "--detach")
    #expect(broken.status == 65, "\(broken.err)")
    #expect(broken.err.split(separator: "\n").count == 1 && broken.err.contains("Notes"), "\(broken.err)")
    #expect(try device.runs().isEmpty)
    let json = try device.run("--json", "launch", Self.notes)
    #expect(json.status == 64)
  }
}
