// Replacing a home's contents all-or-nothing: restore and import build the new contents in a
// staging directory beside the home, then swap. An app group's container is swapped the same
// way, beside it in Shared/AppGroup (the journal says `parent: AppGroup`; nothing is carried).
//
// Algorithm:
// 1. `HomeStagingArea.create` makes `ApplicationRoot/.incoming-<random>` (same file system as
//    the homes); the caller builds the new contents there. syncfs makes them durable.
// 2. `HomeSwap.swap` writes a journal (`<root>/.appbox/journal/swap-<CONTAINER-ID>.plist`:
//    the staging name, its inode, the names to carry over) durably, then
//    a. renames each carried top-level item (the bundle; for import, everything but
//       Documents and Library) from the live home into the staging directory,
//    b. exchanges the staging directory and the home with renameat2(RENAME_EXCHANGE),
//    c. makes the exchange durable and removes the journal; the old contents, now under the
//       staging name, are deleted once the command has reported (`finishDeferredWork`), so
//       deleting a large home never delays the result. Should that not happen (a crash), the
//       next recovery of everything removes them: a staging directory no journal names.
// Recovery (`HomeSwapRecovery`, run by the next mutating command under the root's lock):
// a journal means the staged contents were complete and durable, so the swap is rolled
// forward: carried items still in the home are moved, the exchange is done unless the
// home's inode already is the staging inode, the old tree is removed. A staging directory
// without a journal was still being built: it is removed, and the home never changed.
// A failure (not a crash) decides the outcome at once, so that a command that reports a
// failure has not replaced the home: before the exchange, the swap is undone (carried items
// back, the staged directory renamed to a name no journal gives, so no recovery can swap it
// in, then the journal removed); after it, the swap has happened, and a failure cleaning up
// is returned as a warning (the journal stays: the next command finishes it).
// Invariant: at every instant the home is either entirely the old contents (possibly minus
// carried items sitting in the staging directory, which the journal brings back to a
// consistent state) or entirely the new ones.

import AppboxContainer
import AppboxCore
import AppboxPlist
import AppboxRepository
import Foundation
import Glibc

/// A staging directory in ApplicationRoot for a home's new contents.
public final class HomeStagingArea {
  static let prefix = ".incoming-"
  public let name: String
  /// The staging directory, open; closed by `discard()` or by the swap.
  public let descriptor: FileDescriptor
  let applicationRoot: FileDescriptor

  private init(name: String, descriptor: FileDescriptor, applicationRoot: FileDescriptor) {
    self.name = name
    self.descriptor = descriptor
    self.applicationRoot = applicationRoot
  }

  /// Makes a new, empty staging directory (mode 0700) beside the homes, or with
  /// `forGroups`, beside the app group containers.
  public static func create(in session: DeviceSession, forGroups: Bool = false) throws -> HomeStagingArea {
    let applicationRoot = try FileDescriptor.open(
      forGroups ? session.root.appGroupRoot : session.root.applicationRoot, O_RDONLY | O_DIRECTORY)
    do {
      let name = prefix + UUID().uuidString
      try applicationRoot.makeDirectory(name, mode: 0o700)
      let descriptor = try applicationRoot.open(name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
      return HomeStagingArea(name: name, descriptor: descriptor, applicationRoot: applicationRoot)
    } catch {
      applicationRoot.close()
      throw error
    }
  }

  /// Creates the standard directories a home must have when the contents lack them
  /// (Library/Caches and tmp, which no snapshot or import holds, end up empty).
  public func addStandardDirectories() throws {
    try AppboxBackup.addStandardDirectories(in: descriptor)
  }

  /// Removes the staging directory and everything in it.
  public func discard() {
    descriptor.close()
    try? FileTree.remove(name, in: applicationRoot)
    applicationRoot.close()
  }
}

/// The journaled swap of a staging directory with a live home.
public enum HomeSwap {
  /// Which top-level items of the live home move into the new contents.
  public enum Carry: Sendable {
    /// Only the bundle (restore: everything else comes from the snapshot).
    case bundle
    /// Everything but Documents and Library (import).
    case allButData
  }

  /// The journal entry of a swap into container `containerID` (`swap-<ID>.plist`).
  static func journalName(_ containerID: String) -> String { "swap-\(containerID)" }

  /// The journal's `parent` of a swap in Shared/AppGroup (absent: ApplicationRoot).
  static let groupParent = "AppGroup"

