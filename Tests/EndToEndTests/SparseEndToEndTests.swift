// Sparse files, as an app makes them: holes stay holes in the backup archive, the restored
// file, the exported tar and package, the imported file and the installed bundle. Measured in
// allocated blocks, before and after.

import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// Bytes allocated on disk for `path` (`st_blocks` * 512).
private func allocated(_ path: String) throws -> Int64 {
  var status = stat()
  guard lstat(path, &status) == 0 else { throw SystemError("stat", path: path) }
  return Int64(status.st_blocks) * 512
}

/// A file of `size` bytes with `data` at each offset and holes elsewhere.
private func makeSparse(_ path: String, size: Int64, data: [(Int64, [UInt8])]) throws {
  let fd = try FileDescriptor.open(path, O_WRONLY | O_CREAT | O_TRUNC, mode: 0o644)
  try fd.closeAfter { fd in
    try fd.truncate(to: size)
    for (offset, bytes) in data { try bytes.withUnsafeBytes { try fd.writeAll($0, at: offset) } }
  }
}

/// The bytes of `path` at `offset`.
private func bytes(_ path: String, at offset: Int64, count: Int) throws -> [UInt8] {
  try FileDescriptor.open(path, O_RDONLY).closeAfter { fd in
    var buffer = [UInt8](repeating: 0xEE, count: count)
    let n = try buffer.withUnsafeMutableBytes { try fd.read(into: $0, at: offset) }
    return Array(buffer[0..<n])
  }
}

struct SparseEndToEndTests {
  let size: Int64 = 256 << 20
  let head = Array("header of a disk image".utf8)
  let tail = [UInt8](repeating: 0xC3, count: 20_000)

  func checkSparseCopy(_ path: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
    #expect(try allocated(path) < 1 << 20, "'\(path)' lost its holes", sourceLocation: sourceLocation)
    var status = stat()
    #expect(lstat(path, &status) == 0 && Int64(status.st_size) == size, sourceLocation: sourceLocation)
    #expect(try bytes(path, at: 0, count: head.count) == head, sourceLocation: sourceLocation)
    #expect(try bytes(path, at: 200 << 20, count: tail.count) == tail, sourceLocation: sourceLocation)
    #expect(
      try bytes(path, at: 100 << 20, count: 4096) == [UInt8](repeating: 0, count: 4096),
      sourceLocation: sourceLocation)
  }

  @Test func backupRestoreExportAndImportKeepHoles() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    let image = device.home + "/Documents/disk.img"
    try makeSparse(image, size: size, data: [(0, head), (200 << 20, tail)])
    let before = try allocated(image)
    #expect(before < 1 << 20)

    // Backup: the archive holds the data, not the gigabyte; GNU tar reads it.
    let snapshot = try device.backup()
    let archive = try #require(snapshot["archive"] as? String)
    #expect(try allocated(archive) < 2 << 20, "the backup archive stored the holes")
    let listing = try runProcess("/usr/bin/tar", ["-tvf", archive])
    #expect(listing.status == 0 && listing.out.contains("Documents/disk.img"), "\(listing.err)")
    let check = try device.run("check", "--read-data")
    #expect(check.status == 0, "\(check.out)\(check.err)")

    // Restore.
    try FileManager.default.removeItem(atPath: image)
    let restored = try device.run("restore", "com.example.notes")
    #expect(restored.status == 0, "\(restored.err)")
    try checkSparseCopy(image)

    // Forget the first snapshot after a second one: its archive is repacked, holes and all.
    FileManager.default.createFile(atPath: device.home + "/Documents/later.txt", contents: Data("later".utf8))
    try device.trustSnapshots()
    _ = try device.backup()
    let forgot = try device.run("forget", "com.example.notes", "--keep-last", "1")
    #expect(forgot.status == 0, "\(forgot.err)")
    #expect(!device.archiveNames().contains(splitPath(archive).name), "the first archive was kept")
    for name in device.archiveNames() {
      #expect(try allocated(device.repository + "/archives/" + name) < 2 << 20, "\(name) stored the holes")
    }
    try FileManager.default.removeItem(atPath: image)
    #expect(try device.run("restore", "com.example.notes").status == 0)
    try checkSparseCopy(image)
    #expect(try device.run("check", "--read-data").status == 0)

    // Export (tar and package) and import back.
    let tar = device.dir.url("data.tar")
    let package = device.dir.url("data.xcappdata")
    #expect(try device.run("export", "com.example.notes", tar).status == 0)
    #expect(try device.run("export", "com.example.notes", package).status == 0)
    #expect(try allocated(tar) < 2 << 20)
    try checkSparseCopy(package + "/AppData/Documents/disk.img")
    for source in [tar, package] {
      try FileManager.default.removeItem(atPath: image)
      let imported = try device.run("import", "com.example.notes", source)
      #expect(imported.status == 0, "\(imported.err)")
      try checkSparseCopy(image)
    }
  }

  @Test func aSparseFileInABundleInstallsSparse() throws {
    let device = Device()
    let bundle = device.dir.url("Notes.app")
    let copy = try runProcess("/bin/cp", ["-a", fixturePath("bundles/Notes-1.0/Notes.app"), bundle])
    #expect(copy.status == 0)
    try? FileManager.default.removeItem(atPath: bundle + "/_CodeSignature")
    try makeSparse(bundle + "/assets.pak", size: size, data: [(0, head), (200 << 20, tail)])
    let id = try device.install(path: bundle)
    let installed = device.root + "/ApplicationRoot/" + id + "/Notes.app/assets.pak"
    try checkSparseCopy(installed)
    let inspect = try #require(try device.json("inspect", "com.example.notes") as? [String: Any])
    #expect((inspect["seal"] as? [String: Any])?["valid"] as? Bool == true)
  }
}

/// Issue 26: `export` reported 3 B for a 50 MB sparse file that `backup` and `inspect` call
/// 52.4 MB. Every command now counts a file's length, holes included.
struct SparseSizeReportTests {
  @Test func exportCountsASparseFileAsBackupAndInspectDo() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try makeSparse(device.home + "/Documents/disk.img", size: 50 << 20, data: [(0, [1, 2, 3])])
    let snapshot = try #require((try device.json("backup", "com.example.notes") as? [[String: Any]])?.first)
    let listed = try #require((try device.json("snapshots") as? [[String: Any]])?.first)
    let exported = try #require(
      try device.json("export", "com.example.notes", device.dir.url("data.tar")) as? [String: Any])
    let inspected = try #require(try device.json("inspect", "com.example.notes") as? [String: Any])
    let documents = (inspected["locations"] as? [[String: Any]])?.first {
      $0["name"] as? String == "Documents"
    }
    let bytes = try #require(listed["bytes"] as? Int)
    #expect(bytes >= 50 << 20 && snapshot["snapshot"] as? String == listed["snapshot"] as? String)
    // The export holds the one file Documents and Library have: its length, as backup counts it.
    #expect(exported["bytes"] as? Int == 50 << 20 && exported["files"] as? Int == 1, "\(exported)")
    #expect(documents?["bytes"] as? Int == 50 << 20)
    let text = try device.run("export", "com.example.notes", device.dir.url("again.tar"))
    #expect(text.out.contains(" 52.4 MB to "), "\(text.out)")
  }
}
