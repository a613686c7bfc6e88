import AppboxContainer
import AppboxCore
import AppboxCrypto
import AppboxTestSupport
import Foundation
import Glibc
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

/// Files with holes get the sparse content identity (tree format 2), which every reader of the
/// repository verifies from the data alone; repositories whose sparse members carry the plain
/// SHA-256 (what appbox wrote before) still restore, check and forget.
struct SparseIdentityTests {
  /// A file of `size` bytes with `data` at each offset and holes elsewhere.
  func makeSparse(_ path: String, size: Int64, data: [(Int64, [UInt8])]) throws {
    let fd = try FileDescriptor.open(path, O_WRONLY | O_CREAT | O_TRUNC, mode: 0o644)
    try fd.closeAfter { fd in
      try fd.truncate(to: size)
      for (offset, bytes) in data { try bytes.withUnsafeBytes { try fd.writeAll($0, at: offset) } }
    }
  }

  func entry(_ name: String, of snapshot: Snapshot, in fixture: Fixture) throws -> TreeEntry? {
    let root = try fixture.repository.catalog.tree(snapshot.rootTree)
    guard let documents = root.entry(named: Array("Documents".utf8))?.digest else { return nil }
    return try fixture.repository.catalog.tree(documents).entry(named: Array(name.utf8))
  }

  func bytes(_ path: String, at offset: Int64, count: Int) throws -> [UInt8] {
    try FileDescriptor.open(path, O_RDONLY).closeAfter { fd in
      var buffer = [UInt8](repeating: 0xEE, count: count)
      let n = try buffer.withUnsafeMutableBytes { try fd.read(into: $0, at: offset) }
      return Array(buffer[0..<n])
    }
  }

  func allocated(_ path: String) throws -> Int64 {
    try FileDescriptor.open(path, O_RDONLY).closeAfter { try $0.status().allocatedBytes }
  }

  /// A 64 GiB file holding 1.1 MB: its identity is the sparse kind, computed by backup,
  /// restore and `check --read-data` from the 1.1 MB (check reports what it hashed).
  @Test func aFileWithHolesIsIdentifiedByItsData() throws {
    let fixture = try Fixture()
    let image = fixture.path("Documents/disk.img")
    try FileManager.default.createDirectory(
      atPath: fixture.path("Documents"), withIntermediateDirectories: true)
    let head = [UInt8](repeating: 0x5A, count: 100_000)
    let middle = [UInt8](repeating: 0xA5, count: 1 << 20)
    try makeSparse(image, size: 64 << 30, data: [(0, head), (40 << 30, middle)])
    // Uncompressed, so that the damage below finds the data's bytes in the archive.
    let snapshot = try fixture.backup(StoredForm.plain.options).snapshot
    let recorded = try #require(try entry("disk.img", of: snapshot, in: fixture))
    #expect(recorded.hasSparseIdentity && recorded.size == 64 << 30)
    let hasher = ContentHasher(sparse: true, size: 64 << 30)
    head.withUnsafeBytes { hasher.update($0, at: 0) }
    middle.withUnsafeBytes { hasher.update($0, at: 40 << 30) }
    #expect(recorded.digest == hasher.finalize())

    let check = try fixture.repository.check(readData: true)
    #expect(check.isClean, "\(check.problems)")
    #expect(check.bytesVerified < 4 << 20, "check hashed \(check.bytesVerified) bytes")

    try FileManager.default.removeItem(atPath: image)
    _ = try fixture.repository.restore(fixture.app.bundleIdentifier, in: fixture.session)
    #expect(try allocated(image) < 8 << 20)
    #expect(try bytes(image, at: 0, count: head.count) == head)
    #expect(try bytes(image, at: 40 << 30, count: middle.count) == middle)
    #expect(try bytes(image, at: 20 << 30, count: 4096) == [UInt8](repeating: 0, count: 4096))
    #expect((try FileManager.default.attributesOfItem(atPath: image)[.size] as? Int64) == 64 << 30)

    // A damaged byte of the data is caught by both.
    let archive = fixture.repository.archivePath(snapshot.archive)
    let contents = try Data(contentsOf: URL(fileURLWithPath: archive))
    let offset = try #require(contents.range(of: Data(middle.prefix(4096))))
    let fd = try FileDescriptor.open(archive, O_WRONLY)
    try fd.closeAfter { fd in
      try [UInt8(0x00)].withUnsafeBytes { try fd.writeAll($0, at: Int64(offset.lowerBound) + 777) }
    }
    let damaged = try fixture.repository.check(readData: true)
    #expect(damaged.problems.contains { $0.contains("disk.img") && $0.contains("does not match") })
    try FileManager.default.removeItem(atPath: image)
    #expect(throws: BackupError.self) {
      try fixture.repository.restore(fixture.app.bundleIdentifier, in: fixture.session)
    }
  }

  /// What an older appbox wrote (sparse members with the plain SHA-256 of every byte) restores,
  /// checks and goes through `forget`'s copy, beside a newer snapshot of the sparse kind.
  @Test func plainIdentitiesOfOlderSnapshotsStillVerify() throws {
    let fixture = try Fixture()
    let image = fixture.path("Documents/disk.img")
    try FileManager.default.createDirectory(
      atPath: fixture.path("Documents"), withIntermediateDirectories: true)
    let head = Array("version one".utf8)
    try makeSparse(image, size: 32 << 20, data: [(0, head), (20 << 20, head)])
    var options = BackupOptions()
    options.plainSparseIdentity = true
    let old = try fixture.backup(options).snapshot
    let oldEntry = try #require(try entry("disk.img", of: old, in: fixture))
    #expect(!oldEntry.hasSparseIdentity)
    let plain = try FileDescriptor.open(image, O_RDONLY).closeAfter { fd -> Digest in
      let hasher = SHA256Hasher()
      try hasher.update(readingFrom: fd.rawValue)
      return hasher.finalize()
    }
    #expect(oldEntry.digest == plain)
    // The same tree format as before: no entry has the flag, so the tree is version 1.
    let root = try #require(try fixture.repository.catalog.treeData(old.rootTree))
    #expect(root.first == 1)

    try fixture.trustSnapshots()
    try makeSparse(image, size: 32 << 20, data: [(0, Array("version two".utf8)), (20 << 20, head)])
    let new = try fixture.backup().snapshot
    #expect(try entry("disk.img", of: new, in: fixture)?.hasSparseIdentity == true)
    let check = try fixture.repository.check(readData: true)
    #expect(check.isClean, "\(check.problems)")

    _ = try fixture.repository.restore(fixture.app.bundleIdentifier, snapshot: old.id, in: fixture.session)
    #expect(try bytes(image, at: 0, count: head.count) == head)
    // Forget the oldest snapshot: content that only its archive holds (the bundle, and the
    // plain-identity member the third backup's entry shares) is copied out, each member
    // verified on the way by its own kind.
    try fixture.trustSnapshots()
    try makeSparse(image, size: 32 << 20, data: [(0, head), (20 << 20, head)])
    _ = try fixture.backup(options)
    _ = try fixture.repository.forget(app: fixture.app.bundleIdentifier, keepLast: 2)
    let after = try fixture.repository.check(readData: true)
    #expect(after.isClean, "\(after.problems)")
    _ = try fixture.repository.restore(fixture.app.bundleIdentifier, snapshot: new.id, in: fixture.session)
    #expect(try bytes(image, at: 0, count: 11) == Array("version two".utf8))
  }
}
