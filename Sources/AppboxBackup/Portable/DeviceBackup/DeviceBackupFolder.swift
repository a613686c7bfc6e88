// Opening an iOS device backup folder for reading. Everything in it is untrusted input.
//
// Algorithm: open the folder (O_DIRECTORY); read Manifest.plist, Status.plist and Info.plist
// through descriptors beneath it, none followed through a symlink, each a regular file of at
// most 16 MiB, decoded by the hardened property-list codec. An encrypted backup's keybag is
// unlocked with the password (a wrong one: 77, before anything else is read); Manifest.db is
// then decrypted with the ManifestKey straight into SQLite's memory (Database.deserialize),
// and a plain one is read there as it is: no copy of it, plain or decrypted, is ever written
// to disk. Its `Files` table must be an ordinary table with the five columns.
//
// Invariants: nothing is written anywhere; nothing outside the folder is opened (`openBeneath`
// refuses symlinks and `..`); every refusal is a `.refusedArchive` error (exit 65) naming the
// folder and the file, e.g. "Refused to import the device backup 'B': Manifest.db is not an
// SQLite database".

import AppboxContainer
import AppboxCore
import AppboxCrypto
import AppboxPlist
import AppboxRepository
import AppboxStore
import Foundation
import Glibc

/// A device backup folder, opened: its property lists, its keys, its Manifest.db.
public final class DeviceBackup {
  public let path: String
  let folder: OwnedFileDescriptor
  /// Manifest.plist.
  let manifest: PropertyList
  let info: PropertyList?
  public let isEncrypted: Bool
  /// The class keys of an encrypted backup, by class number (empty for a plain one).
  let classKeys: [UInt32: [UInt8]]
  /// Manifest.db, in memory.
  let database: Database

  /// The largest property list and Manifest.db accepted.
  static let plistLimit = 16 << 20
  static let databaseLimit: Int64 = 4 << 30

