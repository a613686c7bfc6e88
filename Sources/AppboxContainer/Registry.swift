import AppboxCore
import AppboxStore
import Foundation

/// An installed app as the registry records it.
public struct AppRecord: Sendable, Equatable {
  public var bundleIdentifier: String
  public var containerID: String
  /// The bundle directory's name without ".app" ("Notes" for Notes.app).
  public var bundleName: String
  public var displayName: String
  public var executable: String
  public var version: String
  public var shortVersion: String?
  public var teamIdentifier: String?
  public var applicationIdentifier: String?
  /// Keychain access groups from the entitlements, in order.
  public var keychainAccessGroups: [String]
  public var fileSharingEnabled: Bool
  /// SHA-256 (hex) of the bundle's `_CodeSignature/CodeResources`: the seal's identity.
  public var seal: String
  public var installedAt: Date
  public var updatedAt: Date?
  /// The unprivileged uid (and gid) the app runs as (see AppUser.swift).
  public var uid: UInt32
  /// Every bundle entry's mode as sealed, "MODE PATH" lines (see `BundleModes`); nil for a
  /// seal made before modes were sealed, until the next launch records them.
  public var bundleModes: String?
  /// When the bundle was offloaded (Lifecycle/Offload.swift): the home keeps the data, the
  /// bundle is gone until the same bundle identifier is installed again. nil: installed.
  public var offloadedAt: Date? = nil
  /// The URL schemes the bundle claims (`CFBundleURLTypes`); nil for an app installed before
  /// they were recorded, whose bundle is read when a URL is opened (Lifecycle/URLSchemes.swift).
  public var urlSchemes: [String]? = nil

  public var bundleDirectoryName: String { bundleName + ".app" }
  /// Whether the bundle is offloaded (the data stays; launch and run exit 69).
  public var isOffloaded: Bool { offloadedAt != nil }
}

/// `registry.db`: installed apps and their history. SQLite in WAL mode, schema versioned
/// with `user_version`; every change is one transaction.
public final class Registry {
  public let database: Database
  let path: String
  /// Opened read only (a session that changes nothing).
  public let isReadOnly: Bool

  static let migrations = [
    """
    CREATE TABLE apps(
      bundle_id TEXT PRIMARY KEY NOT NULL,
      container_id TEXT NOT NULL UNIQUE,
      bundle_name TEXT NOT NULL,
      display_name TEXT NOT NULL,
      executable TEXT NOT NULL,
      version TEXT NOT NULL,
      short_version TEXT,
      team_id TEXT,
      application_id TEXT,
      access_groups TEXT NOT NULL,
      file_sharing INTEGER NOT NULL,
      seal TEXT NOT NULL,
      installed_at REAL NOT NULL,
      updated_at REAL
    );
    CREATE TABLE history(
      id INTEGER PRIMARY KEY,
      bundle_id TEXT NOT NULL,
      event TEXT NOT NULL,
      container_id TEXT,
      previous_container_id TEXT,
      version TEXT,
      previous_version TEXT,
      snapshot TEXT,
      time REAL NOT NULL
    );
    CREATE INDEX history_by_app ON history(bundle_id, id);
    """,
    // Sandbox v2: each app's own uid, and the bundle's modes in the seal. Apps installed
    // before get distinct uids from the app range: a random start, then a multiplicative
    // hash of the row id (odd, so one-to-one modulo 2^24). `app_users` keeps an app's uid
    // for its bundle identifier after an uninstall, so a reinstall gets it back.
    """
    ALTER TABLE apps ADD COLUMN uid INTEGER;
    ALTER TABLE apps ADD COLUMN bundle_modes TEXT;
    CREATE TEMP TABLE uid_seed AS SELECT abs(random()) % 16777216 AS value;
    UPDATE apps SET uid = 1879048192 + ((rowid * 2654435761 + (SELECT value FROM uid_seed)) % 16777216);
    DROP TABLE uid_seed;
    CREATE TABLE app_users(bundle_id TEXT PRIMARY KEY NOT NULL, uid INTEGER NOT NULL UNIQUE);
    INSERT INTO app_users(bundle_id, uid) SELECT bundle_id, uid FROM apps;
    """,
    // App groups (see AppGroups/GroupRegistry.swift): the containers, their members (an
    // update that drops a group leaves a former member, `active` 0, which keeps the group),
    // each group's uid (kept after the group goes, as app_users keeps apps'), the snapshots
    // an update took of the app's groups, and the apps installed before, whose bundles'
    // groups the next command gives them (GroupAdoption.swift).
    """
    CREATE TABLE app_groups(
      group_id TEXT PRIMARY KEY NOT NULL,
      container_id TEXT NOT NULL UNIQUE,
      team_id TEXT NOT NULL,
      uid INTEGER NOT NULL,
      created_at REAL NOT NULL
    );
    CREATE TABLE group_members(
      group_id TEXT NOT NULL,
      bundle_id TEXT NOT NULL,
      active INTEGER NOT NULL,
      PRIMARY KEY(group_id, bundle_id)
    );
    CREATE INDEX group_members_by_app ON group_members(bundle_id);
    CREATE TABLE group_users(group_id TEXT PRIMARY KEY NOT NULL, uid INTEGER NOT NULL UNIQUE);
    ALTER TABLE history ADD COLUMN group_snapshots TEXT;
    CREATE TABLE group_adoption(bundle_id TEXT PRIMARY KEY NOT NULL);
    INSERT INTO group_adoption(bundle_id) SELECT bundle_id FROM apps;
    """,
    // The lifecycle (Lifecycle/): an offloaded bundle's time, and the URL schemes a bundle
    // claims (NULL for apps installed before: their bundles are read when a URL is opened).
    """
    ALTER TABLE apps ADD COLUMN offloaded_at REAL;
    ALTER TABLE apps ADD COLUMN url_schemes TEXT;
    """,
  ]

