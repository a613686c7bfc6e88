// What the exit statuses commands share mean for them, written once (the general meaning of
// each status is `ExitStatus.meanings`). Every page shows 0, 64 and 74 besides these.

extension ExitCode {
  static let noApp = noInput("No such app on the device.")
  static let appBusy = busy(
    "Another appbox holds the app's or the device's lock (wait with --wait SECONDS), or the app is running.")
  static let deviceBusy = busy("Another appbox holds the device's lock (wait with --wait SECONDS).")
  static let protectedData = unavailable(
    "The device is locked and the app's protected files are unavailable (appbox device unlock).")
  static let noSnapshot = noInput("No such snapshot, app or repository.")
  static let noRepository = noInput("No such repository.")
  static let damaged = dataError(
    "A damaged archive, manifest or catalog (appbox check says more), or a plain repository where this "
      + "device used an encrypted one (see repo init --allow-plain).")
  static let repositoryDenied = denied("A wrong repository password, or S3 credentials the store refused.")
  static let storeUnavailable = unavailable("The S3 store cannot be reached, or keeps failing.")
  static let repositoryBusy = busy(
    "Another appbox holds the repository's or the app's lock (wait with --wait SECONDS).")

  /// What reaching a repository can end in.
  static let repository: [ExitCode] = [
    damaged, noSnapshot, storeUnavailable, repositoryBusy, repositoryDenied,
  ]
}
