import AppboxCore
import Foundation
import Glibc

/// What `inspect` reports about one location of a home.
public struct LocationReport: Sendable {
  public var name: String
  public var files: Int
  public var bytes: Int64
  public var backedUp: Bool
  /// Why the location is or is not backed up.
  public var policy: String
  /// Files and folders inside carrying the exclude-from-backup attribute.
  public var excludedItems: Int
}

/// What `inspect` reports about one of the app's groups: its container and how much it holds.
public struct GroupUsage: Sendable {
  public var group: GroupRecord
  public var path: String
  /// Everything in the container.
  public var files: Int
  public var bytes: Int64
  /// What a backup of the group stores (all but Library/Caches).
  public var backedUpBytes: Int64
}

/// What `inspect` reports about an app.
public struct InspectReport: Sendable {
  public var app: AppRecord
  public var home: String
  public var seal: SealState
  public var locations: [LocationReport]
  /// The app groups it is a member of.
  public var groups: [GroupUsage] = []
}

extension DeviceSession {
  /// Inspects an app: its home, seal, and each standard location with files, bytes and
  /// backup policy.
  public func inspect(_ app: AppRecord) throws -> InspectReport {
    let home = self.home(of: app)
    let seal = try Seal.verify(
      bundleAt: home.bundlePath, expectedDigest: app.seal, expectedModes: app.bundleModes)
    let bundle = TreeMeasure.measure(home.bundlePath, countExcluded: true)
    let documents = TreeMeasure.measure(home.path(of: .documents), countExcluded: true)
    let library = TreeMeasure.measure(home.path(of: .library), skipping: ["Caches"], countExcluded: true)
    let preferences = TreeMeasure.measure(home.path(of: .preferences), countExcluded: true)
    let caches = TreeMeasure.measure(home.path(of: .caches), countExcluded: true)
    let tmp = TreeMeasure.measure(home.path(of: .tmp), countExcluded: true)
    func report(_ name: String, _ measure: TreeMeasure, _ backedUp: Bool, _ policy: String) -> LocationReport
    {
      LocationReport(
        name: name, files: measure.files, bytes: measure.bytes, backedUp: backedUp, policy: policy,
        excludedItems: measure.excluded)
    }
    let groups = try self.groups(of: app).map { group in
      let path = root.groupContainer(group.containerID)
      let all = TreeMeasure.measure(path)
      let caches = TreeMeasure.measure(path + "/Library/Caches")
      return GroupUsage(
        group: group, path: path, files: all.files, bytes: all.bytes, backedUpBytes: all.bytes - caches.bytes)
    }
    return InspectReport(
      app: app, home: home.path, seal: seal,
      locations: [
        report(
          app.bundleDirectoryName, bundle, true,
          "included: stored on the first backup and again only when it changes (after an update)"),
        report("Documents", documents, true, "included: user documents and app data are backed up"),
        report("Library", library, true, "included: backed up, except Library/Caches"),
        report("Library/Preferences", preferences, true, "included: preferences are backed up"),
        report("Library/Caches", caches, false, "excluded: Library/Caches is never backed up"),
        report("tmp", tmp, false, "excluded: tmp is never backed up"),
      ], groups: groups)
  }
}