  /// Opens the device's registry. `readOnly` (commands that change nothing): opened read
  /// only, so that it reads on a full file system too; a registry of an older schema is
  /// opened for writing after all, to be migrated.
  public init(root: DeviceRoot, readOnly: Bool = false) throws {
    path = root.registryFile
    if readOnly, FileManager.default.fileExists(atPath: path) {
      let database = try Database(path: path, mode: .readOnly)
      if try database.userVersion() == Self.migrations.count {
        self.database = database
        isReadOnly = true
        return
      }
    }
    isReadOnly = false
    database = try Database(path: path)
    try database.setJournalModeWAL()
    try database.migrate(Self.migrations)
  }

  static let columns = """
    bundle_id, container_id, bundle_name, display_name, executable, version, short_version, team_id,
    application_id, access_groups, file_sharing, seal, installed_at, updated_at, uid, bundle_modes,
    offloaded_at, url_schemes
    """

  private func record(_ row: Statement) -> AppRecord {
    AppRecord(
      bundleIdentifier: row.text(0) ?? "", containerID: row.text(1) ?? "", bundleName: row.text(2) ?? "",
      displayName: row.text(3) ?? "", executable: row.text(4) ?? "", version: row.text(5) ?? "",
      shortVersion: row.text(6), teamIdentifier: row.text(7), applicationIdentifier: row.text(8),
      keychainAccessGroups: (row.text(9) ?? "").split(separator: "\n").map(String.init),
      fileSharingEnabled: row.int64(10) != 0, seal: row.text(11) ?? "",
      installedAt: Date(timeIntervalSince1970: row.double(12)),
      updatedAt: row.isNull(13) ? nil : Date(timeIntervalSince1970: row.double(13)),
      uid: UInt32(truncatingIfNeeded: row.int64(14)), bundleModes: row.text(15),
      offloadedAt: row.isNull(16) ? nil : Date(timeIntervalSince1970: row.double(16)),
      urlSchemes: row.isNull(17) ? nil : (row.text(17) ?? "").split(separator: "\n").map(String.init))
  }

  /// Every installed app, by bundle identifier.
  public func apps() throws -> [AppRecord] {
    try database.prepare("SELECT \(Self.columns) FROM apps ORDER BY bundle_id").rows(record)
  }

  /// The app whose bundle identifier or container id is `name`, or nil.
  public func appIfPresent(_ name: String) throws -> AppRecord? {
    let statement = try database.prepare(
      "SELECT \(Self.columns) FROM apps WHERE bundle_id = ?1 OR container_id = ?1 COLLATE NOCASE")
    try statement.bind([.text(name)])
    return try statement.rows(record).first
  }

  /// The app whose bundle identifier or container id is `name`; not found is exit 66.
  public func app(_ name: String) throws -> AppRecord {
    guard let app = try appIfPresent(name) else {
      throw ContainerError(
        .appNotFound, "No installed app '\(name)' (give a bundle identifier or container id)")
    }
    return app
  }

  private func values(_ app: AppRecord) -> [SQLValue] {
    [
      .text(app.bundleIdentifier), .text(app.containerID), .text(app.bundleName), .text(app.displayName),
      .text(app.executable), .text(app.version), app.shortVersion.map(SQLValue.text) ?? .null,
      app.teamIdentifier.map(SQLValue.text) ?? .null, app.applicationIdentifier.map(SQLValue.text) ?? .null,
      .text(app.keychainAccessGroups.joined(separator: "\n")), .integer(app.fileSharingEnabled ? 1 : 0),
      .text(app.seal), .real(app.installedAt.timeIntervalSince1970),
      app.updatedAt.map { .real($0.timeIntervalSince1970) } ?? .null, .integer(Int64(app.uid)),
      app.bundleModes.map(SQLValue.text) ?? .null,
      app.offloadedAt.map { .real($0.timeIntervalSince1970) } ?? .null,
      app.urlSchemes.map { .text($0.joined(separator: "\n")) } ?? .null,
    ]
  }

  /// Adds an app (inside the caller's transaction, if any).
  public func insert(_ app: AppRecord) throws {
    try database.execute(
      "INSERT OR IGNORE INTO app_users(bundle_id, uid) VALUES (?1, ?2)", .text(app.bundleIdentifier),
      .integer(Int64(app.uid)))
    let statement = try database.prepare(
      "INSERT INTO apps(\(Self.columns)) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)"
    )
    try statement.bind(values(app))
    _ = try statement.step()
  }

