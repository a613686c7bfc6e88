// A backup repository: its objects (ObjectStore: a local directory or an S3 bucket; see
// Repository/RepositoryObjects.swift for the layout) and its catalog, the SQLite index of
// them (Catalog.swift).
//
// Where the catalog lives: a local unencrypted repository keeps it inside, `catalog.db`, as it
// always did (every user of the directory shares it). An S3 or encrypted repository cannot:
// each device keeps its own in `<root>/.appbox/cache/<hash of the location>/catalog.db`, a
// cache rebuilt from the objects whenever needed, and kept in step by listing them
// (Repository/RepositorySync.swift) each time the repository is opened.
//
// Layout versions: a directory with `catalog.db` and no `config` is layout 1 (before fleets),
// whose catalog is the record itself. It opens and works unchanged, and becomes layout 2 the
// first time a writer holds the repository alone: the objects a layout 2 repository has
// beside its archives (a manifest and a snapshot object per archive) are written from the
// catalog, then `config` last, so an interrupted upgrade is simply done again.
//
// Locking. Local repositories (flock, released by the kernel however a process ends):
// - `locks/<bundle-id>.lock`, exclusive: one writer (backup, forget) per app at a time;
// - `locks/repository.lock`: every writer holds it shared while it works; removing debris,
//   `forget` and upgrading the layout need it exclusive, so no archive being written by
//   someone else can be mistaken for debris.
// S3 repositories: writers take no lock at all (objects are immutable and named by random
// ids); only `forget`'s pruning is exclusive, through a lock object (PruneLock.swift).
// Debris is what a killed writer leaves: temp files, archives without a manifest object,
// snapshot objects whose archive was never committed. Locally it is removed under the
// exclusive lock by the next writer that can take it; on S3 `forget` marks it and deletes it
// after the grace period (Forgetter.swift).

import AppboxArchive
import AppboxCore
import AppboxCrypto
import AppboxS3
import Foundation
import Glibc

/// An open repository and its catalog.
public final class Repository {
  /// For messages and output: the directory's path, or `s3://bucket/prefix`.
  public let path: String
  public let location: RepositoryLocation
  public let catalog: Catalog
  let environment: [String: String]
  /// How long to wait for a lock another appbox holds (RepositoryOptions.lockWait).
  package let lockWait: LockWait
  package let store: ObjectStore
  /// nil: layout 1 (a local repository from before layout 2, not yet upgraded).
  var config: RepositoryConfig?
  /// The unlocked key of an encrypted repository, and the key object that opened it.
  package let key: RepositoryKey?
  let keyName: String?
  /// The directory of this device's cache of the repository (remote or encrypted ones).
  let cacheDirectory: String?
  /// Damaged objects the last sync met, and the snapshots they cost (RepositoryDamage.swift).
  public internal(set) var damage = RepositoryDamage()
  public let catalogPath: String

  /// Whether the archives are sealed (an encrypted repository).
  public var isEncrypted: Bool { key != nil }
  package var isLegacy: Bool { config == nil }
  var local: LocalObjectStore? { store as? LocalObjectStore }
  /// Whether archives are plain files here, read at recorded offsets: restore reads their data
  /// directly, and backups may store large files as content-defined chunks (which only such
  /// reads reassemble). S3 and encrypted repositories stream archives member by member.
  package var readsDirectly: Bool { local != nil && !isEncrypted }

  /// The archives directory of a local repository.
  public var archivesPath: String { path + "/archives" }
  var locksPath: String { path + "/locks" }

  static let temporaryPrefix = LocalObjectStore.temporaryPrefix

  /// Opens the local repository at `path`, creating it (and its parents) when `create` is true.
  /// A missing repository without `create` is `.notFound` (exit 66). An encrypted one
  /// reads its password from `$APPBOX_PASSWORD_FILE`.
  public convenience init(
    path: String, create: Bool = true, environment: [String: String] = ProcessInfo.processInfo.environment,
    lockWait: LockWait = .none
  ) throws {
    try self.init(
      location: .directory(RepositoryLocation.absolute(path)),
      options: RepositoryOptions(
        create: create, environment: environment,
        password: Repository.passwordFile(environment),
        passwordGiven: environment["APPBOX_PASSWORD_FILE"] != nil, lockWait: lockWait))
  }

