import AppboxCore
import Glibc
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

struct ChangeDetectorTests {
  static let snapshotStart: Int64 = 2_000_000_000_000_000_000

  static func status(
    size: Int64 = 10, mtime: Int64 = 1_000, ctime: Int64 = 1_000_000_000_000_000_000,
    inode: UInt64 = 7, mode: mode_t = S_IFREG | 0o644
  ) -> FileStatus {
    var st = stat()
    st.st_size = Int(size)
    st.st_mtim = Timespec(totalNanoseconds: mtime).asTimespec
    st.st_ctim = Timespec(totalNanoseconds: ctime).asTimespec
    st.st_ino = UInt(inode)
    st.st_mode = mode
    st.st_nlink = 1
    return FileStatus(st)
  }

  static func entry(for status: FileStatus) -> TreeEntry {
    var entry = TreeEntry(name: Array("f".utf8), status: status, type: TreeEntryType(status.type)!)
    entry.digest = nil
    return entry
  }

  @Test func identicalStatIsUnchanged() {
    let status = Self.status()
    #expect(
      ChangeDetector.isUnchanged(status, previous: Self.entry(for: status), trustedBefore: Self.snapshotStart)
    )
  }

  @Test func noPreviousEntryMeansChanged() {
    #expect(!ChangeDetector.isUnchanged(Self.status(), previous: nil, trustedBefore: Self.snapshotStart))
  }

  @Test(arguments: [
    status(size: 11), status(mtime: 1_001), status(ctime: 1_000_000_000_000_000_001), status(inode: 8),
    status(mode: S_IFREG | 0o600), status(mode: S_IFLNK | 0o644),
  ])
  func anyDifferingFieldMeansChanged(_ current: FileStatus) {
    let previous = Self.entry(for: Self.status())
    #expect(!ChangeDetector.isUnchanged(current, previous: previous, trustedBefore: Self.snapshotStart))
  }

  @Test func entriesChangedJustBeforeThePreviousSnapshotAreNotTrusted() {
    let ctime = Self.snapshotStart - ChangeDetector.racyWindowNanoseconds / 2
    let status = Self.status(ctime: ctime)
    #expect(
      !ChangeDetector.isUnchanged(
        status, previous: Self.entry(for: status), trustedBefore: Self.snapshotStart))
    let older = Self.status(ctime: Self.snapshotStart - 2 * ChangeDetector.racyWindowNanoseconds)
    #expect(
      ChangeDetector.isUnchanged(older, previous: Self.entry(for: older), trustedBefore: Self.snapshotStart))
  }
}

extension Timespec {
  var asTimespec: timespec { timespec(tv_sec: Int(seconds), tv_nsec: Int(nanoseconds)) }
}