  /// Makes `staging` (made `forGroups`) the contents of app group `group`'s container.
  /// Consumes `staging` (closes it). Returns warnings: the swap was done, but cleaning up
  /// after it failed (the next command finishes that).
  @discardableResult
  public static func swap(_ staging: HomeStagingArea, intoGroup group: GroupRecord, session: DeviceSession)
    throws -> [String]
  {
    precondition(session.isLocked(group.identifier), "swapping a group's container needs its lock")
    let journal: [String: PropertyList]
    do {
      try staging.descriptor.setPermissions(0o700)
      if let owner = GroupOwnership.dataOwner(of: group) {
        try DataOwnership.handOverTree(of: staging.descriptor, to: owner)
      }
      try staging.descriptor.syncFileSystem()
      journal = [
        "containerID": .string(group.containerID), "staging": .string(staging.name),
        "stagingInode": .integer(Int64(bitPattern: try staging.descriptor.status().inode)),
        "carry": .array([]), "parent": .string(groupParent),
      ]
    } catch {
      staging.discard()
      throw error
    }
    try writeJournal(journal, for: staging, session: session)
    CrashPoint.hit("swap.journaled")
    defer { staging.applicationRoot.close() }
    return try commit(
      try SwapRecord(PropertyListDictionary(journal)), in: staging.applicationRoot,
      journal: Journal(root: session.root), deferring: (session, session.root.appGroupRoot))
  }

  /// Makes `staging` the contents of `app`'s home, carrying items over from the old ones.
  /// Consumes `staging` (closes it).
  /// `dataOwned`: the staged data already belongs to the app's uid (restore gives it as it
  /// creates each entry), so the walk that hands it over is skipped.
  /// Either the home is swapped and this returns (with warnings when cleaning up after the
  /// swap failed: the next command finishes that), or it throws and the home is as it was.
  @discardableResult
  public static func swap(
    _ staging: HomeStagingArea, into app: AppRecord, carrying: Carry, session: DeviceSession,
    dataOwned: Bool = false
  )
    throws -> [String]
  {
    let journal = try prepare(staging, into: app, carrying: carrying, session: session, dataOwned: dataOwned)
    CrashPoint.hit("swap.journaled")
    defer { staging.applicationRoot.close() }
    return try commit(
      try SwapRecord(PropertyListDictionary(journal)), in: staging.applicationRoot,
      journal: Journal(root: session.root), deferring: (session, session.root.applicationRoot))
  }

