// Finishing the lifecycle operations a killed appbox left half-done.
//
// reset, offload, the reinstall of an offloaded app and erase each write a journal entry
// (Journal.swift: a whole plist under its final name, or nothing) before their first change:
//     reset-<CONTAINER-ID>      reset      fields: bundleIdentifier, containerID, discard,
//                                          keychain ("1"/"0"), started (seconds since 1970)
//     offload-<CONTAINER-ID>    offload    fields: bundleIdentifier, containerID, discard,
//                                          bundle (the bundle's directory name), started
//     reinstall-<CONTAINER-ID>  reinstall  fields: bundleIdentifier, containerID, staging,
//                                          bundle, seal
//     erase                     erase      fields: discard, keepBackups ("1"/"0")
// reset, offload and erase roll forward: the entry is their commit point, and every step
// after it is idempotent, so recovery runs the same steps again (AppReset.swift, Offload.swift,
// DeviceErase.swift). A reinstall commits in the registry (the row no longer offloaded, with
// the staged bundle's seal): recovery rolls it forward after that commit and back before it.
//
// What an operation sets aside (the old data, the bundle, a device's homes) goes to a discard
// directory, `ApplicationRoot/.discard-<UUID>` (reset, offload) or `.appbox/discard-<UUID>`
// (erase), renamed there in one step, and is deleted after the command has reported
// (`finishDeferredWork`): deleting never lengthens the critical path. A discard directory no
// journal entry names is what a process killed before or during that deletion left: the
// `.everything` scope deletes it.
//
// An interrupted erase concerns the whole device: only the `.everything` scope (no other
// appbox active) finishes it; meanwhile a command on an app is refused as busy (75) rather
// than read a half-erased device.

import AppboxCore
import Foundation
import Glibc

/// The names the lifecycle operations use.
enum Lifecycle {
  /// The prefix of discard directories (in ApplicationRoot, and in `.appbox`).
  static let discardPrefix = ".discard-"
  static let stateDiscardPrefix = "discard-"
  static let resetPrefix = "reset-"
  static let offloadPrefix = "offload-"
  static let reinstallPrefix = "reinstall-"
  static let eraseEntry = "erase"

  /// A new discard directory's name.
  static func newDiscardName() -> String { discardPrefix + UUID().uuidString }

  /// Creates `name` in `parent` (0700) unless it exists.
  static func makeDirectoryIfMissing(_ name: String, in parent: FileDescriptor, mode: mode_t = 0o700) throws {
    if try parent.statusIfPresent(of: name) == nil { try parent.makeDirectory(name, mode: mode) }
  }

