// An encrypted repository cannot be swapped for a plain one behind the device's back.
//
// Whoever can write a repository can wipe it and leave a plain `config` (or nothing): the
// next backup would write plaintext, and a restore would read whatever was planted. So a
// device remembers each location it has opened encrypted: the file `encrypted` (the
// repository id, 0600) in that location's cache directory (`<cache>/<hash of the location>/`,
// beside the catalog copy; Repository.prepareCache never removes it). Opening that location
// again finds a plain repository, a layout 1 one, or none at all: refused (65) before
// anything is read, created or written, until `repo init --allow-plain` tells the device the
// change was meant (it forgets the location, then initializes it plain).
//
// A password given (--password-file, $APPBOX_PASSWORD_FILE) says the user expects an
// encrypted repository: one that turns out plain is refused the same way (65), on any
// device, rather than the password being ignored.
//
// What this does not cover: a device that never opened the repository encrypted (or whose
// cache was deleted) and is given no password has nothing to compare with; and a repository
// rolled back to an older copy of itself is not detected (accepted by design: issue 24).

import AppboxCore
import Foundation
import Glibc

enum EncryptionMemory {
  static let fileName = "encrypted"

  /// The marker's path for `location`.
  static func path(_ location: RepositoryLocation, options: RepositoryOptions) -> String {
    options.resolvedCacheDirectory + "/" + SHA256Name.of(location.cacheKey) + "/" + fileName
  }

  /// Whether this device has opened `location` as an encrypted repository.
  static func remembers(_ location: RepositoryLocation, options: RepositoryOptions) -> Bool {
    FileManager.default.fileExists(atPath: path(location, options: options))
  }

  /// Remembers that `location` (its cache directory `directory`, made by prepareCache) is
  /// the encrypted repository `id`. Durable, so a crash right after does not forget it.
  static func remember(id: String, directory: String) throws {
    let name = directory + "/" + fileName
    if FileManager.default.contents(atPath: name).map({ Array($0) }) == Array(id.utf8) { return }
    let handle = try OwnedFileDescriptor.open(directory, O_RDONLY | O_DIRECTORY)
    let staged = try StagedFile(fileName, in: handle.borrowed, mode: 0o600)
    try staged.descriptor.writeAll(Array(id.utf8))
    try staged.commit()
  }

  /// Forgets `location` (`repo init --allow-plain`).
  static func forget(_ location: RepositoryLocation, options: RepositoryOptions) throws {
    let name = path(location, options: options)
    guard unlink(name) == 0 || Errno.current == .noEntry else {
      throw SystemError("remove", path: name)
    }
  }
}

extension Repository {
  /// Refuses (65) to use `location` as a plain repository (its config is `config`: nil for
  /// none or layout 1) when this device has used it encrypted or a password was given.
  static func refuseUnexpectedPlain(
    _ config: RepositoryConfig?, location: RepositoryLocation, options: RepositoryOptions
  ) throws {
    guard config?.encrypted != true else { return }
    let what = config == nil ? "has no encrypted repository any more" : "is now a plain repository"
    if !options.allowPlain && EncryptionMemory.remembers(location, options: options) {
      throw RepositoryError(
        .downgraded,
        "'\(location.description)' was an encrypted repository on this device and \(what): someone who can "
          + "write it may have replaced it, so nothing was read or written; if that was meant, run "
          + "'appbox repo init --repo \(location.description) --allow-plain'")
    }
    if options.passwordGiven {
      throw RepositoryError(
        .downgraded,
        "A password was given (--password-file or APPBOX_PASSWORD_FILE), but '\(location.description)' "
          + (config == nil ? "is not an encrypted repository" : "is a plain repository")
          + ": refusing to use it unencrypted; leave the password out for a plain repository")
    }
  }
}