  /// Opens the repository at `location`: reads its config, unlocks its key when it is
  /// encrypted (asking `options.password`), opens the catalog and brings it up to date.
  public init(location: RepositoryLocation, options: RepositoryOptions) throws {
    self.location = location
    path = location.description
    environment = options.environment
    lockWait = options.lockWait
    let store = try Repository.makeStore(location)
    self.store = store
    var config = try Repository.readConfig(store)
    try Repository.refuseUnexpectedPlain(config, location: location, options: options)
    if config == nil {
      CrashPoint.hit("repository.no-config")
      let legacyCatalog = (store as? LocalObjectStore).map {
        FileManager.default.fileExists(atPath: $0.path("catalog.db"))
      }
      // A catalog and no config is a layout 1 repository, unless another appbox created the
      // repository meanwhile: it writes the config before it opens the catalog, so a config
      // read after seeing the catalog tells the two apart. (Taken for layout 1, this writer
      // committed to the catalog alone, and the next sync dropped its snapshot.)
      if legacyCatalog == true { config = try Repository.readConfig(store) }
      if legacyCatalog != true {
        guard options.create else {
          throw RepositoryError(
            .notFound,
            "No backup repository at '\(location.description)' "
              + "(appbox repo init --repo \(location.description) creates one)")
        }
        try Repository.create(store, config: RepositoryConfig(encrypted: false))
        config = RepositoryConfig(encrypted: false)
      }
    }
    self.config = config
    if let local = store as? LocalObjectStore, config?.encrypted != true {
      cacheDirectory = nil
      for directory in ["", "/archives", "/locks"] { try Repository.makeDirectories(local.root + directory) }
      catalogPath = local.root + "/catalog.db"
    } else {
      let directory = try Repository.prepareCache(
        options.resolvedCacheDirectory, location: location,
        config: config ?? RepositoryConfig(encrypted: false))
      cacheDirectory = directory
      catalogPath = directory + "/catalog.db"
      if let local = store as? LocalObjectStore {
        try Repository.makeDirectories(local.root + "/locks")
      }
    }
    if let config, config.encrypted {
      let unlocked = try Repository.unlock(
        store, config: config, options: options, cacheDirectory: cacheDirectory, location: location)
      key = unlocked.key
      keyName = unlocked.keyName
      if let cacheDirectory { try EncryptionMemory.remember(id: config.id ?? "", directory: cacheDirectory) }
    } else {
      key = nil
      keyName = nil
    }
    let writable: Catalog
    do {
      writable = try Catalog(path: catalogPath)
    } catch  where options.readOnly && Repository.cannotWrite(error) {
      // Reading needs no space: the catalog as the last sync left it.
      catalog = try Catalog(path: catalogPath, readOnly: true)
      return
    }
    catalog = writable
    if config != nil {
      // Layout 2: the catalog is a cache of the objects, which are durable before it is
      // written; a transaction lost to a power cut is synced back in. No fsync per commit.
      do {
        try catalog.database.setSynchronous(.normal)
        try sync()
      } catch  where options.readOnly && Repository.cannotWrite(error) {
        // The sync's transaction rolled back: the catalog reads as the last sync left it.
      }
    }
  }

  /// Whether `error` says the catalog cannot be written here (a full or read-only file system).
  static func cannotWrite(_ error: any Error) -> Bool {
    error.isOutOfSpace || (error as? any AppboxFailure)?.kind == .denied
  }

