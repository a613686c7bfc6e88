// AppboxRepository owns backup repositories: the repository and its object stores (a local
// directory, an S3 bucket, sealed and pipelined uploads), access (location, keys, key cache,
// locks, sync), the catalog, the formats (trees, tree deltas, manifests, byte coding,
// content identities, chunking), maintenance (check, forget, diff, retention) and reading
// snapshots back (browse, find, resolve, content streams). It depends on AppboxCore,
// AppboxStore, AppboxCrypto, AppboxArchive and AppboxS3, and must not import AppboxContainer
// nor AppboxKeychain: what it needs of a device (the lock wait, a device-bound secret for the
// key cache, a password) is passed in by the caller. It must not import the C libraries
// directly. The members the engines (AppboxBackup) use are `package`; what the CLI uses is
// public. Maintenance never prints: it reports typed events to an injected observer.

import AppboxCore

/// An error of the repository layer (and, as `BackupError`, of the engines above it): what
/// failed, in a message naming the repository, snapshot, archive or file, and the error
/// underneath, when there is one.
public struct RepositoryError: AppboxFailure, Equatable {
  public enum Code: Sendable, Equatable {
    /// No such snapshot, repository or object (exit 66). Only "not found": a file that exists
    /// but cannot be read (a password or credentials file) is `.unreadable`.
    case notFound
    /// An archive is missing, truncated or does not match the catalog (exit 65).
    case corruptArchive
    /// The catalog is inconsistent or unreadable (exit 65).
    case corruptCatalog
    /// An imported archive is hostile or malformed (exit 65).
    case refusedArchive
    /// A file could not be read (exit 66, 74 or 77, by errno).
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
    /// plain one (exit 65; Access/EncryptionMemory.swift).
    case downgraded
    /// Writing or syncing failed: a disk full or an I/O error (exit 74).
    case io
  }

  public var code: Code
  public var message: String
  /// The error this one reports (a system call's, SQLite's, the S3 store's), if any.
  public var cause: (any Error)?

  public init(_ code: Code, _ message: String, cause: (any Error)? = nil) {
    self.code = code
    self.message = message
    self.cause = cause
  }

  public var kind: FailureKind {
    switch code {
    case .notFound: return .notFound
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

  /// Equal code and message (the cause is not compared: errors need not be Equatable).
  public static func == (left: RepositoryError, right: RepositoryError) -> Bool {
    left.code == right.code && left.message == right.message
  }
}

/// Display form of a raw path (names need not be UTF-8).
package func display(_ path: [UInt8]) -> String { String(decoding: path, as: UTF8.self) }

/// `parent/name` in raw bytes; `name` alone when the parent is the top.
package func joinPath(_ parent: [UInt8], _ name: some Collection<UInt8>) -> [UInt8] {
  if parent.isEmpty { return Array(name) }
  var result = parent
  result.reserveCapacity(parent.count + 1 + name.count)
  result.append(UInt8(ascii: "/"))
  result.append(contentsOf: name)
  return result
}

package func joinPath(_ parent: [UInt8], _ name: [UInt8]) -> [UInt8] {
  if parent.isEmpty { return name }
  var result = parent
  result.reserveCapacity(parent.count + 1 + name.count)
  result.append(UInt8(ascii: "/"))
  result.append(contentsOf: name)
  return result
}