  /// Makes the staged contents durable and writes the journal that commits the swap; from
  /// here on, recovery rolls it forward. Closes the staging descriptor (discarding the
  /// staging directory if this fails).
  static func prepare(
    _ staging: HomeStagingArea, into app: AppRecord, carrying: Carry, session: DeviceSession,
    dataOwned: Bool = false
  )
    throws -> [String: PropertyList]
  {
    precondition(session.isLocked(app.bundleIdentifier), "swapping a home needs the app's lock")
    let journal: [String: PropertyList]
    do {
      try staging.descriptor.setPermissions(0o700)
      if !dataOwned, let owner = AppUser.dataOwner(of: app) {  // the app's data belongs to its own uid
        try DataOwnership.handOverData(in: staging.descriptor, to: owner)
      }
      try staging.descriptor.syncFileSystem()
      let home = try staging.applicationRoot.open(app.containerID, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
      let carried: [[UInt8]]
      do {
        defer { home.close() }
        switch carrying {
        case .bundle:
          let bundle = Array(app.bundleDirectoryName.utf8)
          carried = try home.status(ofRawName: bundle) == nil ? [] : [bundle]
        case .allButData:
          carried = try home.entries().map(\.name).filter {
            $0 != Array("Documents".utf8) && $0 != Array("Library".utf8)
          }
        }
      }
      journal = [
        "containerID": .string(app.containerID), "staging": .string(staging.name),
        "stagingInode": .integer(Int64(bitPattern: try staging.descriptor.status().inode)),
        "carry": .array(carried.map { .data(Data($0)) }),
      ]
    } catch {
      staging.discard()
      throw error
    }
    try writeJournal(journal, for: staging, session: session)
    return journal
  }

  /// Writes the journal entry durably and closes the staging descriptor. When that fails,
  /// the entry may be in place all the same (renamed in, its directory's fsync failed):
  /// the staged directory is first renamed to a name no journal gives, so that no recovery
  /// can swap in what is being removed; if even that fails, the swap goes ahead (the
  /// journal is there, and the staged contents are whole).
  private static func writeJournal(
    _ journal: [String: PropertyList], for staging: HomeStagingArea, session: DeviceSession
  ) throws {
    let entries = Journal(root: session.root)
    guard let id = journal["containerID"]?.string else { preconditionFailure("a journal names its home") }
    do {
      try entries.write(journalName(id), journal)
      staging.descriptor.close()
    } catch {
      staging.descriptor.close()
      let retired = HomeStagingArea.prefix + UUID().uuidString
      guard (try? staging.applicationRoot.rename(staging.name, to: retired, flags: .noReplace)) != nil else {
        // Still under its journaled name: with the journal in place the swap goes on;
        // without it the home never changed (recovery removes the staged directory).
        if (try? entries.records(prefix: journalName(id)))?.isEmpty == false { return }
        staging.applicationRoot.close()
        throw error
      }
      try? entries.remove(journalName(id))
      try? FileTree.remove(retired, in: staging.applicationRoot)
      staging.applicationRoot.close()
      throw error
    }
  }

  /// Carries the items over and exchanges the directories; then cleans up. A failure before
  /// the exchange undoes the swap (carried items go back, the staged directory is retired,
  /// the journal removed) and is thrown; once the exchange is made the swap has happened, so
  /// a failure cleaning up is returned as a warning, the journal left for the next command's
  /// recovery. With `deferring` (the session, and the path of the directory holding the
  /// home), the old contents are left to the session's deferred work instead of deleted here.
  static func commit(
    _ record: SwapRecord, in applicationRoot: FileDescriptor, journal entries: Journal,
    deferring: (session: DeviceSession, parent: String)? = nil
  )
    throws
    -> [String]
  {
    do {
      try record.exchange(in: applicationRoot)
    } catch {
      if try record.isExchanged(in: applicationRoot) != true {
        do {
          try record.undo(in: applicationRoot, journal: entries)
        } catch let undoError {
          throw BackupError(
            .io,
            "\(error); undoing the swap failed too (\(undoError)): the next appbox "
              + "command completes it")
        }
        throw error
      }
    }
    CrashPoint.hit("swap.exchanged")
    do {
      if let (session, parent) = deferring {
        try record.release(in: applicationRoot, journal: entries)
        session.deferRemoval(atPath: parent + "/" + record.staging)
      } else {
        try record.cleanUp(in: applicationRoot, journal: entries)
      }
    } catch {
      // No second try: a sync that failed once may report success the next time without
      // its data having reached the disk. The journal stays; the next command finishes it.
      return [
        "the new contents are in place, but cleaning up after the swap failed (\(error)); "
          + "the next appbox command finishes it"
      ]
    }
    return []
  }

  /// Rolls a journaled swap forward from wherever it stopped (recovery).
  static func finish(
    journal: PropertyListDictionary, applicationRoot: FileDescriptor, journal entries: Journal
  )
    throws
  {
    let record = try SwapRecord(journal)
    if try record.isExchanged(in: applicationRoot) == false { try record.exchange(in: applicationRoot) }
    CrashPoint.hit("swap.exchanged")
    try record.cleanUp(in: applicationRoot, journal: entries)
  }
}

/// A journaled swap, as its journal entry records it.
struct SwapRecord {
  var containerID: String
  var staging: String
  var stagingInode: UInt64
  var carried: [[UInt8]]

  init(_ journal: PropertyListDictionary) throws {
    guard let id = journal["containerID"]?.string, let staging = journal["staging"]?.string,
      staging.hasPrefix(HomeStagingArea.prefix), !id.contains("/"),
      let inode = journal["stagingInode"]?.integer
    else { throw BackupError(.corruptCatalog, "A home swap journal in '.appbox/journal' is malformed") }
    containerID = id
    self.staging = staging
    stagingInode = UInt64(bitPattern: inode)
    carried = (journal["carry"]?.array ?? []).compactMap { $0.data.map { Array($0) } }
  }

  /// Whether the home is the staged directory: true, false, or nil when neither the home nor
  /// the staged directory is there under its name (recovery already ran).
  func isExchanged(in applicationRoot: FileDescriptor) throws -> Bool? {
    if try applicationRoot.statusIfPresent(of: containerID)?.inode == stagingInode { return true }
    guard try applicationRoot.statusIfPresent(of: staging)?.inode == stagingInode,
      try applicationRoot.statusIfPresent(of: containerID) != nil
    else { return nil }
    return false
  }

