// The iOS device backup format (what Finder, iTunes and libimobiledevice's idevicebackup2
// write), as far as appbox reads and writes it; docs/ios-backups.md describes it in full.
//
//   Info.plist        the device and the backup (XML): names, UDID, installed apps
//   Status.plist      SnapshotState "finished" once the backup is whole (binary)
//   Manifest.plist    BackupKeyBag, IsEncrypted, ManifestKey, Lockdown.ProductVersion (binary)
//   Manifest.db       SQLite: Files(fileID, domain, relativePath, flags, file) and Properties;
//                     encrypted backups encrypt the whole file with the ManifestKey
//   XX/<fileID>       a file's content; fileID = hex SHA-1 of "<domain>-<relativePath>",
//                     XX its first two digits
//
// `flags` is 1 for a file, 2 for a directory, 4 for a symlink; `file` is an NSKeyedArchiver
// archive of an MBFile: Mode (the whole st_mode), Size, LastModified, LastStatusChange and
// Birth (whole seconds), InodeNumber, UserID, GroupID, ProtectionClass (1-4, as in
// `ProtectionClass.init(deviceBackupClass:)`), RelativePath, Target (a symlink's), and in an
// encrypted backup EncryptionKey: an NSMutableData of the class as 4 little-endian bytes, then
// the file's key wrapped under that class's key (40 bytes).
//
// Domains: `AppDomain-<bundle id>` (an app's home), `AppDomainGroup-<group id>` (an app
// group's container), `AppDomainPlugin-<id>` (an extension's container); everything else
// (HomeDomain, CameraRollDomain, …) belongs to the system.

import AppboxContainer
import AppboxCore
import AppboxCrypto
import AppboxPlist
import AppboxRepository
import Foundation

/// One domain of a device backup.
enum DeviceBackupDomain: Hashable, Sendable {
  case app(String)
  case group(String)
  case plugin(String)
  case system(String)

  static let appPrefix = "AppDomain-"
  static let groupPrefix = "AppDomainGroup-"
  static let pluginPrefix = "AppDomainPlugin-"

  init(_ name: String) {
    if name.hasPrefix(Self.groupPrefix), name.count > Self.groupPrefix.count {
      self = .group(String(name.dropFirst(Self.groupPrefix.count)))
    } else if name.hasPrefix(Self.pluginPrefix), name.count > Self.pluginPrefix.count {
      self = .plugin(String(name.dropFirst(Self.pluginPrefix.count)))
    } else if name.hasPrefix(Self.appPrefix), name.count > Self.appPrefix.count {
      self = .app(String(name.dropFirst(Self.appPrefix.count)))
    } else {
      self = .system(name)
    }
  }

  var name: String {
    switch self {
    case .app(let id): return Self.appPrefix + id
    case .group(let id): return Self.groupPrefix + id
    case .plugin(let id): return Self.pluginPrefix + id
    case .system(let name): return name
    }
  }
}

/// The `flags` column of Manifest.db's Files table.
enum DeviceBackupEntryKind: Int64, Sendable {
  case file = 1
  case directory = 2
  case symlink = 4

  /// The type bits `Mode` must carry for this kind.
  var modeType: UInt32 {
    switch self {
    case .file: return UInt32(S_IFREG)
    case .directory: return UInt32(S_IFDIR)
    case .symlink: return UInt32(S_IFLNK)
    }
  }
}

/// An MBFile record: what Manifest.db keeps about one entry.
struct MBFileRecord: Equatable, Sendable {
  var mode: UInt32
  var size: Int64
  /// Seconds since 1970 (the format keeps whole seconds).
  var lastModified: Int64
  var lastStatusChange: Int64
  var birth: Int64
  var protectionClass: Int64
  var inode: UInt64 = 0
  var userID: Int64 = 501
  var groupID: Int64 = 501
  /// A symlink's target, raw bytes.
  var target: [UInt8]?
  /// In an encrypted backup: the protection class (4 bytes, little-endian) and the file's
  /// key wrapped under that class's key.
  var encryptionKey: [UInt8]?

  /// What a record may take: an MBFile is a few hundred bytes and about ten objects.
  static let limits = PropertyListLimits(maxDepth: 8, maxObjects: 256, maxBytes: 64 << 10)

