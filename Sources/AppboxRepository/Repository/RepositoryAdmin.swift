// `repo init`, `repo passwd`, `repo show` and `archive decrypt`: making a repository, changing
// an encrypted one's password, describing one, and getting an archive's plain bytes out.

import AppboxArchive
import AppboxCore
import Foundation

/// What `repo show` reports.
public struct RepositorySummary: Sendable {
  public var location: String
  /// "directory" or "s3".
  public var backend: String
  /// 1 (a local repository from before layout 2, not yet upgraded) or 2.
  public var layout: Int
  public var encrypted: Bool
  public var snapshots: Int
  public var archives: Int
  public var archiveBytes: Int64
  /// Key objects (encrypted repositories: one per password that opens it).
  public var keys: Int
  /// Where this device keeps the catalog.
  public var catalog: String
  /// S3: archives marked for deletion after the grace period.
  public var markedForDeletion: Int
}

extension Repository {
  /// Makes a repository at `location`: encrypted under `password` when given. An encrypted one
  /// cannot be made where a repository is already (73); a plain one there is only upgraded to
  /// layout 2 (a local layout 1 repository) or left as it is.
  public static func initialize(
    _ location: RepositoryLocation, password: [UInt8]?, options: RepositoryOptions
  ) throws -> Repository {
    var options = options
    options.create = false
    let store = try makeStore(location)
    let existing = try readConfig(store)
    let legacy =
      (store as? LocalObjectStore).map { FileManager.default.fileExists(atPath: $0.path("catalog.db")) }
      ?? false
    if password == nil {
      // Before anything is created: a plain repository where this device had an encrypted one
      // needs --allow-plain, which forgets the encrypted one.
      if options.allowPlain { try EncryptionMemory.forget(location, options: options) }
      try refuseUnexpectedPlain(existing, location: location, options: options)
    }
    if let password {
      guard existing == nil && !legacy else {
        throw RepositoryError(
          .cannotCreate,
          "'\(location.description)' is already a backup repository; an encrypted one needs a new place")
      }
      guard !password.isEmpty else { throw RepositoryError(.invalidRequest, "The password is empty") }
      let key = try RepositoryKey.generate()
      let id = randomID(16)
      let config = RepositoryConfig(encrypted: true, id: id, segmentSize: key.segmentSize)
      try create(store, config: config, keyObject: try key.wrapped(password: password, repositoryID: id))
      options.password = { password }
      return try Repository(location: location, options: options)
    }
    if existing == nil && !legacy { try create(store, config: RepositoryConfig(encrypted: false)) }
    let repository = try Repository(location: location, options: options)
    if repository.isLegacy {
      let lock = try repository.lockRepository(exclusive: true, purpose: "upgrade")
      try repository.upgradeLayout()
      withExtendedLifetime(lock) {}
    }
    return repository
  }

  /// Wraps the master key under `newPassword` in a new key object, then deletes the one that
  /// was opened: nothing else is rewritten.
  public func changePassword(to newPassword: [UInt8]) throws {
    guard let key, let config, let keyName else {
      throw RepositoryError(.invalidRequest, "'\(path)' is not an encrypted repository: it has no password")
    }
    guard !newPassword.isEmpty else { throw RepositoryError(.invalidRequest, "The new password is empty") }
    let lock = try lockRepository(exclusive: true, purpose: "passwd")
    defer { withExtendedLifetime(lock) {} }
    let wrapped = try key.wrapped(password: newPassword, repositoryID: config.id ?? "")
    try store.put("keys/" + Repository.randomID(16), wrapped)
    try store.delete(["keys/" + keyName])
  }

  /// What `repo show` prints.
  public func summary() throws -> RepositorySummary {
    let archives = try catalog.archives()
    return RepositorySummary(
      location: path, backend: local == nil ? "s3" : "directory", layout: isLegacy ? 1 : 2,
      encrypted: isEncrypted, snapshots: try catalog.count("snapshots"), archives: archives.count,
      archiveBytes: archives.reduce(0) { $0 + $1.size }, keys: isEncrypted ? try store.list("keys").count : 0,
      catalog: catalogPath, markedForDeletion: store.isShared ? try store.list("garbage").count : 0)
  }

  /// The archive `text` names: an archive's name, a path ending in one, or a snapshot id.
  public func archiveNamed(_ text: String) throws -> ArchiveRecord {
    let base = String(text.split(separator: "/").last ?? Substring(text))
    if let record = try catalog.archive(named: base) { return record }
    if let snapshot = try catalog.snapshot(id: base) { return try archiveRecord(snapshot.archive) }
    throw RepositoryError(.notFound, "No archive or snapshot '\(text)' in '\(path)'")
  }

  /// Hands the archive's plain bytes (opened when sealed; as stored, so a compressed archive
  /// stays compressed) to `sink`; returns their count.
  @discardableResult
  public func writePlainArchive(_ record: ArchiveRecord, to sink: (UnsafeRawBufferPointer) throws -> Void)
    throws
    -> Int64
  {
    var total: Int64 = 0
    try openArchive(record).plaintext().forEachChunk { chunk in
      try sink(chunk)
      total += Int64(chunk.count)
    }
    return total
  }
}
