import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// On a shared store, a backup that reuses content a concurrent `forget` then marks for
/// deletion notices it before its commit (the re-check), syncs its catalog and backs up again
/// without the marked archives: it stores that content anew and its snapshot restores whole.
@Suite(.serialized) struct FleetReuseEndToEndTests {
  @Test func aBackupThatReusedContentAForgetMarkedStoresItAgain() throws {
    let bucket = try Bucket()
    let device = Device()
    let other = Device()
    try device.install("Notes-1.0/Notes.app")
    #expect(try device.s3(bucket, "repo", "init").status == 0)
    #expect(try other.run("device", "init").status == 0)
    let reused = device.home + "/Documents/reused.txt"
    try Data("content only the first snapshot stores".utf8).write(to: URL(fileURLWithPath: reused))
    try Data("kept".utf8).write(to: URL(fileURLWithPath: device.home + "/Documents/kept.txt"))
    _ = try device.backup(to: bucket)
    // The second snapshot lacks the file: once the first is forgotten, no snapshot needs it.
    try FileManager.default.removeItem(atPath: reused)
    _ = try device.backup(to: bucket)
    try Data("content only the first snapshot stores".utf8).write(to: URL(fileURLWithPath: reused))
    let expected = try captureHomeData(device.home)

    // The third backup reuses the first archive's copy; it stops once its archive is stored,
    // before the re-check, while the other device forgets the first snapshot.
    let backup = try PausingProcess(
      executable: productsDirectory + "/appbox",
      arguments: ["--root", device.root, "--json", "backup", "com.example.notes", "--repo", bucket.url],
      point: "backup.archive-renamed", directory: device.dir, environment: bucket.environment)
    #expect(backup.waitUntilPaused())
    let forget = try other.s3(bucket, "forget", "com.example.notes", "--keep-last", "1")
    #expect(forget.status == 0, "\(forget.err)")
    let result = backup.finish()
    #expect(result.status == 0, "\(String(decoding: result.stderr, as: UTF8.self))")
    #expect(String(decoding: result.stderr, as: UTF8.self).contains("backing up again without them"))
    let snapshot = try #require(
      ((try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [[String: Any]])?.first)?["snapshot"]
        as? String)

    // The marked archive goes (no grace here); the snapshot still restores byte for byte.
    #expect(try other.s3(bucket, "forget", "com.example.notes", "--keep-last", "2").status == 0)
    #expect(try device.s3(bucket, "check", "--read-data").status == 0)
    let restored = try other.s3(bucket, "restore", "com.example.notes", "--snapshot", snapshot)
    #expect(restored.status == 0, "\(restored.err)")
    #expect(differences(expected, try captureHomeData(other.home)) == [])
  }
}
