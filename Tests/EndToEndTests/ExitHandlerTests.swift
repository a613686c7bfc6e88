import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// appbox leaves OpenSSL's clean-up at exit unregistered: it frees the state of threads that
/// may still be ending as appbox exits (the keychain broker's), a double free that aborted one
/// CI run after its work was done (Sources/AppboxCrypto/ExitCleanup.swift). Seen through
/// `libappbox-preload-probes.so` (Tests/PreloadProbes/exit_handlers.c), which logs every exit
/// handler a program registers.
struct ExitHandlerTests {
  /// The exit handlers `executable arguments` registered, one "object symbol" line each.
  func handlers(_ executable: String, _ arguments: [String], in directory: TemporaryDirectory) throws
    -> String
  {
    let log = directory.url("handlers-\(UUID().uuidString)")
    var environment = ProcessInfo.processInfo.environment
    environment["LD_PRELOAD"] = preloadProbes
    environment["APPBOX_EXIT_HANDLER_LOG"] = log
    let result = try runProcess(executable, arguments, environment: environment)
    #expect(result.status == 0, "\(arguments): \(result.err)")
    return String(decoding: contents(log) ?? [], as: UTF8.self)
  }

  @Test func noCommandLeavesOpenSSLsCleanUpToExit() throws {
    try #require(FileManager.default.fileExists(atPath: preloadProbes), "the probes are not built")
    let device = Device()
    // The probe sees the handler where a program leaves it: Python's hashlib initialises
    // OpenSSL with its defaults.
    let python = try handlers(
      "/usr/bin/python3", ["-c", "import hashlib; hashlib.sha256(b'x').hexdigest()"], in: device.dir)
    #expect(python.contains("libcrypto.so.3 OPENSSL_cleanup"), "\(python)")
    // appbox's commands that use libcrypto: the seal's hashes, the keychain's keys and AES-GCM,
    // the backup's hashes, and a run with the keychain broker answering the app.
    let appbox = productsDirectory + "/appbox"
    let secret = device.dir.url("secret")
    try Data("token".utf8).write(to: URL(fileURLWithPath: secret))
    var seen = ""
    for arguments in [
      ["install", fixturePath("bundles/Notes-1.0/Notes.app")],
      [
        "keychain", "com.example.notes", "add", "--service", "sync", "--account", "ada", "--data-file",
        secret,
      ],
      ["backup", "com.example.notes"],
      ["run", "com.example.notes", "--", "appbox-secitem", "get", "--service", "sync", "--account", "ada"],
    ] {
      seen += try handlers(appbox, ["--root", device.root] + arguments, in: device.dir)
    }
    #expect(!seen.contains("libcrypto"), "\(seen)")
  }
}
