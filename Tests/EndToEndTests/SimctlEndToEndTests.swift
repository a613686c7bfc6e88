import AppboxCore
import AppboxPlist
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// `appbox simctl VERB DEVICE …`: simctl's arguments and output formats (issue 29).
struct SimctlEndToEndTests {
  static let notes = "com.example.notes"

  func simctl(_ device: Device, _ words: String..., environment: [String: String] = [:]) throws
    -> ProcessResult
  {
    try appbox(["simctl"] + words, root: device.root, environment: environment)
  }

  @Test func getAppContainerPrintsThePathsSimctlPrints() throws {
    let device = Device()
    let id = try device.install("Notes-1.0/Notes.app")
    let udid = try #require((try device.json("device", "show") as? [String: Any])?["udid"] as? String)
    #expect(
      try simctl(device, "get_app_container", "booted", Self.notes).out == device.home(id) + "/Notes.app\n")
    #expect(try simctl(device, "get_app_container", udid, Self.notes, "data").out == device.home(id) + "\n")
    let group = try device.groupContainer()
    #expect(
      try simctl(device, "get_app_container", "booted", Self.notes, "groups").out
        == "\(sharedGroup)\t\(group)\n")
    #expect(try simctl(device, "get_app_container", "booted", Self.notes, sharedGroup).out == group + "\n")
    let unknown = try simctl(device, "get_app_container", "7A0B-NOPE", Self.notes)
    #expect(unknown.status == 66 && unknown.err.contains("no device '7A0B-NOPE'"), "\(unknown.err)")
  }

  @Test func listPrintsSimctlsTextAndJSONShapes() throws {
    let device = Device()
    #expect(try device.run("device", "init", "--name", "CI Phone").status == 0)
    let udid = try #require((try device.json("device", "show") as? [String: Any])?["udid"] as? String)
    let text = try simctl(device, "list")
    #expect(text.status == 0, "\(text.err)")
    let lines = text.out.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    #expect(
      lines.filter { $0.hasPrefix("== ") } == [
        "== Device Types ==", "== Runtimes ==", "== Devices ==", "== Device Pairs ==",
      ])
    #expect(lines.contains("    CI Phone (\(udid)) (Booted) "))
    let json = try simctl(device, "list", "devices", "-j")
    let object = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout)) as? [String: Any])
    #expect(Array(object.keys) == ["devices"])
    let devices = try #require(object["devices"] as? [String: [[String: Any]]])
    let entry = try #require(devices.values.first?.first)
    #expect(
      entry["udid"] as? String == udid && entry["state"] as? String == "Booted"
        && entry["name"] as? String == "CI Phone")
    #expect(entry["isAvailable"] as? Bool == true && entry["dataPath"] as? String == device.root)
    #expect(json.out.contains("\"state\" : \"Booted\""))
  }

  @Test func listappsAndAppinfoPrintOpenStepPropertyLists() throws {
    let device = Device()
    let id = try device.install("Notes-1.0/Notes.app")
    let info = try simctl(device, "appinfo", "booted", Self.notes)
    #expect(info.status == 0, "\(info.err)")
    #expect(
      info.out.hasPrefix(
        "{\n    ApplicationType = User;\n    Bundle = \"file://\(device.home(id))/Notes.app/\";\n"))
    #expect(info.out.contains("    CFBundleIdentifier = \"com.example.notes\";\n    CFBundleName = Notes;\n"))
    #expect(info.out.contains("    GroupContainers =     {\n        \"\(sharedGroup)\" = \"file://"))
    #expect(info.out.contains("    SBAppTags =     (\n    );\n") && info.out.hasSuffix("}\n"))
    let apps = try simctl(device, "listapps", "booted")
    #expect(apps.out.hasPrefix("{\n    \"com.example.notes\" =     {\n        ApplicationType = User;\n"))
    #expect(apps.out.contains("        GroupContainers =         {\n"))
    #expect(apps.out.hasSuffix("    };\n}\n"))
  }

  @Test func launchTerminateInstallUninstallAndUnsupportedVerbs() throws {
    let device = Device()
    let bundle = try device.makeScriptBundle(script: "echo \"arg=$1 child=$CHILD_FLAG\"; exec sleep 86400")
    // A booted device exists before simctl installs into it (only install and device init
    // create one; simctl's verbs act on a device that is there).
    #expect(try appbox(["device", "init"], root: device.root).status == 0)
    let install = try simctl(device, "install", "booted", bundle)
    #expect(install.status == 0 && install.out.isEmpty, "\(install.err)")
    let launch = try simctl(
      device, "launch", "booted", Self.notes, "one", environment: ["SIMCTL_CHILD_CHILD_FLAG": "yes"])
    #expect(launch.status == 0, "\(launch.err)")
    let pid = try #require(
      launch.out.split(separator: " ").last.flatMap { pid_t($0.trimmingCharacters(in: .newlines)) })
    #expect(launch.out == "\(Self.notes): \(pid)\n" && processExists(pid))
    #expect(eventually { (try? device.run("logs", Self.notes).out.contains("arg=one child=yes")) == true })
    // --terminate-running-process ends the first before the second starts.
    let relaunch = try simctl(device, "launch", "--terminate-running-process", "booted", Self.notes)
    #expect(relaunch.status == 0, "\(relaunch.err)")
    #expect(!processExists(pid))
    #expect(try device.runs().count == 1)
    #expect(try simctl(device, "terminate", "booted", Self.notes).status == 0)
    #expect(try device.runs().isEmpty)
    // Installing again keeps the data (simctl's replace).
    let id = try #require((try device.json("list") as? [[String: Any]])?.first?["containerID"] as? String)
    try Data("kept".utf8).write(to: URL(fileURLWithPath: device.home(id) + "/Documents/kept.txt"))
    #expect(try simctl(device, "install", "booted", bundle).status == 0)
    let newID = try #require((try device.json("list") as? [[String: Any]])?.first?["containerID"] as? String)
    #expect(contents(device.home(newID) + "/Documents/kept.txt") == Array("kept".utf8))
    #expect(try simctl(device, "uninstall", "booted", Self.notes).status == 0)
    #expect((try device.json("list") as? [Any])?.isEmpty == true)
    for words in [
      ["boot", "booted"], ["launch", "-w", "booted", Self.notes],
      ["keychain", "booted", "add-root-cert", "x"], [],
    ] {
      let refused = try appbox(["simctl"] + words, root: device.root)
      #expect(refused.status == 64, "\(words): \(refused.err)")
      // One line naming it (a missing verb is the command line's usage error, with its pointer to help).
      #expect(refused.err.split(separator: "\n").count == (words.isEmpty ? 2 : 1), "\(words): \(refused.err)")
      let named =
        ["boot": "'boot'", "launch": "'-w'", "keychain": "add-root-cert"][words.first ?? ""] ?? "VERB"
      #expect(refused.err.contains(named), "\(refused.err)")
    }
  }

  @Test func keychainResetEraseAndClone() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    #expect(
      try device.run("keychain", Self.notes, "add", "--service", "s", "--account", "a", "--data", "x").status
        == 0)
    #expect(try simctl(device, "keychain", "booted", "reset").status == 0)
    #expect(try device.run("keychain", Self.notes, "get", "--service", "s", "--account", "a").status == 66)
    let clone = try simctl(device, "clone", "booted", "Second Phone")
    #expect(clone.status == 0, "\(clone.err)")
    let second = splitPath(device.root).directory + "/Second Phone"
    let show = try appbox(["--json", "device", "show"], root: second)
    let identity = try #require(try JSONSerialization.jsonObject(with: Data(show.stdout)) as? [String: Any])
    #expect(
      identity["name"] as? String == "Second Phone" && clone.out == "\(identity["udid"] as? String ?? "")\n")
    #expect((try appbox(["--json", "list"], root: second).out).contains(Self.notes))
    #expect(try simctl(device, "erase", "booted").status == 0)
    #expect((try device.json("list") as? [Any])?.isEmpty == true)
  }
}
