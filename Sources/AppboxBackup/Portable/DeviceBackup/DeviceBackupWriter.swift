// export-backup, the writing side: a backup folder's content files and Manifest.db rows.
//
// Algorithm, per domain: the backup engine's Scanner lists the directory (a home's Documents
// and Library, or a group's container, Library/Caches left out), handing the directories over
// one at a time in depth-first order, and its ContentReader reads the files on its own thread,
// exactly as for a full backup; this writer takes the reader's messages in that order in place
// of the Archiver, so the walk holds the directories on its path, not the whole tree (the
// rows, a few hundred bytes each, are kept for Manifest.db, which is written whole). Each file becomes `XX/<fileID>`, its bytes
// as they are, or in an encrypted backup AES-256-CBC under a fresh random key (PKCS#7 padded,
// zero IV) whose RFC 3394 wrap under the file's class key goes into its MBFile. Holes are
// written as zeros (the format has none). A file read more than once (it changed meanwhile)
// is rewritten from the start; a second path of a hard-linked file gets a copy. Every
// directory, file and symlink becomes one Manifest.db row (the domain's root too, with an
// empty path); files marked "exclude from backup", vanished ones and FIFOs are left out, and
// what could not be read is counted.
//
// Invariants: everything is written beneath the staging folder the caller made, by descriptor,
// O_NOFOLLOW; nothing is made visible here (the caller renames the folder into place).

import AppboxContainer
import AppboxCore
import AppboxPipeline
import AppboxCrypto
import AppboxRepository
import Foundation
import Glibc

/// One Manifest.db row.
struct DeviceBackupRow {
  var fileID: String
  var domain: String
  var relativePath: [UInt8]
  var kind: DeviceBackupEntryKind
  var file: Data
}

/// What one exported domain holds.
public struct DeviceBackupExportedDomain: Sendable {
  public var domain: String
  public var files: Int
  public var directories: Int
  public var bytes: Int64
  /// Entries that could not be read, and the first of their paths.
  public var unreadable: Int
  public var unreadablePaths: [[UInt8]]
}

final class DeviceBackupWriter {
  private let folder: FileDescriptor
  /// The class keys of an encrypted backup (nil: plain).
  private let classKeys: [UInt32: [UInt8]]?
  private var subdirectories: [String: FileDescriptor] = [:]
  private(set) var rows: [DeviceBackupRow] = []
  private(set) var warnings: [String] = []

  init(folder: FileDescriptor, classKeys: [UInt32: [UInt8]]?) {
    self.folder = folder
    self.classKeys = classKeys
  }

  deinit { for descriptor in subdirectories.values { descriptor.close() } }

  /// What a written file's row needs, by inode, for a later path of it (a hard link) to copy.
  private struct Written {
    var fileID: String
    var record: MBFileRecord
  }

  /// Writes the domain whose directory is `home`, scanned with `rules`. `classes` maps the
  /// device's fscrypt keys to protection classes; `recordedClasses`, when given, names each
  /// file's class instead (a snapshot materialized without protection).
  func addDomain(
    _ domain: String, home: FileDescriptor, rules: ScanRules,
    classes: [FscryptKeyIdentifier: ProtectionClass],
    recordedClasses: [[UInt8]: ProtectionClass]? = nil, observer: EngineObserver
  ) throws -> DeviceBackupExportedDomain {
    let scanner = Scanner(
      home: home, rules: rules, catalogPath: nil, previousRoot: nil, trustedBefore: 0, observer: observer)
    observer.engine(.phase(.scanning))
    let rootStatus = try home.status()
    rows.append(row(domain, [], .directory, record(status: EntryStatus(rootStatus), protectionClass: 0)))
    let pool = BufferPool(count: 16, bufferSize: 256 << 10)
    let queue = HandoffQueue<ContentMessage>(capacity: 16 << 20)
    let reader = ContentReader(scanner: scanner, queue: queue, pool: pool, protectionClasses: classes)
    let thread = WorkerThread(name: "appbox-read") { try reader.run() }
    var report = DeviceBackupExportedDomain(
      domain: domain, files: 0, directories: 0, bytes: 0, unreadable: 0, unreadablePaths: [])
    do {
      try consume(
        queue, domain: domain, pool: pool, recordedClasses: recordedClasses, observer: observer,
        report: &report)
    } catch {
      queue.cancel { message in
        switch message {
        case .whole(_, _, let buffer, _, _, _), .chunk(let buffer, _, _): pool.give(buffer)
        default: break
        }
      }
      try? thread.join()
      throw error
    }
    try thread.join()
    // The scan's counts are complete once the reader has finished it.
    report.unreadable += scanner.unreadableCount
    report.unreadablePaths += scanner.unreadable.map(\.path)
    warnings += scanner.warnings.map { "'\($0.path)' \($0.message)" }
    report.unreadablePaths = Snapshot.keptPaths(
      report.unreadablePaths.sorted { $0.lexicographicallyPrecedes($1) })
    return report
  }

