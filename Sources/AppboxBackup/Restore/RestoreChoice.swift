// Which snapshot `restore APP` takes when none is named.
//
// Rule: the newest snapshot of the installed version (snapshots record the app's version
// when they were taken). So after `update` to 2.0 and `revert` to 1.0 a plain restore brings
// 1.0's data back, never the 2.0 data the revert saved. When the installed version has no
// snapshot, or the app is not installed (the restore would install a bundle from the
// backup), nothing is guessed: the refusal (66) names the version the newest snapshot would
// bring and asks for it by id. `--snapshot latest` still names the newest of all, explicitly.

import AppboxContainer
import AppboxRepository

extension Repository {
  /// The snapshot a restore of `name` (a bundle identifier or container id) takes by default
  /// on the device of `session`: the newest of the installed version. Throws
  /// `.notFound` (66) naming what `--snapshot` would restore otherwise.
  public func defaultRestoreSnapshot(of name: String, in session: DeviceSession) throws -> Snapshot {
    let installed = try session.registry.appIfPresent(name)
    let identifier = installed?.bundleIdentifier ?? name
    let all = try catalog.snapshots(app: identifier)
    guard let newest = all.last else {
      throw BackupError(.notFound, "No snapshots of '\(identifier)' in '\(path)'")
    }
    let newestVersion = newest.version.isEmpty ? "an unknown version" : "version \(newest.version)"
    guard let installed else {
      throw BackupError(
        .notFound,
        "\(identifier) is not installed: its newest snapshot, \(newest.id), would install \(newestVersion); "
          + "name the snapshot to restore with --snapshot \(newest.id) (or another id from "
          + "'appbox snapshots \(identifier)')")
    }
    if let match = all.last(where: { $0.version == installed.version }) { return match }
    throw BackupError(
      .notFound,
      "No snapshot of \(identifier) \(installed.version) (the installed version) in '\(path)': its newest, "
        + "\(newest.id), holds the data of \(newestVersion); to put it under \(installed.version), name it "
        + "with --snapshot \(newest.id)")
  }
}
