// export-backup: apps' data (or one snapshot's) as an iOS device backup folder.
//
// Algorithm:
// 1. Refuse a destination that exists (73); make a staging folder beside it (0700).
// 2. Encrypted: a new keybag for the password (DeviceBackupKeybag.make: random class keys
//    1-11 wrapped under PBKDF2-SHA256 then PBKDF2-SHA1 of it, iOS's rounds unless told
//    otherwise). Plain: a keybag of the same shape whose class keys nothing can unwrap (as a
//    plain backup's are, wrapped with the device), because readers parse one either way.
// 3. Each source becomes a domain (DeviceBackupWriter): an app's current Documents and Library
//    (`AppDomain-<bundle id>`, the device unlocked for its protected files), an app group's
//    container (`AppDomainGroup-<id>`), or a snapshot's data, built first in a temporary folder
//    of the device (verified as a restore verifies it) with its recorded protection classes.
// 4. Manifest.db is built in memory and written whole (encrypted under a random ManifestKey
//    wrapped with class 3's key); then Manifest.plist, Info.plist and Status.plist.
// 5. The file system is synced and the staging folder renamed to the destination (never over
//    an existing one), and the parent synced.
// Invariants: the destination is absent or complete; a failure removes the staging folder;
// the snapshot's temporary folder lives under the device root and is removed either way.

import AppboxArchive
import AppboxContainer
import AppboxCore
import AppboxCrypto
import AppboxPlist
import AppboxRepository
import AppboxStore
import Foundation
import Glibc

/// How to write a device backup.
public struct DeviceBackupExportOptions: Sendable {
  /// Encrypt with this password (nil: a plain backup).
  public var password: [UInt8]?
  /// The PBKDF2 rounds (SHA-256, then SHA-1) the keybag asks of readers: iOS's by default.
  public var rounds: (first: UInt32, second: UInt32)

  public init(
    password: [UInt8]? = nil, rounds: (first: UInt32, second: UInt32) = DeviceBackupExportOptions.deviceRounds
  ) {
    self.password = password
    self.rounds = rounds
  }

  public static let deviceRounds = DeviceBackupKeybag.deviceRounds
}

/// What export-backup wrote.
public struct DeviceBackupExportReport: Sendable {
  public var path: String
  public var isEncrypted: Bool
  public var domains: [DeviceBackupExportedDomain]
  public var warnings: [String]
}

/// What goes into an exported backup.
public enum DeviceBackupSource: Sendable {
  /// An app's current data.
  case app(AppRecord)
  /// An app group's current container.
  case group(GroupRecord)
}

