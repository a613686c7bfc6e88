// File sharing: an app's Documents as the user's desktop sees it.
//
// Only apps whose Info.plist sets UIFileSharingEnabled get it (otherwise: denied, 77).
// Every path inside the app is relative to Documents and resolved on disk beneath
// Documents' descriptor (ContainedDirectory: openat2 RESOLVE_BENEATH, or an O_NOFOLLOW
// walk), so `..`, absolute paths and symlinks the app planted that lead out of
// Documents are refused (77) before anything is read or written. Writes go to a temp
// file beside the destination and are renamed over it; a symlink at the destination
// name is replaced, never followed. Paths on the host side are the user's own and are
// used as given.

import AppboxCore
import Foundation
import Glibc

/// One entry of a Documents listing.
public struct SharedFileEntry: Sendable, Equatable {
  public var name: String
  public var type: FileType
  /// Bytes (for a symlink, the length of its target).
  public var size: Int64
  public var modificationTime: Timespec
  /// Where a symlink points (shown, never followed).
  public var symlinkTarget: String?
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

  init(home: Home) throws {
    app = home.app
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
  /// `A.txt` and `a.txt` are two entries. Symlinks are listed, not followed.
  public func list(_ directory: String? = nil) throws -> [SharedFileEntry] {
    let fd: FileDescriptor
    if let directory {
      fd = try documents.open(try relative(directory), O_RDONLY | O_DIRECTORY)
    } else {
      fd = try documents.descriptor.duplicate()
    }
    defer { fd.close() }
    var result: [SharedFileEntry] = []
    for entry in try fd.entries().sorted(by: { $0.name.lexicographicallyPrecedes($1.name) }) {
      guard let status = try? withCName(entry.name, { try fd.status(of: String(cString: $0)) }) else {
        continue
      }
      var target: String?
      if status.type == .symlink {
        target = (try? fd.readLink(entry.nameString)).map { String(decoding: $0, as: UTF8.self) }
      }
      result.append(
        SharedFileEntry(
          name: entry.nameString, type: status.type, size: status.size,
          modificationTime: status.modificationTime,
          symlinkTarget: target))
    }
    return result
  }

  /// Copies the host file `source` ("-": stdin) into Documents at `destination`
  /// (default: the source's name; an existing folder receives the file under the
  /// source's name), replacing what is there atomically.
  public func push(from source: String, to destination: String?) throws -> FileTransfer {
    let sourceName = splitPath(source).name
    if destination == nil && source == "-" {
      throw ContainerError(.invalidRequest, "Name the destination in Documents when pushing from stdin")
    }
    let input =
      source == "-" ? try FileDescriptor(rawValue: 0).duplicate() : try FileDescriptor.open(source, O_RDONLY)
    defer { input.close() }
    if try input.status().type == .directory {
      throw ContainerError(
        .invalidRequest, "Cannot push '\(source)': it is a directory (push files one by one)")
    }
    let target = try resolveDestination(destination ?? sourceName, sourceName: sourceName)
    defer { target.close() }
    let shown = "Documents/\(target.relative)"
    if try target.status()?.type == .directory {
      throw ContainerError(.invalidRequest, "Cannot push to '\(shown)': it is a folder")
    }
    let bytes = try AtomicFile.copy(from: input, to: target.name, in: target.parent, displayPath: shown)
    if let owner = AppUser.dataOwner(of: app) {
      try DataOwnership.handOver(target.name, in: target.parent, to: owner)
    }
    return FileTransfer(path: shown, bytes: bytes)
  }

  /// The bytes of the file at `path` in Documents.
  public func pull(_ path: String) throws -> [UInt8] {
    let file = try openForReading(path)
    return try file.closeAfter { try $0.readAll() }
  }

  /// Copies the file at `path` in Documents to the host path `destination` (an existing
  /// folder receives it under its own name), replacing what is there atomically.
  public func pull(_ path: String, to destination: String) throws -> FileTransfer {
    let file = try openForReading(path)
    defer { file.close() }
    var hostPath = destination
    var isDirectory: ObjCBool = false
    if FileManager.default.fileExists(atPath: destination, isDirectory: &isDirectory), isDirectory.boolValue {
      hostPath =
        (destination.hasSuffix("/") ? destination : destination + "/") + (try relative(path)).lastComponent
    }
    let (directoryPath, name) = splitPath(hostPath)
    guard !name.isEmpty else {
      throw ContainerError(.invalidRequest, "Name a file to pull into, not '\(destination)'")
    }
    let directory = try FileDescriptor.open(directoryPath, O_RDONLY | O_DIRECTORY)
    defer { directory.close() }
    let bytes = try AtomicFile.copy(from: file, to: name, in: directory, displayPath: hostPath)
    return FileTransfer(path: hostPath, bytes: bytes)
  }

  /// Removes the file, symlink (not what it points to) or folder tree at `path`.
  /// Returns "Documents/…".
  public func remove(_ path: String) throws -> String {
    let target = try documents.resolveParent(of: try relative(path))
    defer { target.close() }
    let shown = "Documents/\(target.relative)"
    guard try target.status() != nil else {
      throw ContainerError(.fileNotFound, "No file '\(shown)' in \(app.bundleIdentifier)")
    }
    try FileTree.remove(target.name, in: target.parent)
    try target.parent.sync()
    return shown
  }

  private func relative(_ path: String) throws -> RelativePath {
    try RelativePath(validating: path, container: "Documents")
  }

  /// The destination's parent and name: `path` itself, or `sourceName` inside it when
  /// `path` is an existing folder (symlinks followed only while they stay in Documents).
  private func resolveDestination(_ path: String, sourceName: String) throws -> ContainedPath {
    let destination = try relative(path)
    do {
      try documents.open(destination, O_RDONLY | O_DIRECTORY).close()
    } catch let error as SystemError where error.errno == .notDirectory || error.errno == .noEntry {
      if path.hasSuffix("/") {
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
  private func openForReading(_ path: String) throws -> FileDescriptor {
    let relativePath = try relative(path)
    let file: FileDescriptor
    do {
      file = try documents.open(relativePath, O_RDONLY | O_NONBLOCK)
    } catch let error as SystemError where error.errno == .noEntry {
      throw ContainerError(.fileNotFound, "No file 'Documents/\(relativePath)' in \(app.bundleIdentifier)")
    } catch let error as SystemError where error.errno == .keyNotAvailable {
      throw ContainerError(
        .unavailable,
        "Cannot pull 'Documents/\(relativePath)' of \(app.bundleIdentifier): it is protected and the device is "
          + "locked; unlock it first")
    }
    guard try file.status().type == .regular else {
      file.close()
      throw ContainerError(
        .invalidRequest, "Cannot pull 'Documents/\(relativePath)': it is not a regular file")
    }
    return file
  }
}

extension DeviceSession {
  /// `app`'s Documents for file sharing; denied (77) unless the app opts in.
  public func sharedDocuments(of app: AppRecord) throws -> SharedDocuments {
    try SharedDocuments(home: home(of: app))
  }
}
