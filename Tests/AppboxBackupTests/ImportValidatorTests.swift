import Testing

@testable import AppboxBackup

struct ImportValidatorTests {
  func facts(
    _ path: String, _ kind: ArchiveEntryFacts.Kind = .regular, size: Int64 = 1, permissions: UInt32 = 0o644
  )
    -> ArchiveEntryFacts
  {
    ArchiveEntryFacts(
      path: Array(path.utf8), kind: kind, permissions: permissions, size: size, attributeNames: [])
  }

  @Test func impliesMissingParentsOnce() throws {
    var validator = ImportValidator(maxEntries: 10, maxBytes: 100)
    let (_, implied) = try validator.admit(facts("Documents/a/b/c.txt"))
    #expect(
      implied.map { String(decoding: $0, as: UTF8.self) } == ["Documents", "Documents/a", "Documents/a/b"])
    let (_, again) = try validator.admit(facts("Documents/a/d.txt"))
    #expect(again.isEmpty)
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

  @Test func symlinksInsideTheHomeAreAccepted() throws {
    var validator = ImportValidator(maxEntries: 10, maxBytes: 100)
    _ = try validator.admit(facts("Documents/up", .symlink(Array("../Library/Preferences".utf8))))
    _ = try validator.admit(facts("Library/self", .symlink(Array("./.././Library".utf8))))
    _ = try validator.admit(facts("Documents/via", .symlink(Array("up/../../Documents".utf8))))
    try validator.checkSymlinks()
  }

  @Test func aLinkResolvedThroughAnotherLinkMustStayInside() throws {
    var validator = ImportValidator(maxEntries: 10, maxBytes: 100)
    _ = try validator.admit(facts("Documents/deep", .symlink(Array("../Library/Preferences".utf8))))
    _ = try validator.admit(facts("Documents/out", .symlink(Array("deep/../../..".utf8))))
    #expect(throws: BackupError.self) { try validator.checkSymlinks() }
  }

  @Test func aHardLinkMayNameAFileThatIsItselfAHardLink() throws {
    var validator = ImportValidator(maxEntries: 10, maxBytes: 100)
    _ = try validator.admit(facts("Documents/a"))
    _ = try validator.admit(facts("Documents/b", .hardlink(Array("Documents/a".utf8))))
    _ = try validator.admit(facts("Documents/c", .hardlink(Array("Documents/b".utf8))))
  }
}
