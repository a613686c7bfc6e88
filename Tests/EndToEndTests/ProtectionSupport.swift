import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// A device root on its own ext4 loop volume (made with `-O encrypt` unless asked otherwise),
/// driven through the real `appbox`. The volume is unmounted when the device is released.
final class ProtectedDevice: @unchecked Sendable {
  let volume: EncryptedVolume
  let root: String
  static let passcode = "1234"

  /// With `passcode`, the device gets it set right away.
  init(
    encrypt: Bool = true, passcode: String? = ProtectedDevice.passcode, name: String = "device",
    megabytes: Int = 64
  ) throws {
    volume = try EncryptedVolume(megabytes: megabytes, encrypt: encrypt)
    root = volume.path + "/" + name
    try expectSuccess(run("device", "init", "--name", "protection test"))
    if let passcode { try expectSuccess(run("device", "passcode", "set", input: passcode + "\n")) }
  }

  /// Another device root on the same volume (so on the same file system), released with this one.
  func sibling(_ name: String, passcode: String?) throws -> String {
    let other = volume.path + "/" + name
    try expectSuccess(appbox(["device", "init"], root: other))
    if let passcode {
      try expectSuccess(
        appbox(["device", "passcode", "set"], root: other, input: Array((passcode + "\n").utf8)))
    }
    return other
  }

  @discardableResult
  func run(_ arguments: String..., input: String = "", environment: [String: String] = [:]) throws
    -> ProcessResult
  {
    try appbox(arguments, root: root, environment: environment, input: Array(input.utf8))
  }

  func json(_ arguments: String..., input: String = "") throws -> Any {
    let result = try appbox(["--json"] + arguments, root: root, input: Array(input.utf8))
    #expect(result.status == 0, "\(arguments): \(result.err)")
    return try JSONSerialization.jsonObject(with: Data(result.stdout))
  }

  func status() throws -> [String: Any] { try json("device", "show") as? [String: Any] ?? [:] }

  func lock() throws { try expectSuccess(run("device", "lock")) }
  func unlock(_ passcode: String = ProtectedDevice.passcode) throws {
    try expectSuccess(run("device", "unlock", input: passcode + "\n"))
  }

  /// Installs a fixture bundle; returns its home.
  func install(_ fixture: String, root: String? = nil) throws -> String {
    let result = try appbox(
      ["--json", "install", fixturePath("bundles/" + fixture)], root: root ?? self.root)
    #expect(result.status == 0, "install \(fixture): \(result.err)")
    let object = try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [String: Any]
    return object?["home"] as? String ?? ""
  }

  /// The class `protect APP PATH` reports for each file (nil: unreadable while locked).
  func classes(_ app: String, _ path: String, root: String? = nil) throws -> [String: String?] {
    let result = try appbox(["--json", "protect", app, path], root: root ?? self.root)
    #expect(result.status == 0, "protect \(path): \(result.err)")
    let entries = try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [[String: Any]] ?? []
    var classes: [String: String?] = [:]
    for entry in entries { classes[entry["path"] as? String ?? ""] = entry["class"] as? String }
    return classes
  }

  func imageContains(_ text: String) throws -> Bool { try volume.imageContains(Array(text.utf8)) }
}

/// A string that appears nowhere else, to look for on the raw disk.
func marker(_ label: String) -> String { "MARKER-\(label)-\(UUID().uuidString)" }

func expectSuccess(_ result: ProcessResult, sourceLocation: SourceLocation = #_sourceLocation) throws {
  #expect(result.status == 0, "\(result.err)", sourceLocation: sourceLocation)
}

/// The errno of opening `path` for reading as this (unconfined, root) process, 0 when it opens.
func openError(_ path: String) -> Errno {
  let fd = open(path, O_RDONLY)
  if fd >= 0 {
    close(fd)
    return Errno(rawValue: 0)
  }
  return Errno.current
}

/// Writes `content` to `path` and makes it durable (so that its blocks are on the disk).
func writeDurably(_ path: String, _ content: String) throws {
  let fd = try FileDescriptor.open(path, O_WRONLY | O_CREAT | O_TRUNC, mode: 0o644)
  try fd.closeAfter { fd in
    try fd.writeAll(Array(content.utf8))
    try fd.sync()
  }
}

/// One line on stderr, as every failure prints.
func isOneLine(_ text: String) -> Bool {
  text.split(separator: "\n").count == 1
}
