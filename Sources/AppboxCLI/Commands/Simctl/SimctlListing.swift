import AppboxContainer
import AppboxCore
import Foundation

// What `simctl list` and `simctl listapps`/`appinfo` print, in simctl's shapes (docs/simctl.md):
// - `list`: the sections "== Device Types ==", "== Runtimes ==", "== Devices ==" (a "-- RUNTIME --"
//   heading, then "    NAME (UDID) (Booted) " per device) and "== Device Pairs ==";
// - `list -j`: {"devicetypes": [...], "runtimes": [...], "devices": {RUNTIME-ID: [...]},
//   "pairs": {}} with simctl's field names, two-space indentation and " : " as simctl writes it;
// - `listapps`/`appinfo`: the app's dictionary with simctl's keys, as an OpenStep plist.
// appbox has one device (the root), one runtime (appbox itself) and one device type.

struct SimctlListing {
  let session: DeviceSession
  let version: String

  static let runtimeIdentifier = "com.appbox.runtime.appbox"
  static let deviceTypeIdentifier = "com.appbox.devicetype.linux"
  var runtimeName: String { "appbox \(version)" }

  /// The text of `simctl list` for `sections`.
  func text(_ sections: [String]) -> String {
    var lines: [String] = []
    for section in sections {
      switch section {
      case "devicetypes":
        lines += ["== Device Types ==", "appbox Linux device (\(Self.deviceTypeIdentifier))"]
      case "runtimes":
        lines += ["== Runtimes ==", "\(runtimeName) (\(version) - appbox) - \(Self.runtimeIdentifier)"]
      case "devices":
        lines += [
          "== Devices ==", "-- \(runtimeName) --",
          "    \(session.identity.name) (\(session.identity.udid)) (Booted) ",
        ]
      default:
        lines += ["== Device Pairs =="]
      }
    }
    return lines.map { $0 + "\n" }.joined()
  }

  /// The JSON of `simctl list -j` for `sections`.
  func json(_ sections: [String]) -> String {
    var entries: [(String, JSONValue)] = []
    for section in sections {
      switch section {
      case "devicetypes":
        entries.append(
          (
            "devicetypes",
            .array([
              .object([
                ("productFamily", .string("appbox")), ("bundlePath", .string("")),
                ("identifier", .string(Self.deviceTypeIdentifier)), ("name", .string("appbox Linux device")),
              ])
            ])
          ))
      case "runtimes":
        entries.append(
          (
            "runtimes",
            .array([
              .object([
                ("bundlePath", .string("")), ("buildversion", .string("appbox")),
                ("platform", .string("appbox")),
                ("runtimeRoot", .string("")), ("identifier", .string(Self.runtimeIdentifier)),
                ("version", .string(version)), ("isInternal", .bool(false)), ("isAvailable", .bool(true)),
                ("name", .string(runtimeName)), ("supportedDeviceTypes", .array([])),
              ])
            ])
          ))
      case "devices":
        let device: JSONValue = .object([
          ("dataPath", .string(session.root.path)), ("dataPathSize", .int(0)),
          ("logPath", .string(session.root.stateDirectory + "/logs")),
          ("udid", .string(session.identity.udid)),
          ("isAvailable", .bool(true)), ("deviceTypeIdentifier", .string(Self.deviceTypeIdentifier)),
          ("state", .string("Booted")), ("name", .string(session.identity.name)),
        ])
        entries.append(("devices", .object([(Self.runtimeIdentifier, .array([device]))])))
      default:
        entries.append(("pairs", .object([])))
      }
    }
    return Self.pretty(.object(entries), level: 0) + "\n"
  }

  /// JSON as simctl prints it (NSJSONSerialization's pretty printing): two spaces per level,
  /// " : " between a key and its value.
  static func pretty(_ value: JSONValue, level: Int) -> String {
    let indent = String(repeating: "  ", count: level + 1)
    let closing = String(repeating: "  ", count: level)
    switch value {
    case .object(let entries):
      guard !entries.isEmpty else { return "{\n\n\(closing)}" }
      return "{\n"
        + entries.map {
          indent + JSONValue.string($0.0).serialized() + " : " + pretty($0.1, level: level + 1)
        }
        .joined(separator: ",\n") + "\n\(closing)}"
    case .array(let items):
      guard !items.isEmpty else { return "[\n\n\(closing)]" }
      return "[\n" + items.map { indent + pretty($0, level: level + 1) }.joined(separator: ",\n")
        + "\n\(closing)]"
    default:
      return value.serialized()
    }
  }

  /// The dictionary simctl's `appinfo` prints for `app` (and `listapps` for each app).
  static func appInfo(_ app: AppRecord, _ session: DeviceSession) throws -> OpenStepValue {
    let home = session.home(of: app)
    func url(_ path: String) -> OpenStepValue {
      .string("file://" + (path.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? path) + "/")
    }
    var groups: [String: OpenStepValue] = [:]
    for group in try session.groups(of: app) {
      groups[group.identifier] = url(session.root.groupContainer(group.containerID))
    }
    var info: [String: OpenStepValue] = [
      "ApplicationType": .string("User"), "Bundle": url(home.bundlePath), "BundleContainer": url(home.path),
      "CFBundleDisplayName": .string(app.displayName), "CFBundleExecutable": .string(app.executable),
      "CFBundleIdentifier": .string(app.bundleIdentifier), "CFBundleName": .string(app.bundleName),
      "CFBundleVersion": .string(app.version), "DataContainer": url(home.path),
      "GroupContainers": .dictionary(groups),
      "Path": .string(home.bundlePath), "SBAppTags": .array([]),
    ]
    if let short = app.shortVersion { info["CFBundleShortVersionString"] = .string(short) }
    return .dictionary(info)
  }
}