  /// Replaces the row of `app.bundleIdentifier` (an update moves it to a new container).
  public func replace(_ app: AppRecord) throws {
    try database.execute("DELETE FROM apps WHERE bundle_id = ?1", .text(app.bundleIdentifier))
    try insert(app)
  }

  /// The uid `bundleIdentifier` had or has on this device, or a new one from the app range
  /// that no app here ever had (recorded by `insert`).
  public func uid(for bundleIdentifier: String) throws -> UInt32 {
    let statement = try database.prepare("SELECT uid FROM app_users WHERE bundle_id = ?1")
    try statement.bind([.text(bundleIdentifier)])
    if let known = try statement.rows({ $0.int64(0) }).first { return UInt32(truncatingIfNeeded: known) }
    return try unusedUID()
  }

  /// A uid from the app range that no app or app group of this device ever had.
  func unusedUID() throws -> UInt32 {
    let used = try database.prepare("SELECT uid FROM app_users UNION SELECT uid FROM group_users").rows {
      UInt32(truncatingIfNeeded: $0.int64(0))
    }
    return AppUser.randomUID(avoiding: Set(used))
  }

  /// Records the seal's modes of an app whose seal had none (the lazy migration of seals
  /// made before modes were sealed). Does nothing if the app moved to another container.
  public func recordBundleModes(_ modes: String, containerID: String) throws {
    try database.execute(
      "UPDATE apps SET bundle_modes = ?1 WHERE container_id = ?2 AND bundle_modes IS NULL", .text(modes),
      .text(containerID))
  }

  /// Removes the app's row, its group memberships, and the rows of groups left with no
  /// member (whose containers the caller removes: see AppGroups/GroupLifecycle.swift).
  public func remove(bundleIdentifier: String) throws {
    try database.execute("DELETE FROM apps WHERE bundle_id = ?1", .text(bundleIdentifier))
    try removeMemberships(of: bundleIdentifier)
  }

  /// One line of the app's history.
  public struct Event: Sendable, Equatable {
    public var bundleIdentifier: String
    public var event: String
    public var containerID: String?
    public var previousContainerID: String?
    public var version: String?
    public var previousVersion: String?
    public var snapshot: String?
    public var time: Date
    /// The snapshots an update took of the app's groups, by group identifier.
    public var groupSnapshots: [String: String] = [:]

    public init(
      bundleIdentifier: String, event: String, containerID: String? = nil, previousContainerID: String? = nil,
      version: String? = nil, previousVersion: String? = nil, snapshot: String? = nil, time: Date = Date(),
      groupSnapshots: [String: String] = [:]
    ) {
      self.groupSnapshots = groupSnapshots
      self.bundleIdentifier = bundleIdentifier
      self.event = event
      self.containerID = containerID
      self.previousContainerID = previousContainerID
      self.version = version
      self.previousVersion = previousVersion
      self.snapshot = snapshot
      self.time = time
    }
  }

  public func record(_ event: Event) throws {
    let statement = try database.prepare(
      """
      INSERT INTO history(bundle_id, event, container_id, previous_container_id, version, previous_version,
        snapshot, time, group_snapshots) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
      """)
    try statement.bind([
      .text(event.bundleIdentifier), .text(event.event), event.containerID.map(SQLValue.text) ?? .null,
      event.previousContainerID.map(SQLValue.text) ?? .null, event.version.map(SQLValue.text) ?? .null,
      event.previousVersion.map(SQLValue.text) ?? .null, event.snapshot.map(SQLValue.text) ?? .null,
      .real(event.time.timeIntervalSince1970),
      event.groupSnapshots.isEmpty
        ? .null
        : .text(
          event.groupSnapshots.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(
            separator: "\n")),
    ])
    _ = try statement.step()
  }

  /// The app's history, newest first.
  public func history(of bundleIdentifier: String) throws -> [Event] {
    let statement = try database.prepare(
      """
      SELECT bundle_id, event, container_id, previous_container_id, version, previous_version, snapshot, time,
        group_snapshots
      FROM history WHERE bundle_id = ?1 ORDER BY id DESC
      """)
    try statement.bind([.text(bundleIdentifier)])
    return try statement.rows { row in
      Event(
        bundleIdentifier: row.text(0) ?? "", event: row.text(1) ?? "", containerID: row.text(2),
        previousContainerID: row.text(3), version: row.text(4), previousVersion: row.text(5),
        snapshot: row.text(6), time: Date(timeIntervalSince1970: row.double(7)),
        groupSnapshots: Dictionary(
          (row.text(8) ?? "").split(separator: "\n").compactMap { line -> (String, String)? in
            guard let equals = line.firstIndex(of: "=") else { return nil }
            return (String(line[..<equals]), String(line[line.index(after: equals)...]))
          }, uniquingKeysWith: { first, _ in first }))
    }
  }
}
