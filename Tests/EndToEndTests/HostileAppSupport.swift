import AppboxCore
import AppboxPlist
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// Who runs appbox in a hostile-app test.
enum Privilege: String, CustomTestStringConvertible, Sendable {
  /// appbox as root: the app runs as its own host uid.
  case root
  /// appbox as an ordinary user (nobody, through setpriv, when the tests run as root; the
  /// tests' own user otherwise), on a device root that user owns.
  case unprivileged

  var testDescription: String { rawValue }

  /// What this machine can test: root only when the tests run as root.
  static var testable: [Privilege] { geteuid() == 0 ? [.root, .unprivileged] : [.unprivileged] }
}

/// A device for the hostile app (`Tests/HostileApp`, built as `appbox-hostile`), driven as
/// root or unprivileged. The app is installed as a bundle whose executable is that program;
/// `attack` launches it and parses its "<label> <result>" lines.
final class HostileDevice: @unchecked Sendable {
  static let nobody: uid_t = 65534
  let dir: TemporaryDirectory
  let privilege: Privilege
  /// The file system the device lives on, when not /tmp's (kept mounted as long as the device).
  let volume: EncryptedVolume?
  var root: String { dir.url("device/root") }

  /// A device in a fresh directory under /tmp, or on `volume` (whose root must let everyone in).
  init(_ privilege: Privilege, on volume: EncryptedVolume? = nil) throws {
    self.privilege = privilege
    self.volume = volume
    dir = TemporaryDirectory("hostile", base: volume?.path ?? "/tmp")
    guard chmod(dir.path, 0o755) == 0 else { throw SystemError("chmod", path: dir.path) }
    try dir.makeDirectory("device")
    try dir.makeDirectory("bundles")
    try dir.makeDirectory("outside")
    if asNobody {
      guard chown(dir.url("device"), Self.nobody, Self.nobody) == 0 else { throw SystemError("chown") }
    }
  }

  /// Whether appbox runs as nobody through setpriv.
  var asNobody: Bool { privilege == .unprivileged && geteuid() == 0 }

  /// Where appbox, its helper and the hostile program are run from: the build's products,
  /// or (when nobody cannot reach them, say under a 0700 /root) copies nobody can run.
  var products: String { asNobody ? HostileDevice.nobodyProducts : productsDirectory }
  var appboxPath: String { products + "/appbox" }

  private static let nobodyProducts: String = {
    if everyoneCanReach(productsDirectory + "/appbox") { return productsDirectory }
    let copy = TemporaryDirectory("hostile-products")
    chmod(copy.path, 0o755)
    for name in ["appbox", "appbox-sandbox", "appbox-secitem", "appbox-hostile"] {
      let data = FileManager.default.contents(atPath: productsDirectory + "/" + name) ?? Data()
      _ = try? copy.write(name, bytes: Array(data), mode: 0o755)
    }
    keptDirectories.append(copy)
    return copy.path
  }()
  nonisolated(unsafe) private static var keptDirectories: [TemporaryDirectory] = []

  /// Whether every directory above `path` can be searched by anyone.
  private static func everyoneCanReach(_ path: String) -> Bool {
    var directory = splitPath(path).directory
    while directory.count > 1 {
      var st = stat()
      guard stat(directory, &st) == 0, st.st_mode & 0o001 != 0 else { return false }
      directory = splitPath(directory).directory
    }
    return true
  }

  /// `arguments` as a command that runs as this device's user.
  func command(_ arguments: [String]) -> (executable: String, arguments: [String]) {
    if asNobody {
      return (
        "/usr/bin/setpriv",
        ["--reuid=\(Self.nobody)", "--regid=\(Self.nobody)", "--clear-groups", "--"] + arguments
      )
    }
    return (arguments[0], Array(arguments.dropFirst()))
  }

  var environment: [String: String] {
    var environment = ProcessInfo.processInfo.environment
    environment.removeValue(forKey: "APPBOX_ROOT")
    return environment
  }

  /// Runs `appbox --root ROOT ARGS` as this device's user.
  @discardableResult
  func appbox(_ arguments: [String], environment extra: [String: String] = [:], input: String = "") throws
    -> ProcessResult
  {
    let (executable, rest) = command([appboxPath, "--root", root] + arguments)
    return try runProcess(
      executable, rest, environment: environment.merging(extra) { $1 }, input: Array(input.utf8))
  }

  /// Installs a copy of the hostile app as `identifier`; returns its container id.
  @discardableResult
  func installHostile(_ identifier: String = "com.example.hostile") throws -> String {
    let bundle = "bundles/\(identifier)/Hostile.app"
    try dir.write(
      bundle + "/Info.plist",
      PropertyList.dictionary([
        "CFBundleIdentifier": .string(identifier), "CFBundleExecutable": .string("hostile"),
        "CFBundleVersion": .string("1.0"), "CFBundleName": .string("Hostile"),
      ]).xmlString)
    let binary = try Data(contentsOf: URL(fileURLWithPath: productsDirectory + "/appbox-hostile"))
    try dir.write(bundle + "/hostile", bytes: Array(binary), mode: 0o755)
    for path in ["bundles", "bundles/\(identifier)", bundle] { chmod(dir.url(path), 0o755) }
    return try install(dir.url(bundle))
  }

