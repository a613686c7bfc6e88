import AppboxCore
import AppboxPlist
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// The keychain broker's end-to-end tests drive confined apps: shell scripts calling
/// `appbox-secitem`, and the C probe (`Tests/SecItemProbe`, built as `appbox-secitem-probe`)
/// installed as a bundle's executable.
enum SecItemApps {
  static let notes = "com.example.notes"
  static let journal = "com.example.journal"
  static let other = "org.other.app"
  static let shared = "ABCDE12345.shared"

  /// Writes a bundle whose executable is the probe, for `identifier` of `team` with the
  /// keychain groups `groups` (each prefixed by the team), under `directory`; returns its path.
  static func probeBundle(
    in directory: TemporaryDirectory, identifier: String, team: String, groups: [String]
  ) throws -> String {
    let bundle = "bundles/\(identifier)/Probe.app"
    try directory.write(
      bundle + "/Info.plist",
      String(
        decoding: PropertyList.dictionary([
          "CFBundleIdentifier": .string(identifier), "CFBundleExecutable": .string("probe"),
          "CFBundleVersion": .string("1.0"), "CFBundleName": .string("Probe"),
        ]).xmlData(), as: UTF8.self))
    try directory.write(
      bundle + "/archived-expanded-entitlements.xcent",
      String(
        decoding: PropertyList.dictionary([
          "application-identifier": .string(team + "." + identifier),
          "com.apple.developer.team-identifier": .string(team),
          "keychain-access-groups": .array(groups.map { .string(team + "." + $0) }),
        ]).xmlData(), as: UTF8.self))
    let binary = try Data(contentsOf: URL(fileURLWithPath: productsDirectory + "/appbox-secitem-probe"))
    try directory.write(bundle + "/probe", bytes: Array(binary), mode: 0o755)
    for path in ["bundles", "bundles/\(identifier)", bundle] { chmod(directory.url(path), 0o755) }
    return directory.url(bundle)
  }
}

extension Device {
  /// Installs a probe app (see `SecItemApps.probeBundle`).
  @discardableResult
  func installProbe(_ identifier: String, team: String = "ABCDE12345", groups: [String] = ["shared"]) throws
    -> String
  {
    try install(path: SecItemApps.probeBundle(in: dir, identifier: identifier, team: team, groups: groups))
  }

  /// Launches a probe app with `arguments`.
  func probe(_ identifier: String, _ arguments: String...) throws -> ProcessResult {
    try appbox(["launch", identifier, "--"] + arguments, root: root)
  }
}

/// The probe's "<label> ok" / "<label> FAIL why" lines.
struct ProbeReport {
  let lines: [String]

  init(_ result: ProcessResult) { lines = result.out.split(separator: "\n").map(String.init) }

  var failures: [String] { lines.filter { $0.contains(" FAIL") } }
  func passed(_ label: String) -> Bool { lines.contains(label + " ok") }
  /// The rest of the line that starts with `prefix `.
  func value(_ prefix: String) -> String? {
    lines.first { $0.hasPrefix(prefix + " ") }.map { String($0.dropFirst(prefix.count + 1)) }
  }
}
