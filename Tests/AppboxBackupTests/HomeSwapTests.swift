import AppboxContainer
import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

/// Where a swap was interrupted, for recovery to pick up.
enum InterruptedAt: String, CaseIterable, Sendable {
  case afterJournal, afterCarry, afterExchange
}

struct HomeSwapTests {
  /// A fixture whose home holds "old" data, and a staging area holding "new" data.
  func prepared() throws -> (Fixture, HomeStagingArea) {
    let fixture = try Fixture()
    try fixture.write("Documents/which", "new")
    try fixture.write("Library/Preferences/p.plist", "new prefs")
    _ = try fixture.backup()
    try fixture.write("Documents/which", "old")
    try fixture.write("Documents/only-old", "old")
    try fixture.write("tmp/scratch", "old")
    let staging = try HomeStagingArea.create(in: fixture.session)
    let snapshot = try fixture.repository.snapshot("latest", app: fixture.app.bundleIdentifier)
    _ = try fixture.repository.materialize(
      snapshot, part: .data, into: staging.descriptor, standardDirectories: true)
    return (fixture, staging)
  }

  func expectSwapped(_ fixture: Fixture) throws {
    #expect(
      String(
        decoding: try Data(contentsOf: URL(fileURLWithPath: fixture.path("Documents/which"))), as: UTF8.self)
        == "new")
    #expect(!FileManager.default.fileExists(atPath: fixture.path("Documents/only-old")))
    #expect(fixture.names(in: "tmp").isEmpty)
    #expect(try Seal.verify(bundleAt: fixture.path("Notes.app"), expectedDigest: fixture.app.seal).isValid)
    #expect(
      try FileManager.default.contentsOfDirectory(atPath: fixture.root.applicationRoot) == [
        fixture.app.containerID
      ])
    #expect(try FileManager.default.contentsOfDirectory(atPath: fixture.root.journalDirectory).isEmpty)
  }

  /// The old contents are deleted after the command's report (the session's deferred work):
  /// until then they wait under the staging name with no journal naming them, which recovery
  /// deletes and never swaps in.
  @Test func swapReplacesTheDataAndKeepsTheBundle() throws {
    let (fixture, staging) = try prepared()
    let name = staging.name
    try HomeSwap.swap(staging, into: fixture.app, carrying: .bundle, session: fixture.session)
    #expect(fixture.session.hasDeferredWork)
    #expect(FileManager.default.fileExists(atPath: fixture.root.applicationRoot + "/" + name + "/Documents/only-old"))
    #expect(try FileManager.default.contentsOfDirectory(atPath: fixture.root.journalDirectory).isEmpty)
    #expect(fixture.session.finishDeferredWork().isEmpty)
    try expectSwapped(fixture)
  }

  @Test func oldContentsLeftByACrashAfterTheSwapAreDeletedByRecovery() throws {
    let (fixture, staging) = try prepared()
    let name = staging.name
    try HomeSwap.swap(staging, into: fixture.app, carrying: .bundle, session: fixture.session)
    // Killed before the deferred work: the next command's recovery of everything.
    #expect(FileManager.default.fileExists(atPath: fixture.root.applicationRoot + "/" + name))
    try HomeSwapRecovery().recover(fixture.session)
    try expectSwapped(fixture)
  }

  @Test(arguments: InterruptedAt.allCases)
  func recoveryRollsAJournaledSwapForward(_ point: InterruptedAt) throws {
    let (fixture, staging) = try prepared()
    let name = staging.name
    _ = try HomeSwap.prepare(staging, into: fixture.app, carrying: .bundle, session: fixture.session)
    let applicationRoot = fixture.root.applicationRoot
    if point != .afterJournal {
      #expect(rename(fixture.path("Notes.app"), applicationRoot + "/" + name + "/Notes.app") == 0)
    }
    if point == .afterExchange {
      let fd = try FileDescriptor.open(applicationRoot, O_RDONLY | O_DIRECTORY)
      try fd.closeAfter { try $0.rename(name, to: fixture.app.containerID, flags: .exchange) }
    }
    try HomeSwapRecovery().recover(fixture.session)
    try expectSwapped(fixture)
  }

  @Test func stagingWithoutAJournalIsDiscardedAndTheHomeKept() throws {
    let (fixture, staging) = try prepared()
    staging.descriptor.close()
    try HomeSwapRecovery().recover(fixture.session)
    #expect(
      String(
        decoding: try Data(contentsOf: URL(fileURLWithPath: fixture.path("Documents/which"))), as: UTF8.self)
        == "old")
    #expect(
      try FileManager.default.contentsOfDirectory(atPath: fixture.root.applicationRoot) == [
        fixture.app.containerID
      ])
  }

  @Test func importCarriesEverythingButDocumentsAndLibrary() throws {
    let (fixture, staging) = try prepared()
    try staging.descriptor.remove("tmp", directory: true)  // an import builds only Documents and Library
    try HomeSwap.swap(staging, into: fixture.app, carrying: .allButData, session: fixture.session)
    #expect(fixture.names(in: "tmp") == ["scratch"])
    #expect(FileManager.default.fileExists(atPath: fixture.path(Home.metadataFile)))
    #expect(!FileManager.default.fileExists(atPath: fixture.path("Documents/only-old")))
  }

  /// One journal rule for swaps and updates: an interrupted write (a temp file) never took
  /// effect and goes; an entry under its final name that cannot be decoded is damage, and
  /// recovery stops (exit 65) without touching the home or the staged data.
  @Test func aDamagedJournalStopsRecoveryAndAnInterruptedOneIsDiscarded() throws {
    let (fixture, staging) = try prepared()
    let name = staging.name
    _ = try HomeSwap.prepare(staging, into: fixture.app, carrying: .bundle, session: fixture.session)
    let journals = fixture.root.journalDirectory
    let entry = journals + "/swap-\(fixture.app.containerID).plist"
    let before = try #require(FileManager.default.contents(atPath: entry))
    try Data("not a property list".utf8).write(to: URL(fileURLWithPath: entry))
    try Data("torn".utf8).write(to: URL(fileURLWithPath: journals + "/.swap-x.plist.tmp-1234abcd"))
    let update = journals + "/update-0000.plist"
    try Data([0x62, 0x70, 0x6C]).write(to: URL(fileURLWithPath: update))
    for step in [HomeSwapRecovery() as any RecoveryStep, UpdateRecovery()] {
      do {
        try step.recover(fixture.session)
        Issue.record("\(step) recovered from a damaged journal")
      } catch let error as ContainerError {
        #expect(error.kind == .badData && error.message.contains("is damaged"))
      }
    }
    #expect(
      try FileManager.default.contentsOfDirectory(atPath: journals).sorted() == [
        "swap-\(fixture.app.containerID).plist", "update-0000.plist",
      ])
    #expect(unlink(update) == 0)
    #expect(FileManager.default.fileExists(atPath: fixture.root.applicationRoot + "/" + name))
    #expect(
      String(
        decoding: try Data(contentsOf: URL(fileURLWithPath: fixture.path("Documents/which"))), as: UTF8.self)
        == "old")
    // Repaired by hand, the same journal rolls forward.
    try before.write(to: URL(fileURLWithPath: entry))
    try HomeSwapRecovery().recover(fixture.session)
    try expectSwapped(fixture)
  }
}