extension DeviceSession {
  /// Writes `sources`' current data as a device backup folder at `path`.
  public func exportDeviceBackup(
    _ sources: [DeviceBackupSource], to path: String, options: DeviceBackupExportOptions = .init(),
    observer: EngineObserver = SilentObserver()
  ) throws -> DeviceBackupExportReport {
    for case .app(let app) in sources { try requireProtectedDataAvailable(of: app, for: "export") }
    let classes = try protectionClassesByKey()
    let apps: [(String, String)] = sources.compactMap {
      if case .app(let app) = $0 { return (app.bundleIdentifier, app.version) } else { return nil }
    }
    return try writeDeviceBackup(to: path, options: options, apps: apps, observer: observer) { writer in
      try sources.map { source in
        switch source {
        case .app(let app):
          let home = try OwnedFileDescriptor.open(
            self.home(of: app).path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
          let rules = ScanRules(
            bundleDirectoryName: app.bundleDirectoryName, includeBundle: false,
            onlyTopLevel: [Array("Documents".utf8), Array("Library".utf8)])
          return try writer.addDomain(
            DeviceBackupDomain.app(app.bundleIdentifier).name, home: home.borrowed, rules: rules,
            classes: classes,
            observer: observer)
        case .group(let group):
          let subject = BackupSubject.group(group, in: self)
          let home = try OwnedFileDescriptor.open(subject.path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
          return try writer.addDomain(
            DeviceBackupDomain.group(group.identifier).name, home: home.borrowed,
            rules: subject.scanRules(includeBundle: false), classes: classes, observer: observer)
        }
      }
    }
  }

  /// Writes snapshot `snapshot` of `repository` (an app's or a group's data) as a device
  /// backup folder at `path`.
  public func exportDeviceBackup(
    snapshot: Snapshot, from repository: Repository, to path: String,
    options: DeviceBackupExportOptions = .init(),
    observer: EngineObserver = SilentObserver()
  ) throws -> DeviceBackupExportReport {
    let lock = try repository.lockRepository(exclusive: false)
    defer { withExtendedLifetime(lock) {} }
    let isGroup = snapshot.app.hasPrefix("group.")
    let apps = isGroup ? [] : [(snapshot.app, snapshot.version)]
    let recorded = try repository.recordedProtectionClasses(of: snapshot)
    let temporary = root.stateDirectory + "/device-backup-" + UUID().uuidString
    guard mkdir(temporary, 0o700) == 0 else { throw SystemError("create directory", path: temporary) }
    defer { try? FileTree.remove(atPath: temporary) }
    let data = try OwnedFileDescriptor.open(temporary, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    _ = try repository.materialize(snapshot, part: .data, into: data.borrowed, observer: observer)
    return try writeDeviceBackup(to: path, options: options, apps: apps, observer: observer) { writer in
      var rules = ScanRules(
        bundleDirectoryName: snapshot.bundleDirectoryName,
        includeBundle: snapshot.bundleDirectoryName.isEmpty,
        onlyTopLevel: isGroup ? nil : [Array("Documents".utf8), Array("Library".utf8)])
      rules.skipsTemporaryDirectory = !isGroup
      let domain = isGroup ? DeviceBackupDomain.group(snapshot.app) : .app(snapshot.app)
      return [
        try writer.addDomain(
          domain.name, home: data.borrowed, rules: rules, classes: [:], recordedClasses: recorded,
          observer: observer)
      ]
    }
  }

  private func writeDeviceBackup(
    to path: String, options: DeviceBackupExportOptions, apps: [(String, String)], observer: EngineObserver,
    domains: (DeviceBackupWriter) throws -> [DeviceBackupExportedDomain]
  ) throws -> DeviceBackupExportReport {
    observer.engine(.started(operation: "export-backup", app: apps.first?.0))
    let (parentPath, name) = splitPath(path)
    let parent = try OwnedFileDescriptor.open(parentPath, O_RDONLY | O_DIRECTORY)
    guard try parent.borrowed.statusIfPresent(of: name) == nil else {
      throw BackupError(.cannotCreate, "'\(path)' already exists: export-backup writes a new folder")
    }
    let stagingName = "." + name + ".partial-" + UUID().uuidString.prefix(8)
    try parent.borrowed.makeDirectory(stagingName, mode: 0o700)
    do {
      let staging = try OwnedFileDescriptor(
        taking: parent.borrowed.open(stagingName, O_RDONLY | O_DIRECTORY | O_NOFOLLOW))
      let keybag: DeviceBackupKeybag
      var keys: [UInt32: [UInt8]]?
      if let password = options.password {
        (keybag, keys) = try DeviceBackupKeybag.make(password: password, rounds: options.rounds)
      } else {
        keybag = try DeviceBackupKeybag.makeUnusable()
      }
      let writer = DeviceBackupWriter(folder: staging.borrowed, classKeys: keys)
      let written = try domains(writer)
      observer.engine(.phase(.committing))
      try writeMetadata(in: staging.borrowed, rows: writer.rows, keybag: keybag, keys: keys, apps: apps)
      try staging.borrowed.syncFileSystem()
      try staging.borrowed.sync()
      try parent.borrowed.rename(stagingName, to: name, in: parent.borrowed, flags: .noReplace)
      try parent.borrowed.sync()
      for warning in writer.warnings { observer.engine(.warning(path: nil, message: warning)) }
      observer.engine(.finished(operation: "export-backup", app: apps.first?.0))
      return DeviceBackupExportReport(
        path: path, isEncrypted: keys != nil, domains: written, warnings: writer.warnings)
    } catch {
      try? FileTree.remove(atPath: parentPath + "/" + stagingName)
      if let failure = error as? SystemError, failure.errno == .exists {
        throw BackupError(.cannotCreate, "'\(path)' already exists: export-backup writes a new folder")
      }
      throw error
    }
  }

  /// Manifest.db, then the three property lists.
  private func writeMetadata(
    in folder: FileDescriptor, rows: [DeviceBackupRow], keybag: DeviceBackupKeybag, keys: [UInt32: [UInt8]]?,
    apps: [(String, String)]
  ) throws {
    let database = try Database(path: ":memory:")
    try database.execute(
      """
      CREATE TABLE Files (fileID TEXT PRIMARY KEY, domain TEXT, relativePath TEXT, flags INTEGER, file BLOB);
      CREATE INDEX FilesDomainIdx ON Files(domain);
      CREATE INDEX FilesRelativePathIdx ON Files(relativePath);
      CREATE INDEX FilesFlagsIdx ON Files(flags);
      CREATE TABLE Properties (key TEXT PRIMARY KEY, value BLOB);
      """)
    try database.inTransaction {
      let insert = try database.prepare(
        "INSERT OR REPLACE INTO Files (fileID, domain, relativePath, flags, file) VALUES (?1, ?2, ?3, ?4, ?5)"
      )
      for row in rows {
        try insert.bind(row.fileID, at: 1)
        try insert.bind(row.domain, at: 2)
        try insert.bind(String(decoding: row.relativePath, as: UTF8.self), at: 3)
        try insert.bind(row.kind.rawValue, at: 4)
        try insert.bind(row.file, at: 5)
        try insert.execute()
      }
    }
    var image = try database.serialize()
    var manifest: PropertyListDictionary = [
      "BackupKeyBag": .data(Data(keybag.encoded())), "IsEncrypted": .bool(keys != nil),
      "Version": .string("10.0"),
      "Date": .date(Date()), "SystemDomainsVersion": .string("24.0"), "WasPasscodeSet": .bool(false),
      "Lockdown": .dictionary(lockdown),
      "Applications": .dictionary(
        PropertyListDictionary(
          Dictionary(
            apps.map { identifier, version in
              (
                identifier,
                PropertyList.dictionary([
                  "CFBundleIdentifier": .string(identifier), "CFBundleVersion": .string(version),
                  "ContainerContentClass": .string("Data/Application"),
                ])
              )
            }, uniquingKeysWith: { first, _ in first }))),
    ]
    if let keys, let classKey = keys[3] {
      let manifestKey = try SecureRandom.bytes(32)
      manifest["ManifestKey"] = .data(
        Data(
          MBFileRecord.joined(protectionClass: 3, wrapped: try AESKeyWrap.wrap(manifestKey, with: classKey))))
      image = try AESCBCStream.process(image, key: manifestKey, encrypting: true)
    }
    try write("Manifest.db", image, in: folder)
    try write("Manifest.plist", [UInt8](PropertyList.dictionary(manifest).binaryData()), in: folder)
    let now = Date()
    let info: PropertyList = .dictionary([
      "Build Version": .string("appbox"), "Device Name": .string(identity.name),
      "Display Name": .string(identity.name),
      "GUID": .string(UUID().uuidString.replacingOccurrences(of: "-", with: "")),
      "Installed Applications": .array(apps.map { .string($0.0) }), "Last Backup Date": .date(now),
      "Product Type": .string("appbox"), "Product Version": .string(Self.productVersion),
      "Serial Number": .string(""),
      "Target Identifier": .string(identity.udid), "Target Type": .string("Device"),
      "Unique Identifier": .string(identity.udid.uppercased()), "iTunes Version": .string("12.13"),
    ])
    try write("Info.plist", [UInt8](info.xmlData()), in: folder)
    let status: PropertyList = .dictionary([
      "BackupState": .string("new"), "Date": .date(now), "IsFullBackup": .bool(false),
      "SnapshotState": .string("finished"), "UUID": .string(UUID().uuidString), "Version": .string("3.3"),
    ])
    try write("Status.plist", [UInt8](status.binaryData()), in: folder)
  }

  /// The iOS version the backup claims: readers take the folder layout (`XX/<fileID>`) and
  /// the two-step key derivation from it (both since iOS 10.2).
  static let productVersion = "17.0"

  private var lockdown: PropertyListDictionary {
    [
      "DeviceName": .string(identity.name), "UniqueDeviceID": .string(identity.udid),
      "ProductVersion": .string(Self.productVersion), "ProductType": .string("appbox"),
      "BuildVersion": .string("appbox"), "SerialNumber": .string(""),
    ]
  }

  private func write(_ name: String, _ bytes: [UInt8], in folder: FileDescriptor) throws {
    let fd = try folder.open(name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode: 0o600)
    defer { fd.close() }
    try fd.writeAll(bytes)
  }
}

extension DeviceBackupKeybag {
  /// A plain backup's keybag: the shape readers parse, class keys nobody can unwrap (marked
  /// as wrapped with the device, random bytes), one round each (they protect nothing).
  static func makeUnusable() throws -> DeviceBackupKeybag {
    var keybag = DeviceBackupKeybag()
    keybag.uuid = try SecureRandom.bytes(16)
    keybag.hmck = try SecureRandom.bytes(40)
    keybag.salt = try SecureRandom.bytes(20)
    keybag.iterations = 1
    keybag.passwordSalt = try SecureRandom.bytes(20)
    keybag.passwordIterations = 1
    for protectionClass in UInt32(1)...11 {
      keybag.classKeys.append(
        ClassKey(
          protectionClass: protectionClass, wrap: 1, keyType: 0, uuid: try SecureRandom.bytes(16),
          wrappedKey: try SecureRandom.bytes(40)))
    }
    return keybag
  }
}

extension Repository {
  /// The protection class each file of `snapshot`'s data was recorded with, by path.
  func recordedProtectionClasses(of snapshot: Snapshot) throws -> [[UInt8]: ProtectionClass] {
    var classes: [[UInt8]: ProtectionClass] = [:]
    var pending: [([UInt8], Digest)] = [([], snapshot.rootTree)]
    while let (path, digest) = pending.popLast() {
      for entry in try catalog.tree(digest).entries {
        let entryPath = joinPath(path, entry.name)
        if entry.type == .directory, let child = entry.digest {
          if !path.isEmpty || entry.name != Array(snapshot.bundleDirectoryName.utf8) {
            pending.append((entryPath, child))
          }
        } else if entry.type == .file {
          let recorded = splitProtectionRecord(entry.extendedAttributes).1
          if recorded != .none { classes[entryPath] = recorded }
        }
      }
    }
    return classes
  }
}
