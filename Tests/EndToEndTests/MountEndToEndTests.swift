import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// `appbox mount`: the real kernel FUSE, read with ordinary tools, then unmounted.
struct MountEndToEndTests {
  static let hasFuse = access("/dev/fuse", R_OK | W_OK) == 0

  @Test(.enabled(if: hasFuse, "needs /dev/fuse (skipped: this machine has no FUSE device)"))
  func theMountServesWhatARestoreGivesAndUnmounts() throws {
    let device = Device()
    let home = device.root + "/ApplicationRoot/" + (try device.install("Notes-1.0/Notes.app"))
    try Data("alpha".utf8).write(to: URL(fileURLWithPath: home + "/Documents/a.txt"))
    var random = SystemRandomNumberGenerator()
    let big = (0..<(3 << 20)).map { _ in UInt8.random(in: 0...255, using: &random) }
    try Data(big).write(to: URL(fileURLWithPath: home + "/Documents/big.bin"))
    let name = "evil\nname"
    try Data("hostile".utf8).write(to: URL(fileURLWithPath: home + "/Documents/" + name))
    #expect(symlink("a.txt", home + "/Documents/link") == 0)
    let first = try device.json("backup", "com.example.notes") as? [[String: Any]]
    let id = try #require(first?.first?["snapshot"] as? String)
    // A second snapshot: the big file edited in place (chunks), the first one changed.
    let fd = try FileDescriptor.open(home + "/Documents/big.bin", O_WRONLY)
    try fd.closeAfter { fd in
      try [UInt8](repeating: 1, count: 8192).withUnsafeBytes { try fd.writeAll($0, at: 1 << 20) }
    }
    try Data("beta".utf8).write(to: URL(fileURLWithPath: home + "/Documents/a.txt"))
    let second = try device.json("backup", "com.example.notes") as? [[String: Any]]
    let latestID = try #require(second?.first?["snapshot"] as? String)
    let liveBig = try Data(contentsOf: URL(fileURLWithPath: home + "/Documents/big.bin"))

    let mountpoint = device.dir.url("mnt")
    try FileManager.default.createDirectory(atPath: mountpoint, withIntermediateDirectories: false)
    let process = try device.start("mount", mountpoint)
    defer {
      if process.isRunning {
        _ = try? runProcess("/bin/umount", ["-l", mountpoint])
        process.terminate()
      }
    }
    // Wait for the mount (no timing assertion: a generous bound on how long to look).
    var mounted = false
    for _ in 0..<600 where !mounted {
      mounted = FileManager.default.fileExists(atPath: mountpoint + "/com.example.notes")
      if !mounted { usleep(50_000) }
    }
    try #require(mounted, "the mount did not appear")
    let snapshot = mountpoint + "/com.example.notes/" + latestID
    let cat = try runProcess("/bin/cat", [snapshot + "/Documents/a.txt"])
    #expect(cat.out == "beta")
    let old = try runProcess("/bin/cat", [mountpoint + "/com.example.notes/" + id + "/Documents/a.txt"])
    #expect(old.out == "alpha")
    let compare = try runProcess(
      "/usr/bin/cmp", [snapshot + "/Documents/big.bin", home + "/Documents/big.bin"])
    #expect(compare.status == 0, "\(compare.out)\(compare.err)")
    #expect(
      try Data(contentsOf: URL(fileURLWithPath: mountpoint + "/com.example.notes/latest/Documents/big.bin"))
        == liveBig)
    let found = try runProcess("/usr/bin/find", [snapshot + "/Documents", "-name", "evil*"])
    #expect(found.status == 0 && found.out.contains("evil"))
    #expect(try String(contentsOfFile: snapshot + "/Documents/" + name, encoding: .utf8) == "hostile")
    #expect(
      try FileManager.default.destinationOfSymbolicLink(atPath: snapshot + "/Documents/link") == "a.txt")
    #expect(
      try FileManager.default.destinationOfSymbolicLink(atPath: mountpoint + "/com.example.notes/latest")
        == latestID)
    // Each snapshot also has a time name (UTC, to the second; -2, -3, … within one second),
    // a symlink to its id, in commit order.
    let listed = try #require(device.json("snapshots", "com.example.notes") as? [[String: Any]])
    let times = listed.compactMap { $0["time"] as? String }
    try #require(times.count == 2)
    let appDirectory = mountpoint + "/com.example.notes"
    let firstName = times[0]
    let secondName = times[1] == times[0] ? times[1] + "-2" : times[1]
    #expect(try FileManager.default.destinationOfSymbolicLink(atPath: appDirectory + "/" + firstName) == id)
    #expect(
      try FileManager.default.destinationOfSymbolicLink(atPath: appDirectory + "/" + secondName) == latestID)
    #expect(
      try Set(FileManager.default.contentsOfDirectory(atPath: appDirectory))
        == [id, latestID, firstName, secondName, "latest"])
    let byTime = try runProcess("/bin/cat", [appDirectory + "/" + firstName + "/Documents/a.txt"])
    #expect(byTime.out == "alpha")
    // Read-only: nothing can be written.
    #expect(open(snapshot + "/Documents/new.txt", O_WRONLY | O_CREAT, 0o644) == -1)
    #expect(errno == EROFS)
    // What a restore --target gives, byte for byte.
    let target = device.dir.url("target")
    #expect(try device.run("restore", "com.example.notes", "--target", target).status == 0)
    let diff = try runProcess(
      "/usr/bin/diff", ["-r", "--no-dereference", target + "/Documents", snapshot + "/Documents"])
    #expect(diff.status == 0, "\(diff.out)")

    let unmount = try runProcess("/bin/umount", [mountpoint])
    #expect(unmount.status == 0, "\(unmount.err)")
    process.waitUntilExit()
    #expect(process.terminationStatus == 0)
    #expect(try FileManager.default.contentsOfDirectory(atPath: mountpoint) == [])
  }

  @Test func withoutAFuseDeviceMountExits69OrServes() throws {
    // Where /dev/fuse exists this only checks a missing mount point; where it does not, 69.
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    #expect(try device.run("backup", "com.example.notes").status == 0)
    let missing = try device.run("mount", device.dir.url("no-such-dir"))
    #expect(missing.status == (Self.hasFuse ? 66 : 69), "\(missing.err)")
  }
}