  /// Takes the reader's messages in depth-first order and writes each item's content file
  /// and row. The directory whose items are arriving is the last `.directory` message's.
  private func consume(
    _ queue: HandoffQueue<ContentMessage>, domain: String, pool: BufferPool,
    recordedClasses: [[UInt8]: ProtectionClass]?, observer: EngineObserver,
    report: inout DeviceBackupExportedDomain
  ) throws {
    var written: [UInt64: Written] = [:]
    var current: (item: ItemReference, file: OpenedFile, output: ContentFile)?
    var directoryPath = DirectoryPath()
    var startedWriting = false
    func path(of item: ItemReference) -> [UInt8] { directoryPath.path(of: item.name) }
    func protectionClass(_ item: ItemReference, _ file: OpenedFile) -> Int64 {
      if let recordedClasses {
        return (recordedClasses[path(of: item)] ?? .none).deviceBackupClass
      }
      return splitProtectionRecord(file.attributes).1.deviceBackupClass
    }
    func finishFile(_ item: ItemReference, _ file: OpenedFile, _ output: ContentFile) throws {
      let relative = path(of: item)
      var made = record(status: file.status, protectionClass: output.protectionClass)
      made.encryptionKey = try output.finish()
      rows.append(row(domain, relative, .file, made))
      if item.entry.status.linkCount > 1 {
        written[item.entry.status.inode] = Written(fileID: output.fileID, record: made)
      }
      report.files += 1
      report.bytes += file.status.size
    }
    // Manifest.db keeps paths as text: a name that is not UTF-8 cannot be carried.
    var notText: [[UInt8]] = []
    func carried(_ relative: [UInt8]) -> Bool {
      if String(validating: relative, as: UTF8.self) != nil { return true }
      if notText.count < 5 { notText.append(relative) }
      return false
    }
    defer {
      if !notText.isEmpty {
        warnings.append(
          "left out what has a name that is not UTF-8 (the format keeps paths as text): "
            + notText.map { "'\(display($0))'" }.joined(separator: ", "))
      }
    }
    while let message = queue.pop() {
      switch message {
      case .directory(let directory):
        directoryPath.enter(directory)
        guard directory.depth > 0, !directory.isExcluded, let status = directory.status,
          carried(directoryPath.bytes)
        else { continue }
        rows.append(
          row(
            domain, directoryPath.bytes, .directory, record(status: EntryStatus(status), protectionClass: 0)))
        report.directories += 1
      case .endDirectory:
        continue
      case .totals(let entries, let files, let bytes):
        observer.engine(.planned(entries: entries, files: files, bytes: bytes))
        if !startedWriting {
          startedWriting = true
          observer.engine(.phase(.writing))
        }
      case .symlink(let item):
        guard carried(path(of: item)) else { continue }
        let scanned = item.entry
        var made = record(status: scanned.status, protectionClass: 0)
        made.size = 0
        made.target = scanned.linkTarget ?? []
        rows.append(row(domain, path(of: item), .symlink, made))
        report.files += 1
      case .whole(let item, let file, let buffer, let count, _, _):
        defer { pool.give(buffer) }
        guard carried(path(of: item)) else { continue }
        let output = try openContent(domain, path(of: item), protectionClass: protectionClass(item, file))
        try output.write(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
        try finishFile(item, file, output)
      case .begin(let item, let file, _, _):
        current?.output.abandon()
        current = nil
        guard carried(path(of: item)) else { continue }
        current = (
          item, file, try openContent(domain, path(of: item), protectionClass: protectionClass(item, file))
        )
      case .chunk(let buffer, let count, _):
        defer { pool.give(buffer) }
        try current?.output.write(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
      case .hole(let count):
        try current?.output.writeZeros(count)
      case .end(_, _, let short, _, let final):
        guard let started = current else { continue }
        if short > 0 { try started.output.writeZeros(short) }
        current = nil
        if final {
          var file = started.file
          file.status.size = started.output.plaintextBytes
          try finishFile(started.item, file, started.output)
        } else {
          started.output.abandon()
        }
      case .confirmed(let item, let file, _):
        // Never sent without a previous snapshot or a seal; a file read only to confirm has
        // no bytes here to write, so it cannot be exported.
        warnings.append("'\(display(path(of: item)))' was not exported (size \(file.status.size))")
      case .excluded, .vanished:
        continue
      case .unreadable(let item, _):
        report.unreadable += 1
        report.unreadablePaths.append(path(of: item))
      case .hardlink(let item, let inode):
        let relative = path(of: item)
        guard let original = written[inode], carried(relative) else { continue }
        let fileID = DeviceBackupNames.fileID(domain: domain, relativePath: relative)
        try copyContent(from: original.fileID, to: fileID)
        rows.append(row(domain, relative, .file, original.record))
        report.files += 1
        report.bytes += original.record.size
      }
    }
  }

  private func record(status: EntryStatus, protectionClass: Int64) -> MBFileRecord {
    let modified = status.modificationNanoseconds.floorDivided(by: 1_000_000_000)
    var made = MBFileRecord(
      mode: status.mode, size: status.size, lastModified: modified,
      lastStatusChange: status.changeNanoseconds.floorDivided(by: 1_000_000_000), birth: modified,
      protectionClass: protectionClass)
    made.inode = status.inode
    if status.mode & UInt32(S_IFMT) != UInt32(S_IFREG) { made.size = 0 }
    return made
  }

  private func row(_ domain: String, _ path: [UInt8], _ kind: DeviceBackupEntryKind, _ record: MBFileRecord)
    -> DeviceBackupRow
  {
    DeviceBackupRow(
      fileID: DeviceBackupNames.fileID(domain: domain, relativePath: path), domain: domain,
      relativePath: path,
      kind: kind, file: record.encoded(relativePath: path))
  }

  private func subdirectory(for fileID: String) throws -> FileDescriptor {
    let name = String(fileID.prefix(2))
    if let open = subdirectories[name] { return open }
    do {
      try folder.makeDirectory(name, mode: 0o700)
    } catch let error as SystemError where error.errno == .exists {}
    let opened = try folder.open(name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    subdirectories[name] = opened
    return opened
  }

  private func openContent(_ domain: String, _ path: [UInt8], protectionClass: Int64) throws -> ContentFile {
    let fileID = DeviceBackupNames.fileID(domain: domain, relativePath: path)
    let directory = try subdirectory(for: fileID)
    let fd = try directory.open(fileID, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, mode: 0o600)
    return try ContentFile(
      fileID: fileID, descriptor: fd, protectionClass: protectionClass, classKeys: classKeys)
  }

  private func copyContent(from source: String, to target: String) throws {
    let input = try subdirectory(for: source).open(source, O_RDONLY | O_NOFOLLOW)
    defer { input.close() }
    let output = try subdirectory(for: target).open(
      target, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, mode: 0o600)
    defer { output.close() }
    try output.writeAll(try input.readAll(limit: Int.max))
  }
}

/// One content file being written: plain, or encrypted under its own key.
private final class ContentFile {
  let fileID: String
  private let descriptor: FileDescriptor
  private let cipher: AESCBCStream?
  /// The EncryptionKey (class and wrapped key) of an encrypted file.
  private let encryptionKey: [UInt8]?
  private var scratch: [UInt8] = []
  private var closed = false
  private(set) var plaintextBytes: Int64 = 0
  /// The MBFile's ProtectionClass, whose class key wraps the file's key (readers choose the
  /// class key by it).
  let protectionClass: Int64

  init(fileID: String, descriptor: FileDescriptor, protectionClass: Int64, classKeys: [UInt32: [UInt8]]?)
    throws
  {
    self.fileID = fileID
    self.descriptor = descriptor
    self.protectionClass = protectionClass
    guard let classKeys else {
      cipher = nil
      encryptionKey = nil
      return
    }
    let key = try SecureRandom.bytes(32)
    cipher = try AESCBCStream(key: key, encrypting: true)
    let keyClass = UInt32(protectionClass)
    guard let classKey = classKeys[keyClass] else {
      throw BackupError(
        .invalidRequest, "The keybag has no class \(keyClass) key to encrypt a backup file with")
    }
    encryptionKey = MBFileRecord.joined(
      protectionClass: keyClass, wrapped: try AESKeyWrap.wrap(key, with: classKey))
  }

  deinit { if !closed { descriptor.close() } }

  func write(_ bytes: UnsafeRawBufferPointer) throws {
    plaintextBytes += Int64(bytes.count)
    guard let cipher else { return try descriptor.writeAll(bytes) }
    if scratch.count < bytes.count + AESCBCStream.blockSize {
      scratch = [UInt8](repeating: 0, count: bytes.count + 64)
    }
    let count = try scratch.withUnsafeMutableBytes { try cipher.update(bytes, into: $0) }
    try scratch.withUnsafeBytes { try descriptor.writeAll(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
  }

  func writeZeros(_ count: Int64) throws {
    let zeros = [UInt8](repeating: 0, count: 64 << 10)
    var left = count
    while left > 0 {
      let n = Int(min(left, Int64(zeros.count)))
      try zeros.withUnsafeBytes { try write(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
      left -= Int64(n)
    }
  }

  /// Ends the file (the padded last block of an encrypted one); returns its EncryptionKey.
  func finish() throws -> [UInt8]? {
    if let cipher {
      var last = [UInt8](repeating: 0, count: 2 * AESCBCStream.blockSize)
      let count = try last.withUnsafeMutableBytes { try cipher.finish(into: $0) }
      try descriptor.writeAll(Array(last[0..<count]))
    }
    closed = true
    descriptor.close()
    return encryptionKey
  }

  /// Gives up on this attempt (another follows, which truncates the file).
  func abandon() {
    guard !closed else { return }
    closed = true
    descriptor.close()
  }
}

extension Int64 {
  /// The quotient rounded toward negative infinity (times before 1970 stay in their second).
  fileprivate func floorDivided(by divisor: Int64) -> Int64 {
    let (quotient, remainder) = quotientAndRemainder(dividingBy: divisor)
    return remainder < 0 ? quotient - 1 : quotient
  }
}