  /// Installs the bundle at `path` (copied first where the device's user can read it);
  /// returns its container id.
  @discardableResult
  func install(_ path: String) throws -> String {
    var path = path
    if !path.hasPrefix(dir.path) {
      let copy = dir.url("bundles/" + UUID().uuidString)
      try dir.makeDirectory(String(copy.dropFirst(dir.path.count + 1)))
      chmod(copy, 0o755)
      try copyTree(path, to: copy + "/" + splitPath(path).name)
      path = copy + "/" + splitPath(path).name
    }
    let result = try appbox(["--json", "install", path])
    #expect(result.status == 0, "install \(path): \(result.err)")
    let object = try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [String: Any]
    return object?["containerID"] as? String ?? ""
  }

  /// The home of container `id` on the host, and as its jail shows it.
  func home(_ id: String) -> String { root + "/ApplicationRoot/" + id }
  func jailHome(_ id: String) -> String { "/var/mobile/Applications/" + id }

  /// Launches the hostile app with `arguments`; its report as label -> result.
  func attack(
    _ arguments: [String], app: String = "com.example.hostile", options: [String] = [],
    environment extra: [String: String] = [:]
  ) throws -> [String: String] {
    let result = try appbox(["launch", app] + options + ["--"] + arguments, environment: extra)
    #expect(result.status == 0, "\(arguments): \(result.err)")
    return parseReport(result.out)
  }
}

/// "<label> <result>" lines as a dictionary.
func parseReport(_ text: String) -> [String: String] {
  var report: [String: String] = [:]
  for line in text.split(separator: "\n") {
    let parts = line.split(separator: " ", maxSplits: 1).map(String.init)
    if parts.count == 2 { report[parts[0]] = parts[1] }
  }
  return report
}

extension PropertyList {
  var xmlString: String { String(decoding: xmlData(), as: UTF8.self) }
}

/// Runs `command` on a fresh pseudo-terminal that becomes its controlling terminal and
/// stdio, typing `input` first (the hostile program's `pty-run` mode, run on the host).
/// `raw`: no line editing or echo, so a single injected byte is readable at once. Returns
/// what the command wrote, its status, and the bytes left in the terminal's input queue
/// (what the user's shell would have read next). `columns`: the terminal's width, when set.
func runOnTerminal(
  _ command: [String], input: String = "", raw: Bool, columns: Int? = nil, environment: [String: String]
) throws
  -> (
    output: String, status: Int32?, pending: Int?
  )
{
  let mode = (raw ? "raw" : "cooked") + (columns.map { ":\($0)" } ?? "")
  let result = try runProcess(
    productsDirectory + "/appbox-hostile", ["pty-run", mode, input, "--"] + command,
    environment: environment)
  let report = parseReport(result.out)
  return (result.out, report["pty-status"].flatMap(Int32.init), report["pty-pending"].flatMap(Int.init))
}

/// A listening pathname or abstract UNIX socket on the host, accepting in the background.
final class HostSocket: @unchecked Sendable {
  let fd: Int32

  init(path: String? = nil, abstract: String? = nil) throws {
    let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    self.fd = fd
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    let bytes = path.map { Array($0.utf8) } ?? [0] + Array(abstract!.utf8)
    withUnsafeMutableBytes(of: &address.sun_path) { raw in
      for (index, byte) in bytes.enumerated() where index < raw.count - 1 { raw[index] = byte }
    }
    let length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + (path == nil ? 0 : 1))
    let bound = withUnsafePointer(to: &address) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
    }
    guard bound == 0, listen(fd, 16) == 0 else { throw SystemError("listen") }
    if let path { chmod(path, 0o777) }
    Thread.detachNewThread {
      while true {
        let client = accept(fd, nil, nil)
        if client < 0 { return }
        close(client)
      }
    }
  }

  deinit {
    shutdown(fd, Int32(SHUT_RDWR))
    close(fd)
  }
}

/// Whether a host process can connect to the pathname or abstract socket (the control).
func hostCanConnect(path: String? = nil, abstract: String? = nil) -> Bool {
  let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
  defer { close(fd) }
  var address = sockaddr_un()
  address.sun_family = sa_family_t(AF_UNIX)
  let bytes = path.map { Array($0.utf8) } ?? [0] + Array(abstract!.utf8)
  withUnsafeMutableBytes(of: &address.sun_path) { raw in
    for (index, byte) in bytes.enumerated() where index < raw.count - 1 { raw[index] = byte }
  }
  let length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + (path == nil ? 0 : 1))
  return withUnsafePointer(to: &address) {
    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, length) }
  } == 0
}
