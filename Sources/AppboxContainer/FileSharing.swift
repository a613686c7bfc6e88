// File sharing: an app's Documents as the user's desktop sees it.
//
// Only apps whose Info.plist sets UIFileSharingEnabled get it (otherwise: denied, 77).
// Every path inside the app is relative to Documents and resolved on disk beneath
// Documents' descriptor (ContainedDirectory: openat2 RESOLVE_BENEATH, or an O_NOFOLLOW
// walk), so `..`, absolute paths and symlinks the app planted that lead out of
// Documents are refused (77) before anything is read or written. Writes go to a temp
// file beside the destination and are renamed over it; a symlink at the destination
// name is replaced, never followed. Paths on the host side are the user's own and are
// used as given. Names inside the app are raw bytes (they need not be UTF-8): entries are
// listed with their exact names, and every operation takes a path as bytes.

import AppboxCore
import Foundation
import Glibc

/// One entry of a Documents listing.
public struct SharedFileEntry: Sendable, Equatable {
  /// The name's exact bytes (not necessarily UTF-8).
  public var rawName: [UInt8]
  public var type: FileType
  /// Bytes (for a symlink, the length of its target).
  public var size: Int64
  public var modificationTime: Timespec
  /// Where a symlink points, exact bytes (shown, never followed).
  public var rawSymlinkTarget: [UInt8]?

  /// The name as text (lossy for a name that is not UTF-8).
  public var name: String { String(decoding: rawName, as: UTF8.self) }
  /// The symlink's target as text (lossy).
  public var symlinkTarget: String? { rawSymlinkTarget.map { String(decoding: $0, as: UTF8.self) } }
}

/// What a push or a pull wrote.
public struct FileTransfer: Sendable, Equatable {
  /// The destination: "Documents/…" inside the app, or the host path.
  public var path: String
  public var bytes: Int64
}

/// An app's Documents, open for file sharing. Closes its descriptor when released.
public final class SharedDocuments {
  public let app: AppRecord
  private let documents: ContainedDirectory
  /// The lock state, read when a pull needs it: a pull reads a protected file only while its
  /// class is available.
  private let gate: () throws -> ProtectionGate?

  init(home: Home, gate: @escaping () throws -> ProtectionGate?) throws {
    app = home.app
    self.gate = gate
    guard app.fileSharingEnabled else {
      throw ContainerError(
        .denied,
        "\(app.bundleIdentifier) does not share its files (its Info.plist does not set UIFileSharingEnabled "
          + "to true)")
    }
    documents = try ContainedDirectory.open(home.path(of: .documents), container: "Documents")
  }

  deinit { documents.close() }

  /// The entries of `directory` (Documents itself when nil), sorted by name bytes, so
  /// `A.txt` and `a.txt` are two entries. Symlinks are listed, not followed; names that are
  /// not UTF-8 are listed too, with their exact bytes.
  public func list(_ directory: String? = nil) throws -> [SharedFileEntry] {
    try list(bytes: directory.map { Array($0.utf8) })
  }

  /// `list(_:)` with the folder given as raw bytes.
  public func list(bytes directory: [UInt8]?) throws -> [SharedFileEntry] {
    let folder =
      try directory.map {
        OwnedFileDescriptor(taking: try documents.open(try relative($0), O_RDONLY | O_DIRECTORY))
      }
      ?? documents.descriptor.duplicateOwned()
    let fd = folder.borrowed
    var result: [SharedFileEntry] = []
    for entry in try fd.entries().sorted(by: { $0.name.lexicographicallyPrecedes($1.name) }) {
      guard let status = try? fd.status(ofRawName: entry.name) else { continue }  // vanished
      var target: [UInt8]?
      if status.type == .symlink { target = try? fd.readLink(rawName: entry.name) }
      result.append(
        SharedFileEntry(
          rawName: entry.name, type: status.type, size: status.size,
          modificationTime: status.modificationTime,
          rawSymlinkTarget: target))
    }
    return result
  }

  /// Copies the host file `source` ("-": stdin) into Documents at `destination`
  /// (default: the source's name; an existing folder receives the file under the
  /// source's name), replacing what is there atomically.
  public func push(from source: String, to destination: String?) throws -> FileTransfer {
    try push(from: source, toBytes: destination.map { Array($0.utf8) })
  }

  /// `push(from:to:)` with the destination in Documents given as raw bytes.
  public func push(from source: String, toBytes destination: [UInt8]?) throws -> FileTransfer {
    let sourceName = splitPath(source).name
    if destination == nil && source == "-" {
      throw ContainerError(.invalidRequest, "Name the destination in Documents when pushing from stdin")
    }
    let owned =
      source == "-"
      ? try FileDescriptor(rawValue: 0).duplicateOwned() : try OwnedFileDescriptor.open(source, O_RDONLY)
    let input = owned.borrowed
    if try input.status().type == .directory {
      throw ContainerError(
        .invalidRequest, "Cannot push '\(source)': it is a directory (push files one by one)")
    }
    let target = try resolveDestination(destination ?? Array(sourceName.utf8), sourceName: sourceName)
    defer { target.close() }
    let shown = "Documents/\(target.relative)"
    if try target.status()?.type == .directory {
      throw ContainerError(.invalidRequest, "Cannot push to '\(shown)': it is a folder")
    }
    let bytes = try AtomicFile.copy(
      from: input, toRawName: target.rawName, in: target.parent, displayPath: shown)
    if let owner = AppUser.dataOwner(of: app) {
      try DataOwnership.handOver(rawName: target.rawName, in: target.parent, to: owner)
    }
    return FileTransfer(path: shown, bytes: bytes)
  }