  /// Undoes what a reset or offload set aside, after `error` stopped it: each of `names` goes
  /// back from discard `discardName` (in ApplicationRoot) into home `containerID`, replacing
  /// what was made in its place, then the discard and the journal `entry` go. A rollback that
  /// fails too leaves the entry, and the next appbox command finishes the operation instead;
  /// the error then says so.
  static func rollBack(
    _ entry: String, in journal: Journal, putting names: [String], backInto containerID: String,
    from discardName: String, root: DeviceRoot, after error: any Error
  ) throws {
    do {
      let applicationRoot = try OwnedFileDescriptor.open(root.applicationRoot, O_RDONLY | O_DIRECTORY)
      if try applicationRoot.borrowed.statusIfPresent(of: discardName) != nil {
        let discard = try applicationRoot.borrowed.openOwned(discardName, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
        let home = try applicationRoot.borrowed.openOwned(containerID, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
        for name in names where try discard.borrowed.statusIfPresent(of: name) != nil {
          if try home.borrowed.statusIfPresent(of: name) != nil {
            try FileTree.remove(name, in: home.borrowed)
          }
          try discard.borrowed.rename(name, to: name, in: home.borrowed, flags: .noReplace)
        }
        try home.borrowed.sync()
        try FileTree.remove(discardName, in: applicationRoot.borrowed)
      }
      try journal.remove(entry)
    } catch let rollback {
      throw RollbackFailure(
        kind: (error as? any AppboxFailure)?.kind ?? .io,
        message: "\(error); undoing it failed too (\(rollback)): the next appbox command finishes it instead")
    }
  }

  /// An operation that failed and could not be undone (the next command rolls it forward).
  struct RollbackFailure: AppboxFailure {
    var kind: FailureKind
    var message: String
    var description: String { message }
  }

  /// Moves `name` from `source` into `discard` unless it was moved already (it is absent
  /// from `source`, or present in `discard`). Idempotent; one rename.
  static func setAside(_ name: String, from source: FileDescriptor, into discard: FileDescriptor) throws {
    guard try discard.statusIfPresent(of: name) == nil, try source.statusIfPresent(of: name) != nil else {
      return
    }
    try source.rename(name, to: name, in: discard, flags: .noReplace)
  }
}

/// Finishes interrupted resets, offloads, reinstalls and erases (see the header). Runs
/// after `UpdateRecovery` and before `ContainerRecovery`, which would otherwise take a
/// reinstall's staging home for debris.
public struct LifecycleRecovery: RecoveryStep {
  public init() {}

  public func recover(_ session: DeviceSession) throws { try recover(session, scope: .everything) }

  private static let appPrefixes = [
    Lifecycle.resetPrefix, Lifecycle.offloadPrefix, Lifecycle.reinstallPrefix,
  ]

  public func hasPendingWork(_ session: DeviceSession, bundleIdentifier: String) throws -> Bool {
    let journal = Journal(root: session.root)
    if try !journal.entries(prefix: Lifecycle.eraseEntry).isEmpty { return true }
    return try Self.appPrefixes.contains { prefix in
      try journal.entries(prefix: prefix).contains { $0.fields["bundleIdentifier"] == bundleIdentifier }
    }
  }

  public func recover(_ session: DeviceSession, scope: RecoveryScope) throws {
    let journal = Journal(root: session.root)
    if let erase = try journal.entries(prefix: Lifecycle.eraseEntry).first(where: {
      $0.name == Lifecycle.eraseEntry
    }) {
      guard scope == .everything else {
        throw ContainerError(
          .tryLater,
          "An interrupted 'device erase' of \(session.root.path) is not finished yet; the next appbox command "
            + "that runs while no other appbox is active finishes it: try again")
      }
      try session.finishErase(erase.fields)
      try journal.remove(erase.name)
      session.deferRemoval(atPath: session.root.stateDirectory + "/" + (erase.fields["discard"] ?? ""))
    }
    for prefix in Self.appPrefixes {
      for (name, fields) in try journal.entries(prefix: prefix) {
        guard let bundle = fields["bundleIdentifier"], fields["containerID"] != nil else {
          throw ContainerError(.invalidDevice, "Journal entry '\(name)' lacks its app; inspect it by hand")
        }
        if case .app(let identifier) = scope, identifier != bundle { continue }
        switch prefix {
        case Lifecycle.resetPrefix: _ = try session.finishReset(fields)
        case Lifecycle.offloadPrefix: try session.finishOffload(fields)
        default: try session.finishReinstall(fields)
        }
        try journal.remove(name)
        if let discard = fields["discard"] { session.deferRemoval(ofTrash: discard) }
      }
    }
    if scope == .everything { try removeUnnamedDiscards(session, journal: journal) }
  }

  /// Deletes the discard directories no journal entry names (left by a process killed while
  /// it deleted them, or before).
  private func removeUnnamedDiscards(_ session: DeviceSession, journal: Journal) throws {
    var named = Set<String>()
    for prefix in Self.appPrefixes + [Lifecycle.eraseEntry] {
      for (_, fields) in try journal.entries(prefix: prefix) {
        if let discard = fields["discard"] { named.insert(discard) }
      }
    }
    for (directory, prefix) in [
      (session.root.applicationRoot, Lifecycle.discardPrefix),
      (session.root.stateDirectory, Lifecycle.stateDiscardPrefix),
    ] {
      let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
      let parent = try OwnedFileDescriptor.open(directory, O_RDONLY | O_DIRECTORY)
      for name in names where name.hasPrefix(prefix) && !named.contains(name) {
        try FileTree.remove(name, in: parent.borrowed)
      }
    }
  }
}

extension DeviceSession {
  /// The end of a journaled reset or offload, once its entry (`fields`, with its discard) is
  /// written: runs `finish`; a failure there (not a kill) puts `names` back into home
  /// `containerID` (`Lifecycle.rollBack`) and is rethrown. Then the journal entry goes (a
  /// failure to remove it is a warning: the next appbox command removes it), crash point
  /// `finishedPoint` is hit and the discard's removal is deferred past the report.
  func completeJournaled<Result>(
    _ operation: String, entry: String, in journal: Journal, fields: [String: String],
    putting names: [String], backInto containerID: String, finishedPoint: StaticString,
    finish: () throws -> Result
  ) throws -> (Result, warnings: [String]) {
    let result: Result
    do {
      result = try finish()
    } catch {
      try Lifecycle.rollBack(
        entry, in: journal, putting: names, backInto: containerID, from: fields["discard"]!, root: root,
        after: error)
      throw error
    }
    var warnings: [String] = []
    do {
      try journal.remove(entry)
    } catch {
      warnings.append(
        "the \(operation) is done, but its journal entry stays (\(error)); the next appbox command removes it"
      )
    }
    CrashPoint.hit(finishedPoint)
    deferRemoval(ofTrash: fields["discard"]!)
    return (result, warnings)
  }
}
