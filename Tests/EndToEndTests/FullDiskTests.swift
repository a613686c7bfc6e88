import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// Fills the file system at `directory` (as root: its reserved blocks too), leaving about
/// `leaving` bytes free; returns the filler's path.
@discardableResult
func fill(_ directory: String, leaving: Int64 = 0, name: String = "filler") throws -> String {
  let path = directory + "/" + name
  var st = statvfs()
  guard statvfs(directory, &st) == 0 else { throw SystemError("statvfs", path: directory) }
  let free = Int64(st.f_bfree) * Int64(st.f_bsize)
  let fd = try FileDescriptor.open(path, O_WRONLY | O_CREAT | O_APPEND, mode: 0o600)
  defer { fd.close() }
  let block = [UInt8](repeating: 0x5A, count: 1 << 16)
  // Leaving nothing: write until the file system refuses (its own accounting, not statvfs's).
  var left = leaving == 0 ? Int64.max : free - leaving
  while left > 0 {
    let count = Int(min(left, Int64(block.count)))
    let written = block.withUnsafeBytes { Glibc.write(fd.rawValue, $0.baseAddress, count) }
    if written <= 0 {
      if leaving == 0 && count > 1 && written < 0 && errno == ENOSPC {
        // Top off the last blocks byte by byte.
        while block.withUnsafeBytes({ Glibc.write(fd.rawValue, $0.baseAddress, 1) }) == 1 {}
      }
      break
    }
    left -= Int64(written)
  }
  try fd.sync()
  // Everything written before reaches its blocks (delayed allocation settles).
  try FileDescriptor.open(directory, O_RDONLY | O_DIRECTORY).closeAfter { try $0.syncFileSystem() }
  return path
}

/// A device on a small loop-mounted ext4 (1 KiB blocks, as mkfs makes them that small).
@Suite(.enabled(if: EncryptedVolume.isAvailable, "needs root for loop mounts"))
struct FullDiskTests {
  /// Issue 23.4: reading needs no space. With the device's file system full, the commands
  /// that only read work; one that writes says which file system is full.
  @Test func readingCommandsWorkOnAFullDeviceAndWritersSaySo() throws {
    let volume = try EncryptedVolume(megabytes: 24, encrypt: false)
    let root = volume.path + "/root"
    func run(_ arguments: String...) throws -> ProcessResult { try appbox(arguments, root: root) }
    #expect(try run("install", fixturePath("bundles/Notes-1.0/Notes.app")).status == 0)
    let home = try run("path", "com.example.notes").out.trimmingCharacters(in: .newlines)
    try writeSampleData(home: home)
    #expect(try run("backup", "com.example.notes").status == 0)
    try Data("more".utf8).write(to: URL(fileURLWithPath: home + "/Documents/more.txt"))
    try fill(volume.path)
    for command in [
      ["list"], ["path", "com.example.notes"], ["inspect", "com.example.notes"], ["snapshots"], ["check"],
      ["check", "--read-data"],
    ] {
      let result = try appbox(command, root: root)
      #expect(result.status == 0, "\(command): \(result.err)")
    }
    // A writer may spend the device's reserve (kept for when an app fills the disk); once that
    // is gone too, it fails saying which file system is full.
    _ = try run("backup", "com.example.notes")
    try Data("still more".utf8).write(to: URL(fileURLWithPath: home + "/Documents/more.txt"))
    try fill(volume.path, name: "filler-2")
    let backup = try run("backup", "com.example.notes")
    #expect(backup.status == 74)
    #expect(backup.errorLines.filter { $0.hasPrefix("Error: ") }.count == 1, "\(backup.err)")
    #expect(backup.err.contains("no space left on /dev/loop"), "\(backup.err)")
    #expect(backup.err.contains(" at \(volume.path) (needs about "), "\(backup.err)")
    #expect(!backup.err.contains("SQLite code"), "\(backup.err)")
  }

  /// A full backup disk: its snapshots list, check and restore onto a device with room.
  @Test func aFullBackupDiskStillListsChecksAndRestores() throws {
    let volume = try EncryptedVolume(megabytes: 24, encrypt: false)
    let device = Device()
    let repository = volume.path + "/repo"
    try device.install("Notes-1.0/Notes.app")
    try writeSampleData(home: device.home)
    let expected = try captureHomeData(device.home)
    #expect(try device.run("repo", "init", "--repo", repository).status == 0)
    let id = try #require(try device.backup("--repo", repository)["snapshot"] as? String)
    try Data("changed".utf8).write(to: URL(fileURLWithPath: device.home + "/Documents/a.txt"))
    try fill(volume.path)
    let snapshots = try device.run("snapshots", "--repo", repository)
    #expect(snapshots.status == 0, "\(snapshots.err)")
    let check = try device.run("check", "--read-data", "--repo", repository)
    #expect(check.status == 0, "\(check.err)")
    let restore = try device.run("restore", "com.example.notes", "--snapshot", id, "--repo", repository)
    #expect(restore.status == 0, "\(restore.err)")
    #expect(differences(expected, try captureHomeData(device.home)) == [])
  }

  /// A backup that fills the device's file system (its archive, then the new catalog's WAL
  /// and wal-index) fails with a line saying so, and never dies of a SIGBUS in SQLite's mapped
  /// wal-index (on 1 KiB blocks SQLite's own growth of `-shm` leaves holes in its pages; with
  /// this much room left, about 500 to 575 KB here, that was a SIGBUS); with room again, the
  /// next backup works and the repository checks clean.
  @Test func aBackupFillingTheDeviceFailsCleanly() throws {
    var random = SeededRandom(seed: 7)
    for free in [500, 525, 575] {
      let volume = try EncryptedVolume(megabytes: 24, encrypt: false, reservedBlocks: false)
      let root = volume.path + "/root"
      func run(_ arguments: String...) throws -> ProcessResult { try appbox(arguments, root: root) }
      #expect(try run("install", fixturePath("bundles/Notes-1.0/Notes.app")).status == 0)
      let home = try run("path", "com.example.notes").out.trimmingCharacters(in: .newlines)
      for index in 0..<300 {
        try Data("file \(index)".utf8).write(to: URL(fileURLWithPath: home + "/Documents/f\(index)"))
      }
      try fill(volume.path, leaving: Int64(free) * 1024)
      var content = [UInt8](repeating: 0, count: free * 1024 * 7 / 10)
      content.withUnsafeMutableBytes { random.fill($0) }
      try? Data(content).write(to: URL(fileURLWithPath: home + "/Documents/big.bin"))
      let backup = try run("backup", "com.example.notes")
      #expect(backup.status == 0 || backup.status == 74, "\(free) KB free: \(backup.status) \(backup.err)")
      if backup.status == 74 {
        #expect(backup.err.contains("no space left on"), "\(free) KB free: \(backup.err)")
        #expect(
          backup.errorLines.filter { $0.hasPrefix("Error: ") }.count == 1, "\(free) KB free: \(backup.err)")
      }
      guard free == 575 else { continue }
      try FileManager.default.removeItem(atPath: volume.path + "/filler")
      let again = try run("backup", "com.example.notes")
      #expect(again.status == 0, "\(again.err)")
      let check = try run("check")
      #expect(check.status == 0, "\(check.out) \(check.err)")
    }
  }
}
