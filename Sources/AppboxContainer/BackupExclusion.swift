// "Exclude from backup": the platform's per-file attribute, kept as the extended
// attribute `user.appbox.exclude-from-backup` (its presence is what counts).
//
// Only Documents and Library (except Library/Caches) are backed up, so only files and
// folders there can be excluded; anything else is refused with a message saying it is
// never backed up anyway. The rest of the path is resolved beneath Documents' or
// Library's descriptor, and the final entry is never a symlink (77): the attribute
// goes on the file or folder itself.

import AppboxCore
import Foundation
import Glibc

extension DeviceSession {
  /// Marks (or with `excluded: false`, unmarks) the file or folder at `path` (relative to
  /// the home, such as `Documents/big.bin`) "exclude from backup". Returns the path as
  /// resolved, relative to the home.
  @discardableResult
  public func setExcludedFromBackup(_ path: String, excluded: Bool, of app: AppRecord) throws -> String {
    let relative = try RelativePath(validating: path, container: "the home")
    let top = relative.components[0]
    let second = relative.components.dropFirst().first
    guard top == "Documents" || (top == "Library" && second != "Caches") else {
      let reason: String
      if top == "tmp" || (top == "Library" && second == "Caches") {
        reason =
          "'\(relative)' is never backed up (tmp and Library/Caches never are), so there is nothing to exclude"
      } else if top == app.bundleDirectoryName {
        reason = "'\(relative)' is in the sealed bundle, which is backed up whole and cannot be marked"
      } else {
        reason =
          "Only files and folders in Documents and Library can be excluded from backup, not '\(relative)'"
      }
      throw ContainerError(.invalidRequest, reason)
    }
    let home = try FileDescriptor.open(self.home(of: app).path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    defer { home.close() }
    let parent: FileDescriptor
    let name: String
    if relative.components.count == 1 {
      parent = try home.duplicate()
      name = top
    } else {
      let folder = ContainedDirectory(
        descriptor: try home.open(top, O_RDONLY | O_DIRECTORY | O_NOFOLLOW), container: top)
      defer { folder.close() }
      let rest = try RelativePath(
        validating: relative.components.dropFirst().joined(separator: "/"), container: top)
      let resolved: ContainedPath
      do {
        resolved = try folder.resolveParent(of: rest)
      } catch var error as ContainmentError {
        error.path = "\(top)/\(error.path)"
        throw error
      }
      parent = resolved.parent
      name = resolved.name
    }
    defer { parent.close() }
    let file = try openEntry(name, in: parent, shown: relative.description, app: app)
    try file.closeAfter { file in
      if excluded {
        try file.setExtendedAttribute(excludeFromBackupAttribute, Array("1".utf8))
      } else {
        try file.removeExtendedAttribute(excludeFromBackupAttribute)
      }
    }
    return relative.description
  }

  /// Opens a file or folder for setting attributes, refusing a symlink, and anything
  /// else that is neither (O_NONBLOCK, so a FIFO cannot hang appbox).
  private func openEntry(_ name: String, in parent: FileDescriptor, shown: String, app: AppRecord) throws
    -> FileDescriptor
  {
    guard let status = try parent.statusIfPresent(of: name) else {
      throw ContainerError(.fileNotFound, "No file or folder '\(shown)' in \(app.bundleIdentifier)")
    }
    switch status.type {
    case .symlink: throw ContainmentError(path: shown, reason: .symlink, container: "the home")
    case .regular, .directory: break
    default: throw ContainerError(.invalidRequest, "'\(shown)' is neither a file nor a folder")
    }
    let file = try parent.open(name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK, displayPath: shown)
    let opened = try file.status()
    guard opened.inode == status.inode, opened.device == status.device else {
      file.close()
      throw ContainerError(.invalidRequest, "'\(shown)' changed while appbox opened it; try again")
    }
    return file
  }
}
