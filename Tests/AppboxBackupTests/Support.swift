import AppboxContainer
import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

/// A device root with Notes installed and an empty repository, in a temp directory.
final class Fixture: @unchecked Sendable {
  let dir = TemporaryDirectory("backup")
  let root: DeviceRoot
  let session: DeviceSession
  var app: AppRecord
  let repository: Repository

  init(bundle: String = "Notes-1.0/Notes.app") throws {
    root = DeviceRoot(path: dir.url("root"))
    session = try DeviceSession.open(
      root: root, mutating: true, creating: true, recovery: [ContainerRecovery(), HomeSwapRecovery()],
      environment: [:])
    app = try session.install(bundleAt: fixturePath("bundles/" + bundle)).app
    repository = try Repository(path: dir.url("repo"), environment: [:])
  }

  var home: String { session.home(of: app).path }
  func path(_ relative: String) -> String { home + "/" + relative }

  @discardableResult
  func write(_ relative: String, _ content: String, mode: mode_t = 0o644) throws -> String {
    try write(relative, bytes: Array(content.utf8), mode: mode)
  }

  @discardableResult
  func write(_ relative: String, bytes: [UInt8], mode: mode_t = 0o644) throws -> String {
    let full = path(relative)
    try FileManager.default.createDirectory(
      atPath: splitPath(full).directory, withIntermediateDirectories: true)
    let fd = try FileDescriptor.open(full, O_WRONLY | O_CREAT | O_TRUNC, mode: mode)
    try fd.closeAfter { try $0.writeAll(bytes) }
    guard chmod(full, mode) == 0 else { throw SystemError("chmod", path: full) }
    return full
  }

  func setAttribute(_ relative: String, _ name: String, _ value: [UInt8]) throws {
    let fd = try FileDescriptor.open(path(relative), O_RDONLY)
    try fd.closeAfter { try $0.setExtendedAttribute(name, value) }
  }

  func backup(_ options: BackupOptions = BackupOptions(), observer: EngineObserver = SilentObserver()) throws
    -> BackupResult
  {
    try repository.backup(app, in: session, options: options, observer: observer)
  }

  /// The data of the home as a capture (bundle, tmp and Library/Caches left out).
  func captureData() throws -> [[UInt8]: CapturedEntry] {
    try captureTree(home, skipping: [app.bundleDirectoryName, "tmp", "Library/Caches"])
  }

  /// Moves every snapshot's start an hour later, so the ctimes of files the test wrote just
  /// before it count as safely older (see ChangeDetector's racy window) without sleeping.
  func trustSnapshots() throws {
    try repository.catalog.database.execute("UPDATE snapshots SET time = time + 3600")
  }

  func names(in relative: String) -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: path(relative))) ?? []).sorted()
  }
}

/// A keychain that hands out fixed bytes and records what it is given.
final class FakeKeychain: KeychainSnapshotting, @unchecked Sendable {
  let exported: [UInt8]?
  let outcome: KeychainRestoreOutcome
  private let lock = NSLock()
  private var received: [[UInt8]] = []

  init(exported: [UInt8]?, outcome: KeychainRestoreOutcome = .restored(count: 1)) {
    self.exported = exported
    self.outcome = outcome
  }

  func exportItems(for app: AppRecord) throws -> [UInt8]? { exported }

  func importItems(_ bytes: [UInt8], for app: AppRecord) throws -> KeychainRestoreOutcome {
    lock.withLock { received.append(bytes) }
    return outcome
  }

  var imports: [[UInt8]] { lock.withLock { received } }
}

/// Flips one bit of the first occurrence of `needle` in the file at `path`.
func flipByte(in path: String, within needle: [UInt8]) throws {
  var bytes = Array(try Data(contentsOf: URL(fileURLWithPath: path)))
  guard
    let start = (0...(bytes.count - needle.count)).first(where: {
      bytes[$0..<($0 + needle.count)].elementsEqual(needle)
    })
  else { throw BackupError(.invalidRequest, "content not found in \(path)") }
  bytes[start + needle.count / 2] ^= 0x01
  try Data(bytes).write(to: URL(fileURLWithPath: path))
}

/// Expects two captures to be equal, listing what differs.
func expectSame(
  _ expected: [[UInt8]: CapturedEntry], _ actual: [[UInt8]: CapturedEntry],
  sourceLocation: SourceLocation = #_sourceLocation
) {
  let lines = differences(expected, actual)
  #expect(lines.isEmpty, "\(lines.joined(separator: "\n"))", sourceLocation: sourceLocation)
}

/// The forms a backup's archive takes: uncompressed, framed zstd (`--compress zstd`), one zstd
/// stream (as appbox wrote `--compress zstd` before frames: such archives are still read),
/// gzip.
enum StoredForm: String, CaseIterable, Sendable {
  case plain, framed, zstdStream, gzip

  var options: BackupOptions {
    var options = BackupOptions()
    switch self {
    case .plain: options.compression = .none
    case .framed: options.compression = .zstd
    case .zstdStream:
      options.compression = .zstd
      options.framing = nil
    case .gzip: options.compression = .gzip
    }
    return options
  }
}
