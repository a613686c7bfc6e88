import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// The group Notes and Journal (team ABCDE12345) share in the fixtures.
let sharedGroup = "group.com.example.shared"

extension Device {
  /// The container of `group` as `app` sees it through `appbox path` ("" when refused).
  func groupContainer(_ app: String = "com.example.notes", _ group: String = sharedGroup) throws -> String {
    let result = try run("path", app, group)
    return result.status == 0 ? result.out.trimmingCharacters(in: .newlines) : ""
  }

  /// `list --groups --json`, by group identifier.
  func groups() throws -> [String: [String: Any]] {
    let list = try json("list", "--groups") as? [[String: Any]] ?? []
    return Dictionary(uniqueKeysWithValues: list.map { ($0["group"] as? String ?? "", $0) })
  }

  /// Names in Shared/AppGroup (containers and any debris).
  func appGroupEntries() -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: root + "/Shared/AppGroup")) ?? []).sorted()
  }

  /// A copy of Notes 1.0 as another app: `identifier`, `version`, of `team`, listing `groups`
  /// (raw plist XML for the entitlement's value, or nil for none). Returns the bundle's path.
  func makeBundle(
    identifier: String, team: String = "ABCDE12345", version: String = "1.0", groupsXML: String?
  ) throws -> String {
    let directory = dir.url("bundle-\(UUID().uuidString)")
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    let bundle = directory + "/Notes.app"
    try copyTree(fixturePath("bundles/Notes-1.0/Notes.app"), to: bundle)
    let infoPath = bundle + "/Info.plist"
    let info = try String(contentsOfFile: infoPath, encoding: .utf8)
      .replacingOccurrences(of: "<string>com.example.notes</string>", with: "<string>\(identifier)</string>")
      .replacingOccurrences(of: "<string>1.0</string>", with: "<string>\(version)</string>")
    try info.write(toFile: infoPath, atomically: false, encoding: .utf8)
    let groups = groupsXML.map { "<key>com.apple.security.application-groups</key>\($0)" } ?? ""
    let entitlements = """
      <?xml version="1.0" encoding="UTF-8"?>
      <plist version="1.0"><dict>
      <key>application-identifier</key><string>\(team).\(identifier)</string>
      <key>com.apple.developer.team-identifier</key><string>\(team)</string>
      \(groups)
      </dict></plist>
      """
    try entitlements.write(
      toFile: bundle + "/archived-expanded-entitlements.xcent", atomically: false, encoding: .utf8)
    return bundle
  }
}

/// `<array><string>…</string>…</array>`.
func groupsXML(_ groups: String...) -> String {
  "<array>" + groups.map { "<string>\($0)</string>" }.joined() + "</array>"
}

/// The owner uid of `path` (not following a symlink).
func owner(_ path: String) -> uid_t? {
  var st = stat()
  return lstat(path, &st) == 0 ? st.st_uid : nil
}

/// Every path below `directory` (relative), with its owner uid.
func owners(below directory: String) -> [String: uid_t] {
  var result: [String: uid_t] = [:]
  let enumerator = FileManager.default.enumerator(atPath: directory)
  while let relative = enumerator?.nextObject() as? String {
    result[relative] = owner(directory + "/" + relative)
  }
  return result
}

/// A script for a confined app: `$G` is its first group container.
func inGroup(_ script: String) -> String {
  "G=\"${APPBOX_APP_GROUP_CONTAINERS#*=}\"; G=\"${G%%:*}\"; " + script
}

/// A JSON group result (`[{"group", "snapshot"}]`, docs/json.md) as snapshot ids by group.
func groupSnapshots(_ value: Any?) -> [String: String] {
  var result: [String: String] = [:]
  for entry in value as? [[String: Any]] ?? [] {
    if let group = entry["group"] as? String, let snapshot = entry["snapshot"] as? String {
      result[group] = snapshot
    }
  }
  return result
}
