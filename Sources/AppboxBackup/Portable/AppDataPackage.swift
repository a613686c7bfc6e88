// `export --format xcappdata`: an app's data as an Xcode app-data package, the directory
// `simctl install_app_data` and Xcode's "Download Container" use:
//
//   Name.xcappdata/
//     AppDataInfo.plist          which app and device it came from
//     AppData/Documents/ ...     as a backup stores them
//     AppData/Library/ ...       (Library/Caches empty)
//     AppData/tmp/               empty
//
// Algorithm: export the data as a tar (Exporter: the backup's scan and rules, holes kept) into
// a staging directory beside the destination, then build `AppData/` from that tar with the
// import builder (the same descriptor-only writer, two passes, modes, nanosecond times,
// `user.*` attributes, symlinks as they are, hard links kept, holes kept), delete the tar, add
// `tmp/` and the info plist, make it durable with syncfs, and move it into place: a rename, or
// an exchange with an existing package followed by removing the old one. The destination is
// therefore either the old package or the complete new one; an existing path that is not a
// package is never replaced. `import` reads such a package back (ImportSource), so a round trip
// gives the same Documents and Library, byte for byte.

import AppboxArchive
import AppboxContainer
import AppboxCore
import AppboxPlist
import AppboxRepository
import Foundation
import Glibc

extension DeviceSession {
  /// Writes `app`'s data as an `.xcappdata` package (a directory) at `path`.
  public func exportAppData(of app: AppRecord, to path: String, observer: EngineObserver = SilentObserver())
    throws -> ExportReport
  {
    let (parentPath, name) = splitPath(path)
    let parent = try FileDescriptor.open(parentPath, O_RDONLY | O_DIRECTORY)
    defer { parent.close() }
    let replacing = try parent.status(ofRawName: Array(name.utf8)) != nil
    if replacing { try Self.requirePackage(named: name, in: parent, path: path) }
    let staging = ".\(name).tmp-\(UInt32.random(in: 0...UInt32.max))"
    try parent.makeDirectory(staging, mode: 0o755)
    do {
      let package = try parent.open(staging, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
      defer { package.close() }
      let tarName = ".appbox-export.tar"
      let tarPath = parentPath + "/" + staging + "/" + tarName
      let report = try exportData(of: app, to: tarPath, observer: observer)
      try package.makeDirectory("AppData", mode: 0o755)
      let appData = try package.open("AppData", O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
      defer { appData.close() }
      let source = ImportSource.archive(path: tarPath)
      let everything = ImportLimits(maxEntries: .max, maxBytes: .max)
      let plan = try ImportPlan.make(source, limits: everything, room: .max)
      var build = ImportBuild(staging: appData, limits: everything, room: .max, observer: SilentObserver())
      try build.run(source, plan: plan)
      try package.remove(tarName)
      try appData.makeDirectory("tmp", mode: 0o755)
      try AtomicFile.write(try infoPropertyList(for: app).xmlData(), to: "AppDataInfo.plist", in: package)
      try package.syncFileSystem()
      if replacing {
        try parent.rename(staging, to: name, flags: .exchange)
        try parent.sync()
        try FileTree.remove(staging, in: parent)
      } else {
        try parent.rename(staging, to: name, flags: .noReplace)
      }
      try parent.sync()
      return report
    } catch {
      try? FileTree.remove(staging, in: parent)
      throw error
    }
  }

  /// What `AppDataInfo.plist` says: the app and the device the data came from.
  private func infoPropertyList(for app: AppRecord) throws -> PropertyList {
    var info: [String: PropertyList] = [
      "CFBundleIdentifier": .string(app.bundleIdentifier), "CFBundleName": .string(app.bundleName),
      "CFBundleVersion": .string(app.version),
    ]
    if let short = app.shortVersion { info["CFBundleShortVersionString"] = .string(short) }
    if let device = try root.identityIfPresent() {
      info["DeviceIdentifier"] = .string(device.udid)
      info["DeviceName"] = .string(device.name)
    }
    return .dictionary(info)
  }

  /// Refuses to replace anything but a directory that looks like an app-data package.
  private static func requirePackage(named name: String, in parent: FileDescriptor, path: String) throws {
    let status = try parent.status(of: name)
    var isPackage = false
    if status.type == .directory {
      let existing = try parent.open(name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
      defer { existing.close() }
      let names = try existing.entries().map(\.nameString)
      isPackage = names.isEmpty || names.contains("AppData") || names.contains("AppDataInfo.plist")
    }
    guard isPackage else {
      throw BackupError(.cannotCreate, "'\(path)' exists and is not an .xcappdata package; not replacing it")
    }
  }
}