  /// Unlocks an encrypted repository's key with the password: from this device's copy when it
  /// has one for that password (KeyCache.swift), else with scrypt (keeping a copy afterwards).
  private static func unlock(
    _ store: ObjectStore, config: RepositoryConfig, options: RepositoryOptions, cacheDirectory: String?,
    location: RepositoryLocation
  ) throws -> (key: RepositoryKey, keyName: String) {
    guard let passwordSource = options.password else {
      throw RepositoryError(
        .denied,
        "The repository '\(location.description)' is encrypted: give its password (--password-file F, "
          + "APPBOX_PASSWORD_FILE, or standard input)")
    }
    let keys = try store.list("keys").map { ($0.name, try store.get("keys/" + $0.name) ?? []) }
    let password = try passwordSource()
    // An empty line (an empty file, nothing on standard input) is no password at all: saying
    // "wrong password" would send the user looking for a typo.
    guard !password.isEmpty else {
      throw RepositoryError(
        .denied,
        "No password for the encrypted repository '\(location.description)': the password given is empty "
          + "(an empty file or nothing on standard input); give it with --password-file F, "
          + "APPBOX_PASSWORD_FILE or on standard input")
    }
    let segmentSize = config.segmentSize ?? RepositoryKey.defaultSegmentSize
    let id = config.id ?? ""
    // Best effort: a device without a keychain yet keeps no copy.
    let secret = KeyCache.enabled(options.environment) ? (try? options.deviceSecret?()) ?? nil : nil
    if let secret, let cacheDirectory,
      let cached = try KeyCache.open(
        directory: cacheDirectory, keyObjects: keys, password: password, secret: secret, repositoryID: id,
        segmentSize: segmentSize)
    {
      return cached
    }
    let unlocked = try RepositoryKey.unlock(
      keys, password: password, repositoryID: id, segmentSize: segmentSize, location: location.description)
    if let secret, let cacheDirectory, let object = keys.first(where: { $0.0 == unlocked.keyName }) {
      try? KeyCache.save(
        directory: cacheDirectory, key: unlocked.key, keyName: unlocked.keyName, keyObject: object.1,
        password: password, secret: secret, repositoryID: id)
    } else if let cacheDirectory {
      KeyCache.remove(directory: cacheDirectory)
    }
    return unlocked
  }

  /// The store of `location`.
  static func makeStore(_ location: RepositoryLocation) throws -> ObjectStore {
    switch location {
    case .directory(let directory): return LocalObjectStore(root: directory)
    case .s3(let bucket, let prefix, let configuration):
      return S3ObjectStore(client: try S3Client(configuration), bucket: bucket, prefix: prefix)
    }
  }

  /// The config object, or nil when there is none. Uses the store's `get`.
  static func readConfig(_ store: ObjectStore) throws -> RepositoryConfig? {
    guard let bytes = try store.get("config") else { return nil }
    return try RepositoryConfig.decode(bytes, location: store.location)
  }

  /// Makes a new, empty repository: the store, then `config` (last: it is what says a
  /// repository is there).
  static func create(_ store: ObjectStore, config: RepositoryConfig, keyObject: [UInt8]? = nil) throws {
    try store.create()
    if let local = store as? LocalObjectStore {
      for directory in ["/archives", "/locks"] { try makeDirectories(local.root + directory) }
    }
    if let keyObject { try store.put("keys/" + randomID(16), keyObject) }
    try store.put("config", config.encoded())
  }

  /// The cache directory for `location` under `root`, emptied when it belonged to another
  /// repository that used to be there (its saved config differs).
  static func prepareCache(_ root: String, location: RepositoryLocation, config: RepositoryConfig) throws
    -> String
  {
    let name = SHA256Name.of(location.cacheKey)
    let directory = root + "/" + name
    try makeDirectories(directory)
    let saved = directory + "/config"
    let current = config.encoded()
    if let previous = FileManager.default.contents(atPath: saved), Array(previous) != current {
      for file in ["catalog.db", "catalog.db-wal", "catalog.db-shm"] { unlink(directory + "/" + file) }
      try? FileTree.remove(atPath: directory + "/objects")
    }
    if FileManager.default.contents(atPath: saved).map(Array.init) != current {
      let handle = try OwnedFileDescriptor.open(directory, O_RDONLY | O_DIRECTORY)
      let staged = try StagedFile("config", in: handle.borrowed, mode: 0o600)
      try staged.descriptor.writeAll(current)
      try staged.commit()
    }
    return directory
  }

  static func randomID(_ bytes: Int) -> String {
    (0..<bytes).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
  }

  /// What reads the password named by `$APPBOX_PASSWORD_FILE`, if it names one.
  public static func passwordFile(_ environment: [String: String]) -> (@Sendable () throws -> [UInt8])? {
    guard let file = environment["APPBOX_PASSWORD_FILE"] else { return nil }
    let read: @Sendable () throws -> [UInt8] = { try Repository.readPasswordFile(file) }
    return read
  }