  /// The bytes of the file at `path` in Documents.
  public func pull(_ path: String) throws -> [UInt8] { try pull(bytes: Array(path.utf8)) }

  /// `pull(_:)` with the path given as raw bytes.
  public func pull(bytes path: [UInt8]) throws -> [UInt8] {
    let file = try openForReading(path)
    return try file.borrowed.readAll()
  }

  /// Copies the file at `path` in Documents to the host path `destination` (an existing
  /// folder receives it under its own name), replacing what is there atomically.
  public func pull(_ path: String, to destination: String) throws -> FileTransfer {
    try pull(bytes: Array(path.utf8), to: destination)
  }

  /// `pull(_:to:)` with the path in Documents given as raw bytes. A name that is not UTF-8
  /// keeps its bytes on the host too.
  public func pull(bytes path: [UInt8], to destination: String) throws -> FileTransfer {
    let file = try openForReading(path)
    var directoryPath = destination
    var name: [UInt8]
    var shown = destination
    var isDirectory: ObjCBool = false
    if FileManager.default.fileExists(atPath: destination, isDirectory: &isDirectory), isDirectory.boolValue {
      name = (try relative(path)).lastComponentBytes
      shown =
        (destination.hasSuffix("/") ? destination : destination + "/") + String(decoding: name, as: UTF8.self)
    } else {
      let split = splitPath(destination)
      directoryPath = split.directory
      name = Array(split.name.utf8)
    }
    guard !name.isEmpty else {
      throw ContainerError(.invalidRequest, "Name a file to pull into, not '\(destination)'")
    }
    let directory = try OwnedFileDescriptor.open(directoryPath, O_RDONLY | O_DIRECTORY)
    let bytes = try AtomicFile.copy(
      from: file.borrowed, toRawName: name, in: directory.borrowed, displayPath: shown)
    return FileTransfer(path: shown, bytes: bytes)
  }

  /// Removes the file, symlink (not what it points to) or folder tree at `path`.
  /// Returns "Documents/…".
  public func remove(_ path: String) throws -> String { try remove(bytes: Array(path.utf8)) }

  /// `remove(_:)` with the path given as raw bytes.
  public func remove(bytes path: [UInt8]) throws -> String {
    let target = try documents.resolveParent(of: try relative(path))
    defer { target.close() }
    let shown = "Documents/\(target.relative)"
    guard try target.status() != nil else {
      throw ContainerError(.fileNotFound, "No file '\(shown)' in \(app.bundleIdentifier)")
    }
    try FileTree.remove(rawName: target.rawName, in: target.parent)
    try target.parent.sync()
    return shown
  }

  private func relative(_ path: String) throws -> RelativePath {
    try RelativePath(validating: path, container: "Documents")
  }

  private func relative(_ path: [UInt8]) throws -> RelativePath {
    try RelativePath(validatingBytes: path, container: "Documents")
  }

  /// The destination's parent and name: `path` itself, or `sourceName` inside it when
  /// `path` is an existing folder (symlinks followed only while they stay in Documents).
  private func resolveDestination(_ path: [UInt8], sourceName: String) throws -> ContainedPath {
    let destination = try relative(path)
    do {
      try documents.open(destination, O_RDONLY | O_DIRECTORY).close()
    } catch let error as SystemError where error.errno == .notDirectory || error.errno == .noEntry {
      if path.last == UInt8(ascii: "/") {
        throw ContainerError(.fileNotFound, "No folder 'Documents/\(destination)' in \(app.bundleIdentifier)")
      }
      return try documents.resolveParent(of: destination)
    }
    guard sourceName != "-" else {
      throw ContainerError(
        .invalidRequest, "'Documents/\(destination)' is a folder: name the file to write from stdin")
    }
    return try documents.resolveParent(of: try destination.appending(sourceName))
  }

  /// Opens a regular file beneath Documents for reading. O_NONBLOCK, so a FIFO the app
  /// planted cannot hang appbox; it is refused like any other non-file.
  private func openForReading(_ path: [UInt8]) throws -> OwnedFileDescriptor {
    let relativePath = try relative(path)
    let file: OwnedFileDescriptor
    do {
      file = OwnedFileDescriptor(taking: try documents.open(relativePath, O_RDONLY | O_NONBLOCK))
    } catch let error as SystemError where error.errno == .noEntry {
      throw ContainerError(.fileNotFound, "No file 'Documents/\(relativePath)' in \(app.bundleIdentifier)")
    } catch let error as SystemError where error.errno == .keyNotAvailable {
      throw ContainerError(
        .unavailable,
        "Cannot pull 'Documents/\(relativePath)' of \(app.bundleIdentifier): it is protected and the device is "
          + "locked; unlock it first")
    }
    // A failing fstat or a refusal closes `file` on the way out.
    guard try file.borrowed.status().type == .regular else {
      throw ContainerError(
        .invalidRequest, "Cannot pull 'Documents/\(relativePath)': it is not a regular file")
    }
    // Opening is not enough: a file the app holds open after a lock still opens.
    if try file.borrowed.encryptionPolicy() != nil, let locked = try gate()?.lockedClass(of: file.borrowed) {
      throw ContainerError(
        .unavailable,
        "Cannot pull 'Documents/\(relativePath)' of \(app.bundleIdentifier): it is protected "
          + "(\(locked.rawValue)) and the device is locked; unlock it first")
    }
    return file
  }
}

extension DeviceSession {
  /// `app`'s Documents for file sharing; denied (77) unless the app opts in.
  public func sharedDocuments(of app: AppRecord) throws -> SharedDocuments {
    try SharedDocuments(home: home(of: app)) { [self] in try protectionGate() }
  }
}