  /// Moves the carried items from the home into the staged directory, then exchanges the two.
  func exchange(in applicationRoot: FileDescriptor) throws {
    guard try isExchanged(in: applicationRoot) == false else { return }
    let home = try applicationRoot.open(containerID, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    defer { home.close() }
    let target = try applicationRoot.open(staging, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    defer { target.close() }
    for name in carried where try home.status(ofRawName: name) != nil && target.status(ofRawName: name) == nil
    {
      try home.rename(rawName: name, to: name, in: target, flags: .noReplace)
      CrashPoint.hit("swap.carried")
    }
    try applicationRoot.rename(staging, to: containerID, flags: .exchange)
  }

  /// Before the exchange: carried items back into the home, the staged directory renamed to
  /// a name no journal gives (from then on no recovery swaps it in), the journal removed,
  /// the staged directory removed (recovery removes it if this fails).
  func undo(in applicationRoot: FileDescriptor, journal entries: Journal) throws {
    let home = try applicationRoot.open(containerID, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    defer { home.close() }
    let target = try applicationRoot.open(staging, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    defer { target.close() }
    for name in carried where try home.status(ofRawName: name) == nil && target.status(ofRawName: name) != nil
    {
      try target.rename(rawName: name, to: name, in: home, flags: .noReplace)
    }
    let retired = HomeStagingArea.prefix + UUID().uuidString
    try applicationRoot.rename(staging, to: retired, flags: .noReplace)
    try? entries.remove(HomeSwap.journalName(containerID))
    try? FileTree.remove(retired, in: applicationRoot)
  }

  /// After the exchange: makes it durable, removes the old contents (now under the staging
  /// name) and the journal.
  func cleanUp(in applicationRoot: FileDescriptor, journal entries: Journal) throws {
    try applicationRoot.sync()
    try FileTree.remove(staging, in: applicationRoot)
    try entries.remove(HomeSwap.journalName(containerID))
  }

  /// After the exchange: makes it durable and removes the journal, leaving the old contents
  /// under the staging name for the caller to delete (a staging directory no journal names:
  /// recovery deletes it too, and never swaps it in).
  func release(in applicationRoot: FileDescriptor, journal entries: Journal) throws {
    try applicationRoot.sync()
    CrashPoint.hit("swap.synced")
    try entries.remove(HomeSwap.journalName(containerID))
  }
}

/// Finishes home swaps a killed appbox left half-done, and removes staging debris.
public struct HomeSwapRecovery: RecoveryStep {
  public init() {}

  public func recover(_ session: DeviceSession) throws { try recover(session, scope: .everything) }

  public func hasPendingWork(_ session: DeviceSession, bundleIdentifier: String) throws -> Bool {
    guard
      let containerID = try session.registry.appIfPresent(bundleIdentifier)?.containerID
        ?? session.registry.groupIfPresent(bundleIdentifier)?.containerID
    else { return false }
    return try !Journal(root: session.root).records(prefix: HomeSwap.journalName(containerID)).isEmpty
  }

  /// For one app (or app group), finishes the swap into its home (or container), if one was
  /// journaled. For everything, also removes staging directories no journal names (never
  /// swapped in, so the homes never changed) and bundles extracted for restores.
  public func recover(_ session: DeviceSession, scope: RecoveryScope) throws {
    let applicationRoot = try OwnedFileDescriptor.open(session.root.applicationRoot, O_RDONLY | O_DIRECTORY)
    let journal = Journal(root: session.root)
    let groupRoot = try OwnedFileDescriptor.open(session.root.appGroupRoot, O_RDONLY | O_DIRECTORY)
    var prefix = "swap-"
    if scope == .everything { try journal.removeInterruptedWrites() }
    if case .app(let identifier) = scope {
      guard
        let containerID = try session.registry.appIfPresent(identifier)?.containerID
          ?? session.registry.groupIfPresent(identifier)?.containerID
      else { return }
      prefix = HomeSwap.journalName(containerID)
    }
    var journaled: Set<String> = []
    for (_, record) in try journal.records(prefix: prefix) {
      if let staging = record["staging"]?.string { journaled.insert(staging) }
      let parent =
        record["parent"]?.string == HomeSwap.groupParent ? groupRoot.borrowed : applicationRoot.borrowed
      try HomeSwap.finish(journal: record, applicationRoot: parent, journal: journal)
    }
    guard scope == .everything else { return }
    for directory in [applicationRoot.borrowed, groupRoot.borrowed] {
      for entry in try directory.entries() {
        let name = entry.nameString
        if name.hasPrefix(HomeStagingArea.prefix) && !journaled.contains(name) {
          try FileTree.remove(name, in: directory)
        }
      }
    }
    let state = try OwnedFileDescriptor.open(session.root.stateDirectory, O_RDONLY | O_DIRECTORY)
    for entry in try state.borrowed.entries() where entry.nameString.hasPrefix(BundleRecovery.prefix) {
      try FileTree.remove(entry.nameString, in: state.borrowed)
    }
  }
}

/// Temporary directories holding a bundle extracted from a backup before it is installed.
enum BundleRecovery {
  static let prefix = DeviceRoot.temporaryBundlePrefix
}