  /// Decodes the `file` column (untrusted): a `PropertyListError` or `BackupError` for anything
  /// malformed.
  static func decode(_ blob: [UInt8]) throws -> MBFileRecord {
    let archive = try KeyedArchive.decode(Data(blob), limits: limits)
    let root = archive.root
    guard try archive.className(of: root) == "MBFile" else {
      throw malformedRecord("the root object is not an MBFile")
    }
    func integer(_ key: String, required: Bool = true) throws -> Int64 {
      guard let value = root[key] else {
        if required { throw malformedRecord("the MBFile has no \(key)") }
        return 0
      }
      guard let number = value.integer else { throw malformedRecord("\(key) is not an integer") }
      return number
    }
    let mode = try integer("Mode")
    guard (0...Int64(UInt32.max)).contains(mode) else { throw malformedRecord("Mode is out of range") }
    var record = MBFileRecord(
      mode: UInt32(mode), size: try integer("Size"), lastModified: try integer("LastModified"),
      lastStatusChange: try integer("LastStatusChange", required: false),
      birth: try integer("Birth", required: false),
      protectionClass: try integer("ProtectionClass", required: false))
    record.inode = UInt64(bitPattern: try integer("InodeNumber", required: false))
    record.userID = try integer("UserID", required: false)
    record.groupID = try integer("GroupID", required: false)
    if let target = root["Target"] {
      guard let text = try archive.string(target) else { throw malformedRecord("Target is nil") }
      record.target = Array(text.utf8)
    }
    record.encryptionKey = try archive.data(root["EncryptionKey"]).map { [UInt8]($0) }
    return record
  }

  /// The `file` column for this record at `relativePath`.
  func encoded(relativePath: [UInt8]) -> Data {
    var builder = KeyedArchiveBuilder()
    var fields: PropertyListDictionary = [
      "Mode": .integer(Int64(mode)), "Size": .integer(size), "LastModified": .integer(lastModified),
      "LastStatusChange": .integer(lastStatusChange), "Birth": .integer(birth),
      "ProtectionClass": .integer(protectionClass), "InodeNumber": .integer(Int64(bitPattern: inode)),
      "UserID": .integer(userID), "GroupID": .integer(groupID), "Flags": .integer(0),
    ]
    fields["RelativePath"] = builder.add(.string(String(decoding: relativePath, as: UTF8.self)))
    if let target { fields["Target"] = builder.add(.string(String(decoding: target, as: UTF8.self))) }
    if let encryptionKey { fields["EncryptionKey"] = builder.addMutableData(Data(encryptionKey)) }
    return builder.archive(root: fields, className: "MBFile", ancestors: ["MBFile", "NSObject"])
  }

  /// The protection class an EncryptionKey names, and the wrapped key after it.
  static func split(encryptionKey key: [UInt8]) -> (protectionClass: UInt32, wrapped: [UInt8])? {
    guard key.count == 4 + 40 else { return nil }
    let protectionClass = UInt32(key[0]) | UInt32(key[1]) << 8 | UInt32(key[2]) << 16 | UInt32(key[3]) << 24
    return (protectionClass, Array(key[4...]))
  }

  static func joined(protectionClass: UInt32, wrapped: [UInt8]) -> [UInt8] {
    [0, 8, 16, 24].map { UInt8(truncatingIfNeeded: protectionClass >> UInt32($0)) } + wrapped
  }
}

/// A record that is a keyed archive but not an MBFile appbox can use.
private func malformedRecord(_ what: String) -> BackupError { BackupError(.refusedArchive, what) }

enum DeviceBackupNames {
  /// A file's id: the hex SHA-1 of "<domain>-<relativePath>" (the path as raw bytes).
  static func fileID(domain: String, relativePath: [UInt8]) -> String {
    // SHA-1 of a short buffer cannot fail short of a broken libcrypto.
    let digest = (try? SHA1.hash(Array(domain.utf8) + [UInt8(ascii: "-")] + relativePath)) ?? []
    return String(unsafeUninitializedCapacity: digest.count * 2) { out in
      for (index, byte) in digest.enumerated() {
        out[2 * index] = hexDigits[Int(byte >> 4)]
        out[2 * index + 1] = hexDigits[Int(byte & 0x0F)]
      }
      return digest.count * 2
    }
  }

  private static let hexDigits = Array("0123456789abcdef".utf8)

  /// Whether `id` is 40 lowercase hex digits (so `XX/<id>` names a file inside the folder).
  static func isFileID(_ id: [UInt8]) -> Bool {
    id.count == 40 && id.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
  }

  /// Where a file's content is, relative to the backup folder.
  static func contentPath(_ id: String) -> [UInt8] { Array((String(id.prefix(2)) + "/" + id).utf8) }
}

extension ProtectionClass {
  /// The class of an MBFile's ProtectionClass: 1 complete, 2 complete unless open, 3 until
  /// first unlock, 4 none. 0 (no class) is none; any other number counts as complete (the
  /// strongest: a record is never a reason to protect less).
  init(deviceBackupClass number: Int64) {
    switch number {
    case 0, 4: self = .none
    case 2: self = .completeUnlessOpen
    case 3: self = .untilFirstUnlock
    default: self = .complete
    }
  }

  /// The MBFile ProtectionClass number of this class.
  var deviceBackupClass: Int64 {
    switch self {
    case .complete: return 1
    case .completeUnlessOpen: return 2
    case .untilFirstUnlock: return 3
    case .none: return 4
    }
  }
}