  /// Reads a password from `file` (its first line; '-' is standard input).
  public static func readPasswordFile(_ file: String) throws -> [UInt8] {
    let bytes: [UInt8]
    do {
      bytes =
        file == "-"
        ? try FileDescriptor(rawValue: 0).readAll(limit: 64 << 10)
        : try FileDescriptor.open(file, O_RDONLY).closeAfter { try $0.readAll(limit: 64 << 10) }
    } catch let error as SystemError {
      // Missing is "no such file" (66); unreadable is what the errno says (77 denied, 64 a
      // directory, 74 I/O): never "snapshot not found".
      throw RepositoryError(
        .unreadable(error.kind), "Unable to read the password from '\(file)': \(error.errno)", cause: error)
    }
    var line = Array(bytes.prefix { $0 != UInt8(ascii: "\n") })
    if line.last == UInt8(ascii: "\r") { line.removeLast() }
    return line
  }

  /// Creates `path` and any missing parents (mode 0700). Uses `mkdir(2)`, reading errno
  /// right after each call (Foundation's errors do not carry it reliably).
  static func makeDirectories(_ path: String) throws {
    if Glibc.mkdir(path, 0o700) == 0 { return }
    let errno = Errno.current
    switch errno {
    case .exists:
      var isDirectory: ObjCBool = false
      guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue
      else {
        throw SystemError("create directory", path: path, errno: .notDirectory)
      }
    case .noEntry:
      let parent = splitPath(path).directory
      guard parent != path, parent != "/" else {
        throw SystemError("create directory", path: path, errno: errno)
      }
      try makeDirectories(parent)
      guard Glibc.mkdir(path, 0o700) == 0 || Errno.current == .exists else {
        throw SystemError("create directory", path: path)
      }
    default:
      throw SystemError("create directory", path: path, errno: errno)
    }
  }

  // MARK: Locks

  /// How long to wait for an app's writer lock: the lock wait given (`--wait`), else not
  /// at all. The repository-wide lock is held exclusively only for maintenance (debris,
  /// `forget`), so waiting for it is waiting for that: at least 5 seconds.
  private var lockTimeout: Duration { lockWait.duration }
  private var repositoryLockTimeout: Duration { lockWait.atLeast(.seconds(5)) }

  /// The per-app writer lock of a local repository (busy, exit 75, unless it frees within
  /// the lock timeout). S3 repositories have none: writers of one app on several devices
  /// make snapshots side by side.
  public func lockApp(_ bundleIdentifier: String) throws -> AnyObject? {
    guard local != nil else { return nil }
    return try FileLock.acquire(
      locksPath + "/\(bundleIdentifier).lock", exclusive: true, timeout: lockTimeout,
      what: "Backups of \(bundleIdentifier) in '\(path)'")
  }

  /// The repository-wide lock: local, a flock shared by writers and exclusive for
  /// maintenance; S3, nothing for writers and the prune lock object when exclusive.
  public func lockRepository(exclusive: Bool, purpose: String = "forget") throws -> AnyObject? {
    guard local != nil else {
      return exclusive ? try PruneLock.acquire(in: self, purpose: purpose) : nil
    }
    return try FileLock.acquire(
      locksPath + "/repository.lock", exclusive: exclusive, timeout: repositoryLockTimeout,
      what: "Repository '\(path)'")
  }

  /// Takes the repository lock for a writer: locally, shared, removing debris (and upgrading a
  /// layout 1 repository) first when no other writer is active (that needs it exclusive for
  /// a moment). S3: nothing.
  public func lockForWriting() throws -> AnyObject? {
    guard local != nil else { return nil }
    if let lock = try FileLock.attempt(locksPath + "/repository.lock", exclusive: true) {
      try upgradeLayout()
      try removeDebris()
      try lock.convert(exclusive: false)
      return lock
    }
    return try lockRepository(exclusive: false)
  }

  // MARK: Debris

