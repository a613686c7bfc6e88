// AppboxBackup owns backup repositories: scanning homes, change detection, tar archives, the
// catalog, restore, check, diff, forget, export and import. It depends on AppboxCore,
// AppboxStore, AppboxCrypto, AppboxArchive and AppboxContainer, and must not import the C
// libraries directly nor the keychain module (the CLI injects a `KeychainSnapshotting`).
// Engines never print: they report typed events to an injected observer.

import AppboxCore

/// An error of the backup layer: repositories, snapshots, archives, imports.
public struct BackupError: AppboxFailure, Equatable {
  public enum Code: Sendable, Equatable {
    /// No such snapshot or repository (exit 66).
    case snapshotNotFound
    /// An archive is missing, truncated or does not match the catalog (exit 65).
    case corruptArchive
    /// The catalog is inconsistent or unreadable (exit 65).
    case corruptCatalog
    /// An imported archive is hostile or malformed (exit 65).
    case refusedArchive
    /// A file in the home could not be read (exit 74 or 77, by errno).
    case unreadable(FailureKind)
    /// The request is malformed (exit 64).
    case invalidRequest
    /// Something exists that must not (exit 73).
    case cannotCreate
    /// A wrong password, or a key that does not open (exit 77).
    case denied
    /// The repository is busy: another process holds what this one needs (exit 75).
    case busy
    /// A repository this device used encrypted is plain now, or a password was given for a
    /// plain one (exit 65; Repository/EncryptionMemory.swift).
    case downgraded
    /// Writing or syncing failed: a disk full or an I/O error (exit 74).
    case io
  }

  public var code: Code
  public var message: String

  public init(_ code: Code, _ message: String) {
    self.code = code
    self.message = message
  }

  public var kind: FailureKind {
    switch code {
    case .snapshotNotFound: return .notFound
    case .corruptArchive, .corruptCatalog, .refusedArchive, .downgraded: return .badData
    case .unreadable(let kind): return kind
    case .invalidRequest: return .invalidArgument
    case .cannotCreate: return .cannotCreate
    case .denied: return .denied
    case .busy: return .busy
    case .io: return .io
    }
  }

  public var description: String { message }
}

/// Display form of a raw path (names need not be UTF-8).
func display(_ path: [UInt8]) -> String { String(decoding: path, as: UTF8.self) }

/// `parent/name` in raw bytes; `name` alone when the parent is the top.
func joinPath(_ parent: [UInt8], _ name: some Collection<UInt8>) -> [UInt8] {
  if parent.isEmpty { return Array(name) }
  var result = parent
  result.reserveCapacity(parent.count + 1 + name.count)
  result.append(UInt8(ascii: "/"))
  result.append(contentsOf: name)
  return result
}

func joinPath(_ parent: [UInt8], _ name: [UInt8]) -> [UInt8] {
  if parent.isEmpty { return name }
  var result = parent
  result.reserveCapacity(parent.count + 1 + name.count)
  result.append(UInt8(ascii: "/"))
  result.append(contentsOf: name)
  return result
}
