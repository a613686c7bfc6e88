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

/// What `inspect` reports about an app.
public struct InspectReport: Sendable {
  public var app: AppRecord
  public var home: String
  public var seal: SealState
  public var locations: [LocationReport]
}

/// Counts files and bytes below a directory, skipping some top-level names; never follows
/// symlinks (a symlink counts as a file of its own length).
struct TreeMeasure {
  var files = 0
  var bytes: Int64 = 0
  var excluded = 0

  static func measure(_ path: String, skipping: Set<String> = []) -> TreeMeasure {
    var result = TreeMeasure()
    guard let top = try? FileDescriptor.open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW) else { return result }
    var stack = [(top, true)]
    while let (directory, isTop) = stack.popLast() {
      defer { directory.close() }
      guard let entries = try? directory.entries() else { continue }
      for entry in entries {
        let name = entry.nameString
        if isTop && skipping.contains(name) { continue }
        guard
          let status = try? withCName(
            entry.name,
            { cName -> FileStatus in
              var st = stat()
              guard fstatat(directory.rawValue, cName, &st, AT_SYMLINK_NOFOLLOW) == 0 else {
                throw SystemError("stat")
              }
              return FileStatus(st)
            })
        else { continue }
        if status.type != .symlink,
          directory.entryHasExtendedAttribute(entry.name, excludeFromBackupAttribute)
        {
          result.excluded += 1
        }
        if status.type == .directory {
          if let child = try? directory.open(rawName: entry.name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW) {
            stack.append((child, false))
          }
        } else {
          result.files += 1
          result.bytes += status.size
        }
      }
    }
    return result
  }
}

extension DeviceSession {
  /// Inspects an app: its home, seal, and each standard location with files, bytes and
  /// backup policy.
  public func inspect(_ app: AppRecord) throws -> InspectReport {
    let home = self.home(of: app)
    let seal = try Seal.verify(bundleAt: home.bundlePath, expectedDigest: app.seal)
    let bundle = TreeMeasure.measure(home.bundlePath)
    let documents = TreeMeasure.measure(home.path(of: .documents))
    let library = TreeMeasure.measure(home.path(of: .library), skipping: ["Caches"])
    let preferences = TreeMeasure.measure(home.path(of: .preferences))
    let caches = TreeMeasure.measure(home.path(of: .caches))
    let tmp = TreeMeasure.measure(home.path(of: .tmp))
    func report(_ name: String, _ measure: TreeMeasure, _ backedUp: Bool, _ policy: String) -> LocationReport
    {
      LocationReport(
        name: name, files: measure.files, bytes: measure.bytes, backedUp: backedUp, policy: policy,
        excludedItems: measure.excluded)
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
      ])
  }
}
