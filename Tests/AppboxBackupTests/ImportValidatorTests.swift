import Testing

@testable import AppboxBackup
@testable import AppboxRepository

struct ImportValidatorTests {
  func facts(
    _ path: String, _ kind: ArchiveEntryFacts.Kind = .regular, size: Int64 = 1, data: Int64? = nil,
    permissions: UInt32 = 0o644
  )
    -> ArchiveEntryFacts
  {
    ArchiveEntryFacts(
      path: Array(path.utf8), kind: kind, permissions: permissions, size: size, dataSize: data ?? size,
      attributeNames: [])
  }

  @Test func impliesMissingParentsOnce() throws {
    var validator = ImportValidator(maxEntries: 10, maxBytes: 100)
    // Documents, Documents/a and Documents/a/b are implied: the member's three parents.
    #expect(try validator.admit(facts("Documents/a/b/c.txt")).impliedCount == 3)
    #expect(try validator.admit(facts("Documents/a/d.txt")).impliedCount == 0)
    #expect(try validator.admit(facts("Documents/a/e/f/g.txt")).impliedCount == 2)
    #expect(try validator.admit(facts("Documents/h/i.txt")).impliedCount == 1)
    // A directory named after an implied one is fine; a file is not.
    _ = try validator.admit(facts("Documents/a", .directory))
    #expect(throws: BackupError.self) { try validator.admit(facts("Documents/a/b")) }
  }

  @Test func sizesAddUpAgainstTheLimit() throws {
    var validator = ImportValidator(maxEntries: 10, maxBytes: 100)
    _ = try validator.admit(facts("Documents/a", size: 60))
    _ = try validator.admit(facts("Documents/b", size: 40))
    #expect(throws: BackupError.self) { try validator.admit(facts("Documents/c", size: 1)) }
  }

  /// A link is data: its target is kept as it is and never followed, wherever it points.
  @Test func symlinkTargetsAreData() throws {
    var validator = ImportValidator(maxEntries: 10, maxBytes: 100)
    _ = try validator.admit(facts("Documents/up", .symlink(Array("../Library/Preferences".utf8))))
    _ = try validator.admit(facts("Documents/etc", .symlink(Array("/etc/passwd".utf8))))
    _ = try validator.admit(facts("Documents/out", .symlink(Array("../../../..".utf8))))
    #expect(throws: BackupError.self) { try validator.admit(facts("Documents/empty", .symlink([]))) }
    // Writing through one is still refused.
    #expect(throws: BackupError.self) { try validator.admit(facts("Documents/etc/shadow")) }
  }

  @Test func apparentSizeAndDataAreCappedApart() throws {
    var validator = ImportValidator(maxEntries: 10, maxBytes: 1 << 40, maxDataBytes: 1000)
    // A terabyte of holes around 10 bytes of data fits; 2000 bytes of data do not.
    _ = try validator.admit(facts("Documents/sparse", size: 1 << 39, data: 10))
    #expect(throws: BackupError.self) { try validator.admit(facts("Documents/dense", size: 2000)) }
    #expect(throws: BackupError.self) { try validator.admit(facts("Documents/huge", size: 1 << 40, data: 0)) }
  }

  @Test func everyMemberCountsAgainstTheMemberCap() throws {
    var validator = ImportValidator(maxEntries: 2, maxBytes: 100)
    try validator.count()
    try validator.count()
    #expect(throws: BackupError.self) { try validator.count() }
  }

  @Test func aHardLinkMayNameAFileThatIsItselfAHardLink() throws {
    var validator = ImportValidator(maxEntries: 10, maxBytes: 100)
    _ = try validator.admit(facts("Documents/a"))
    _ = try validator.admit(facts("Documents/b", .hardlink(Array("Documents/a".utf8))))
    _ = try validator.admit(facts("Documents/c", .hardlink(Array("Documents/b".utf8))))
  }
}
