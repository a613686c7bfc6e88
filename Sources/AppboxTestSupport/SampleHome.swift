import AppboxCore
import Foundation
import Glibc

/// Fills the home at `home` with everything a backup must preserve: contents, modes,
/// nanosecond mtimes, symlinks (relative, absolute, dangling), hard links, `user.*` xattrs on
/// files and directories, empty and read-only directories, a FIFO, names that are not UTF-8
/// and names that differ only in case, plus Library/Caches and tmp content that must not be
/// backed up.
public func writeSampleData(home: String) throws {
  func write(_ relative: String, _ bytes: [UInt8], mode: mode_t = 0o644) throws {
    let path = home + "/" + relative
    try FileManager.default.createDirectory(
      atPath: splitPath(path).directory, withIntermediateDirectories: true)
    let fd = try FileDescriptor.open(path, O_WRONLY | O_CREAT | O_TRUNC, mode: mode)
    try fd.closeAfter { fd in
      try fd.writeAll(bytes)
      try fd.setPermissions(mode)
    }
  }
  func attribute(_ relative: String, _ name: String, _ value: [UInt8]) throws {
    let fd = try FileDescriptor.open(home + "/" + relative, O_RDONLY)
    try fd.closeAfter { try $0.setExtendedAttribute(name, value) }
  }
  func check(_ result: Int32, _ what: String) throws {
    guard result == 0 else { throw SystemError(what, path: home) }
  }
  let documents = home + "/Documents"
  try write("Documents/a.txt", Array("lower case".utf8))
  try write("Documents/A.txt", Array("upper case".utf8))
  try write("Documents/script.sh", Array("#!/bin/sh\n".utf8), mode: 0o750)
  try write("Documents/private", Array("secret".utf8), mode: 0o600)
  try write("Documents/Nested/deeper/file.bin", (0..<5000).map { UInt8($0 % 251) })
  try write("Library/Preferences/com.example.notes.plist", Array("<plist/>".utf8))
  try write("Library/Application Support/db.sqlite", [UInt8](repeating: 0xAB, count: 1_300_000))
  try attribute("Documents/a.txt", "user.color", Array("blue".utf8))
  try attribute("Documents/Nested", "user.tag", [0, 1, 2])
  try check(mkdir(documents + "/Empty", 0o755), "mkdir")
  try check(symlink("a.txt", documents + "/link"), "symlink")
  try check(symlink("../Library/Preferences", documents + "/prefs"), "symlink")
  try check(symlink("/nonexistent/absolute", documents + "/dangling"), "symlink")
  try check(link(documents + "/A.txt", documents + "/Nested/hardlink-to-A"), "link")
  try check(mkfifo(documents + "/pipe", 0o640), "mkfifo")
  try write("Documents/caf\u{e9}-\u{1F600}", Array("unicode".utf8))
  let invalid = Array(documents.utf8) + [UInt8(ascii: "/"), 0x66, 0xFF, 0xFE]
  let fd = withCName(invalid) { open($0, O_CREAT | O_WRONLY | O_CLOEXEC, 0o644) }
  guard fd >= 0 else { throw SystemError("create", path: documents) }
  _ = Glibc.write(fd, "not utf-8", 9)
  close(fd)
  try check(mkdir(documents + "/ReadOnly", 0o755), "mkdir")
  try write("Documents/ReadOnly/inside", Array("x".utf8))
  try check(chmod(documents + "/ReadOnly", 0o555), "chmod")
  var times = [
    timespec(tv_sec: 1_234_567_890, tv_nsec: 123_456_789), timespec(tv_sec: 987_654_321, tv_nsec: 1),
  ]
  try check(utimensat(AT_FDCWD, documents + "/a.txt", &times, AT_SYMLINK_NOFOLLOW), "utimensat")
  try check(utimensat(AT_FDCWD, documents + "/link", &times, AT_SYMLINK_NOFOLLOW), "utimensat")
  try write("Library/Caches/thumbnail", Array("regenerable".utf8))
  try write("tmp/scratch", Array("temporary".utf8))
}

/// The parts of a home a backup covers: everything but the bundle, tmp and Library/Caches.
public func captureHomeData(_ home: String, bundle: String = "Notes.app") throws -> [[UInt8]: CapturedEntry] {
  try captureTree(home, skipping: [bundle, "tmp", "Library/Caches"])
}