  /// The device the backup is of, as far as it says (empty when it does not).
  public var deviceName: String {
    manifest["Lockdown"]?["DeviceName"]?.string ?? info?["Device Name"]?.string ?? ""
  }
  public var productVersion: String { manifest["Lockdown"]?["ProductVersion"]?.string ?? "" }
  /// The UDID, kept to letters, digits and dashes (at most 64): it is recorded in snapshots.
  public var deviceIdentifier: String {
    let raw =
      manifest["Lockdown"]?["UniqueDeviceID"]?.string ?? info?["Unique Identifier"]?.string
      ?? info?["Target Identifier"]?.string ?? ""
    let kept = String(
      raw.unicodeScalars.filter {
        $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "-")
      }.prefix(64))
    return kept.isEmpty ? "ios-backup" : kept
  }

  /// The version the backup records for an app (Manifest.plist's Applications), if any.
  func version(ofApp identifier: String) -> String {
    let version = manifest["Applications"]?[identifier]?["CFBundleVersion"]?.string ?? ""
    return version.count <= 64 && version.allSatisfy({ $0.isNumber || $0 == "." }) ? version : ""
  }

  /// Opens the backup at `path`; `password` is asked for only when it is encrypted.
  public init(at path: String, password: () throws -> [UInt8]?) throws {
    self.path = path
    do {
      folder = try OwnedFileDescriptor.open(path, O_RDONLY | O_DIRECTORY)
    } catch let error as SystemError where error.errno == .noEntry || error.errno == .notDirectory {
      throw BackupError(.notFound, "No device backup folder at '\(path)'")
    }
    let refuse = { (what: String) in Self.refusal(path, what) }
    guard let manifest = try Self.readPlist("Manifest.plist", in: folder.borrowed, path: path) else {
      throw refuse("it has no Manifest.plist, so it is not an iOS device backup folder")
    }
    self.manifest = manifest
    info = try Self.readPlist("Info.plist", in: folder.borrowed, path: path)
    if let status = try Self.readPlist("Status.plist", in: folder.borrowed, path: path),
      let state = status["SnapshotState"]?.string, state != "finished"
    {
      throw refuse("Status.plist says the backup did not finish (SnapshotState '\(state.prefix(40))')")
    }
    guard let encrypted = manifest["IsEncrypted"]?.bool ?? (manifest["IsEncrypted"] == nil ? false : nil)
    else {
      throw refuse("Manifest.plist's IsEncrypted is not a boolean")
    }
    isEncrypted = encrypted
    var manifestKey: [UInt8]?
    if encrypted {
      guard let bag = manifest["BackupKeyBag"]?.data else {
        throw refuse("Manifest.plist has no BackupKeyBag")
      }
      let keybag: DeviceBackupKeybag
      do {
        keybag = try DeviceBackupKeybag.parse([UInt8](bag))
      } catch let error as BackupError {
        throw refuse("Manifest.plist: \(error.message)")
      }
      guard let password = try password() else {
        throw BackupError(
          .denied, "The device backup '\(path)' is encrypted: give its password (--password-file F)")
      }
      guard let keys = try keybag.unlock(password: password) else {
        throw BackupError(.denied, "Wrong password for the encrypted device backup '\(path)'")
      }
      classKeys = keys
      guard let stored = manifest["ManifestKey"]?.data,
        let split = MBFileRecord.split(encryptionKey: [UInt8](stored))
      else { throw refuse("Manifest.plist has no usable ManifestKey") }
      guard let classKey = keys[split.protectionClass],
        let key = try AESKeyWrap.unwrap(split.wrapped, with: classKey),
        key.count == 32
      else { throw refuse("Manifest.plist's ManifestKey does not unwrap with its class key") }
      manifestKey = key
    } else {
      classKeys = [:]
    }
    database = try Self.loadDatabase(folder.borrowed, key: manifestKey, path: path)
  }

  static func refusal(_ path: String, _ what: String) -> BackupError {
    BackupError(.refusedArchive, "Refused to import the device backup '\(path)': \(what)")
  }

  /// Opens `name` (raw, relative) beneath the folder for reading: nil when it does not exist.
  /// A symlink, a path leaving the folder or anything but a regular file is refused.
  static func openRegular(_ name: [UInt8], in folder: FileDescriptor, path: String) throws -> (
    FileDescriptor, FileStatus
  )? {
    let shown = String(decoding: name, as: UTF8.self)
    let fd: FileDescriptor
    do {
      fd = try folder.openBeneath(name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK, symlinks: .refuse)
    } catch let error as SystemError where error.errno == .noEntry {
      return nil
    } catch let error as SystemError where error.errno == .tooManyLinks || error.errno == .crossDevice {
      throw refusal(path, "'\(shown)' is a symbolic link or leads out of the folder")
    } catch let error as SystemError where error.errno == .notDirectory {
      throw refusal(path, "'\(shown)' is not where a folder should be")
    }
    do {
      let status = try fd.status()
      guard status.type == .regular else {
        fd.close()
        throw refusal(path, "'\(shown)' is not a regular file")
      }
      return (fd, status)
    } catch {
      fd.close()
      throw error
    }
  }

  static func readPlist(_ name: String, in folder: FileDescriptor, path: String) throws -> PropertyList? {
    guard let (fd, status) = try openRegular(Array(name.utf8), in: folder, path: path) else { return nil }
    defer { fd.close() }
    guard status.size <= plistLimit else { throw refusal(path, "\(name) is larger than 16 MiB") }
    let bytes = try fd.readAll(limit: plistLimit)
    do {
      return try PropertyList.decode(Data(bytes), limits: PropertyListLimits(maxBytes: plistLimit))
    } catch let error as PropertyListError {
      throw refusal(path, "\(name) is damaged: \(error.description)")
    }
  }

  /// Manifest.db in memory: read, or decrypted with `key`, into SQLite's buffer.
  private static func loadDatabase(_ folder: FileDescriptor, key: [UInt8]?, path: String) throws -> Database {
    guard let (fd, status) = try openRegular(Array("Manifest.db".utf8), in: folder, path: path) else {
      throw refusal(path, "it has no Manifest.db")
    }
    defer { fd.close() }
    guard status.size <= databaseLimit else { throw refusal(path, "Manifest.db is larger than 4 GiB") }
    let size = Int(status.size)
    if key != nil, size < 16 || size % 16 != 0 {
      throw refusal(path, "Manifest.db is not whole AES blocks (\(size) bytes): it is damaged")
    }
    guard size >= 100 else { throw refusal(path, "Manifest.db is not an SQLite database (\(size) bytes)") }
    let database = try Database(path: ":memory:")
    do {
      // The plaintext is at most the ciphertext less one byte of padding.
      try database.deserialize(capacity: key == nil ? size : size - 1) { buffer in
        try readContent(of: fd, size: size, key: key, into: buffer, path: path)
      }
    } catch let error as StoreError where error.kind == .badData {
      throw refusal(
        path,
        "Manifest.db is not an SQLite database (\(key == nil ? "damaged" : "damaged, or not encrypted with its ManifestKey")): \(error.message)"
      )
    }
    try database.execute("PRAGMA query_only = ON")
    try database.execute("PRAGMA trusted_schema = OFF")
    try database.execute("PRAGMA temp_store = MEMORY")
    try checkSchema(database, path: path)
    return database
  }

  /// Fills `buffer` with the file's bytes, decrypted when there is a key; returns how many.
  private static func readContent(
    of fd: FileDescriptor, size: Int, key: [UInt8]?, into buffer: UnsafeMutableRawBufferPointer, path: String
  ) throws -> Int {
    guard let key else {
      var done = 0
      while done < size {
        let n = try fd.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[done..<size]))
        if n == 0 { throw refusal(path, "Manifest.db ended early") }
        done += n
      }
      return done
    }
    let stream = try AESCBCStream(key: key, encrypting: false)
    let chunk = 1 << 20
    let input = UnsafeMutableRawBufferPointer.allocate(byteCount: chunk, alignment: 16)
    let output = UnsafeMutableRawBufferPointer.allocate(byteCount: chunk + 32, alignment: 16)
    defer {
      input.deallocate()
      output.deallocate()
    }
    var out = 0
    var read = 0
    func keep(_ count: Int) throws {
      guard count <= buffer.count - out else {
        throw refusal(path, "Manifest.db decrypts to more than it holds")
      }
      buffer.baseAddress!.advanced(by: out).copyMemory(from: output.baseAddress!, byteCount: count)
      out += count
    }
    do {
      while read < size {
        let n = try fd.read(into: UnsafeMutableRawBufferPointer(rebasing: input[0..<min(chunk, size - read)]))
        if n == 0 { throw refusal(path, "Manifest.db ended early") }
        read += n
        try keep(try stream.update(UnsafeRawBufferPointer(rebasing: input[0..<n]), into: output))
      }
      try keep(try stream.finish(into: output))
    } catch let error as CryptoError where error.kind == .badData {
      throw refusal(path, "Manifest.db does not decrypt with its ManifestKey (damaged): \(error.reason)")
    }
    return out
  }

  /// The Files table must be a plain table with the columns the format has, none computed.
  private static func checkSchema(_ database: Database, path: String) throws {
    let kinds = try database.all("SELECT type, sql FROM sqlite_master WHERE name = 'Files'") {
      ($0.text(0) ?? "", $0.text(1) ?? "")
    }
    guard kinds.count == 1, kinds[0].0 == "table", kinds[0].1.uppercased().hasPrefix("CREATE TABLE") else {
      throw refusal(path, "Manifest.db has no ordinary Files table")
    }
    let columns = try database.all("PRAGMA table_xinfo('Files')") { ($0.text(1) ?? "", $0.int64(6)) }
    let names = Set(columns.map(\.0))
    for needed in ["fileID", "domain", "relativePath", "flags", "file"] where !names.contains(needed) {
      throw refusal(path, "Manifest.db's Files table has no \(needed) column")
    }
    if columns.contains(where: { $0.1 != 0 }) {
      throw refusal(path, "Manifest.db's Files table has computed or hidden columns")
    }
  }
}
