// The small objects of a repository (layout version 2), beside its archives:
//
//   config               {"appbox-repository": 2, "encryption": "none"} (the same bytes on
//                        every device, so two devices creating it at once write identical
//                        objects), or with "aes-256-gcm", a random "id" and "segment" size
//   keys/<id>            encrypted repositories: the wrapped master key (RepositoryKey.swift)
//   archives/<name>      the pax tar archives, as before (sealed when encrypted)
//   snapshots/<id>       one per snapshot: "APPBOXSN" 1 · archive name · a manifest holding only
//                        the snapshot's catalog row
//   manifests/<name>     one per archive, written LAST: "APPBOXMO" 1 · the archive's size,
//                        CRC-32C, compression and time · the archive's own manifest (the same
//                        bytes as its `.appbox/manifest` member)
//   garbage/<name>       S3: an archive `forget` found unneeded, marked now and deleted after
//                        the grace period (Forgetter.swift)
//   locks/               local: flock files; S3: lock objects of `forget` (PruneLock.swift)
//
// An archive is committed when its manifest object exists; a snapshot is live when its
// snapshot object exists and its archive is committed. In an encrypted repository the
// manifest and snapshot objects are sealed like archives, so nothing but object names (random
// ids), sizes and times is readable without the password.

import AppboxArchive
import AppboxCore
import Foundation

/// The `config` object.
struct RepositoryConfig: Equatable {
  var encrypted: Bool
  /// Encrypted repositories: a random id that key objects are bound to.
  var id: String?
  var segmentSize: Int?

  static let version = 2

  func encoded() -> [UInt8] {
    if encrypted {
      return Array(
        "{\"appbox-repository\":2,\"encryption\":\"aes-256-gcm\",\"id\":\"\(id ?? "")\",\"segment\":\(segmentSize ?? 0)}\n"
          .utf8)
    }
    return Array("{\"appbox-repository\":2,\"encryption\":\"none\"}\n".utf8)
  }

  static func decode(_ bytes: [UInt8], location: String) throws -> RepositoryConfig {
    guard let object = try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any],
      let version = object["appbox-repository"] as? Int
    else { throw RepositoryError(.corruptCatalog, "The repository config of '\(location)' is malformed") }
    guard version == Self.version else {
      throw RepositoryError(
        .corruptCatalog,
        "The repository '\(location)' has layout version \(version); this appbox reads version 2")
    }
    switch object["encryption"] as? String {
    case "none": return RepositoryConfig(encrypted: false)
    case "aes-256-gcm":
      guard let id = object["id"] as? String, !id.isEmpty, let segment = object["segment"] as? Int,
        (4096...(16 << 20)).contains(segment)
      else { throw RepositoryError(.corruptCatalog, "The repository config of '\(location)' is malformed") }
      return RepositoryConfig(encrypted: true, id: id, segmentSize: segment)
    default:
      throw RepositoryError(
        .corruptCatalog, "The repository config of '\(location)' names an unknown encryption")
    }
  }
}

/// `manifests/<archive>`: the archive's record and its manifest.
struct ManifestObject {
  static let magic = Array("APPBOXMO".utf8)
  var record: ArchiveRecord
  /// The manifest's encoding (written after the record; read by `ManifestDecoder`, never whole).
  var manifestBytes: [UInt8]

  func encoded() -> [UInt8] {
    var out = ByteWriter()
    out.bytes = Self.magic
    out.byte(1)
    out.varint(UInt64(record.size))
    out.varint(UInt64(record.checksum))
    out.data(Array(record.compression.rawValue.utf8))
    out.data(Array(String(record.created.timeIntervalSince1970).utf8))
    out.bytes += manifestBytes
    return out.bytes
  }

  /// Reads the object's header from `input`: the record of archive `name`. The manifest
  /// follows it in `input`.
  static func readRecord(_ input: RecordReader, name: String) throws -> ArchiveRecord {
    func bad() -> RepositoryError {
      RepositoryError(.corruptArchive, "The manifest object of archive '\(name)' is malformed")
    }
    do {
      return try input.record { input in
        guard Array(try input.raw(magic.count)) == magic, try input.byte() == 1 else { throw bad() }
        let size = Int64(bitPattern: try input.varint())
        let checksum = try input.varint()
        guard
          let compression = ArchiveCompression(
            rawValue: String(decoding: try input.data(limit: 16), as: UTF8.self)),
          let created = Double(String(decoding: try input.data(limit: 64), as: UTF8.self)),
          checksum <= UInt64(UInt32.max), size >= 0
        else { throw bad() }
        return ArchiveRecord(
          name: name, size: size, checksum: UInt32(checksum), compression: compression,
          created: Date(timeIntervalSince1970: created))
      }
    } catch let error as RepositoryError where error.code == .corruptCatalog {
      throw bad()
    }
  }
}

/// `snapshots/<id>`: the snapshot's row and its archive's name.
struct SnapshotObject {
  static let magic = Array("APPBOXSN".utf8)
  var snapshot: Snapshot

  func encoded() -> [UInt8] {
    var out = ByteWriter()
    out.bytes = Self.magic
    out.byte(1)
    out.data(Array(snapshot.archive.utf8))
    out.bytes += Manifest(snapshot: snapshot, trees: [], blobs: []).encoded()
    return out.bytes
  }

  static func decode(_ bytes: [UInt8], id: String) throws -> SnapshotObject {
    func bad() -> RepositoryError {
      RepositoryError(.corruptArchive, "The snapshot object '\(id)' is malformed")
    }
    guard bytes.starts(with: magic), bytes.count > magic.count, bytes[magic.count] == 1 else { throw bad() }
    return try bytes.withUnsafeBytes { raw in
      var input = ByteReader(raw)
      _ = try input.raw(magic.count + 1)
      let archive = String(decoding: try input.data(limit: 255), as: UTF8.self)
      let manifest = try Manifest.decode(Array(bytes[input.position...]), archive: archive)
      guard let snapshot = manifest.snapshot, snapshot.id == id, Repository.isArchiveName(archive, of: id)
      else {
        throw bad()
      }
      return SnapshotObject(snapshot: snapshot)
    }
  }
}

extension Repository {
  /// Whether `name` is the archive of snapshot `id` (`<id>.tar`, `.tar.gz` or `.tar.zst`).
  static func isArchiveName(_ name: String, of id: String) -> Bool {
    ArchiveCompression.allCases.contains { name == id + $0.fileSuffix }
  }

  /// The snapshot id an archive name starts with (every archive's name does, repacks too).
  static func archiveID(_ name: String) -> String {
    String(name.prefix { $0 != "." })
  }
}

extension Repository {
  /// The records of archives `names`, each present with its recorded size (a local file's
  /// size, or an object's as the store lists it).
  package func checkPresence(of names: [String]) throws -> [ArchiveRecord] {
    let listed: [String: Int64]? =
      local == nil
      ? Dictionary(try store.list("archives").map { ($0.name, $0.size) }, uniquingKeysWith: { a, _ in a })
      : nil
    return try names.map { name in
      guard let record = try catalog.archive(named: name) else {
        throw RepositoryError(.corruptCatalog, "The catalog does not know archive '\(name)'")
      }
      guard let size = try listed.map({ $0[name] }) ?? store.size(of: "archives/" + name) else {
        throw RepositoryError(.corruptArchive, "Archive '\(archivePath(name))' is missing")
      }
      guard size == record.size else {
        throw RepositoryError(
          .corruptArchive,
          "Archive '\(archivePath(name))' is \(size) bytes; the catalog recorded \(record.size)")
      }
      return record
    }
  }
}