  /// Removes what killed writers left in a local repository: temp files, archives without a
  /// manifest object (and, layout 1, archives the catalog does not know), snapshot objects
  /// whose archive was never committed. Call holding the repository lock exclusively.
  /// Returns the names removed.
  @discardableResult
  public func removeDebris() throws -> [String] {
    guard let local else { return [] }
    var removed: [String] = []
    if !isLegacy { try sync() }
    let known = try catalog.archiveNames()
    for directory in ["archives", "manifests", "snapshots"] {
      let temporary = try local.temporaryFiles(in: directory)
      for name in temporary { try FileTree.remove(atPath: local.path(directory + "/" + name)) }
      removed += temporary
    }
    // Layout 2: debris has no manifest object at all (one whose manifest is only damaged is
    // not debris: its content may be all that is left of some snapshot).
    let committed = isLegacy ? known : Set(try local.names("manifests"))
    let candidates = try local.names("archives").filter { !known.contains($0) && !committed.contains($0) }
    // Never an archive some row still names, whatever its manifest says: deleting it would
    // lose content (a catalog out of step keeps the file; `check` reports the rows). Asked
    // only when there is a candidate: the question reads every content row's archive.
    let named = candidates.isEmpty ? [] : try catalog.namedArchives()
    let debris = candidates.filter { !named.contains($0) }
    try local.delete(debris.map { "archives/" + $0 })
    removed += debris
    if !isLegacy {
      let ids = try catalog.snapshotIDs()
      let dangling = try local.names("snapshots").filter { !ids.contains($0) }
      try local.delete(dangling.map { "snapshots/" + $0 })
      removed += dangling.map { "snapshots/" + $0 }
    }
    return removed
  }

  /// Archive files (and temp files) no committed archive accounts for: debris not yet removed.
  public func unknownArchiveFiles() throws -> [String] {
    guard let local else { return [] }
    var known = try catalog.archiveNames()
    if !isLegacy { known.formUnion(try local.names("manifests")) }
    let names = try local.names("archives").filter { !known.contains($0) }
    return (names + (try local.temporaryFiles(in: "archives"))).sorted()
  }

  // MARK: Names

  /// A fresh snapshot id: 8 lowercase hex digits, unused by any snapshot or archive (those
  /// the catalog knows, and every object in the store with that id).
  package func newSnapshotID() throws -> String {
    var existing = Set(try store.names("archives").map(Repository.archiveID))
    if let local {
      existing.formUnion(try local.temporaryFiles(in: "archives").map { String($0.dropFirst(5)) })
    }
    if !isLegacy { existing.formUnion(try store.names("snapshots")) }
    while true {
      let id = String(format: "%08x", UInt32.random(in: 0...UInt32.max))
      if try catalog.snapshot(id: id) != nil || existing.contains(where: { $0.hasPrefix(id) }) { continue }
      return id
    }
  }

  /// Where archive `name` is: its path, or its `s3://` URL.
  public func archivePath(_ name: String) -> String {
    switch location {
    case .directory(let directory): return directory + "/archives/" + name
    case .s3(let bucket, _, _):
      return "s3://\(bucket)/" + ((store as? S3ObjectStore)?.key("archives/" + name) ?? name)
    }
  }

  // MARK: Snapshots

  /// The app's most recent snapshot, or its most recent one carrying `tag` ("pre-update").
  public func latestSnapshot(app: String, tag: String? = nil) throws -> Snapshot? {
    try catalog.snapshots(app: app).last { tag == nil || $0.tag == tag }
  }

  /// Looks up a snapshot by id, unique prefix or `latest` of `app` (Browse/SnapshotResolution.swift);
  /// exit 66 when there is none, 64 when a prefix is ambiguous.
  public func snapshot(_ id: String, app: String? = nil) throws -> Snapshot {
    try resolveSnapshot(id, app: app)
  }
}

extension RepositoryLocation {
  /// What names this repository's cache: the directory, or the endpoint, bucket and prefix.
  var cacheKey: String {
    switch self {
    case .directory(let path): return "dir:" + path
    case .s3(let bucket, let prefix, let configuration):
      return "s3:" + configuration.endpoint + "/" + bucket + "/" + prefix
    }
  }
}

/// A short name derived from text (the first 16 hex digits of its SHA-256).
enum SHA256Name {
  static func of(_ text: String) -> String {
    String(AppboxCrypto.SHA256.hash(Array(text.utf8)).hex.prefix(16))
  }
}
