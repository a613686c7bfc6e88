// import-backup, step 2: the content reader. It takes the place of a backup's ContentReader
// (same thread, same messages, same Archiver on the other side), walking the plan's directories
// instead of a scan and reading each file from the backup folder instead of a home.
//
// Algorithm: the plan's directories are walked depth-first, in name order, as a scan hands
// them over: each becomes a ScannedDirectory (its entries with the statuses their MBFiles
// give) only when the walk reaches it, and is released once the archiver has built its tree
// (the reader says where each begins and, after its subtree, where it ends), so the pipeline
// holds the directories on its path, never all of them. Within a directory, symlinks pass
// straight through; a file's content `XX/<fileID>` is opened beneath the folder (no symlink followed, a regular
// file only) and must have exactly the bytes its MBFile promises: its Size, or in an encrypted
// backup Size rounded up to whole AES blocks with a block of padding when the size is a
// multiple of 16. An encrypted file's key is unwrapped with the class key its EncryptionKey
// names; its content is decrypted (AES-256-CBC, zero IV) as it is read, into the pool buffers
// the archiver frees. Files up to a buffer go whole (the archiver hashes them when it keeps up,
// else this thread does); larger ones stream in buffer-sized chunks. SHA-256 runs once, on the
// plaintext, as it passes: one read of every byte, no copy of a file on disk.
//
// A file the manifest lists but the folder lacks is reported (`.unreadable`): left out of the
// snapshot, which is then incomplete; never invented. An empty file may have no content file.
// Anything else wrong with a file (a symlink, the wrong size, a key that does not unwrap, bad
// padding, fewer bytes than its size) stops the import with a `.refusedArchive` error naming
// the file (exit 65); the staged archive is then abandoned, so nothing is committed.

import AppboxContainer
import AppboxCore
import AppboxPipeline
import AppboxCrypto
import AppboxRepository
import Glibc

final class DeviceBackupContentReader: Sendable {
  /// What the reader needs of the backup (whose Manifest.db connection stays on the caller's
  /// thread): its path, whether it is encrypted, its class keys, and its folder, open on a
  /// descriptor of the reader's own (closed when the reader goes).
  private let backupPath: String
  private let folder: FileDescriptor
  private let isEncrypted: Bool
  private let classKeys: [UInt32: [UInt8]]
  private let plan: DeviceBackupPlan
  private let domain: String
  private let queue: HandoffQueue<ContentMessage>
  private let pool: BufferPool

  init(
    backup: DeviceBackup, plan: DeviceBackupPlan, domain: String, queue: HandoffQueue<ContentMessage>,
    pool: BufferPool
  ) throws {
    backupPath = backup.path
    folder = try backup.folder.borrowed.duplicate()
    isEncrypted = backup.isEncrypted
    classKeys = backup.classKeys
    self.plan = plan
    self.domain = domain
    self.queue = queue
    self.pool = pool
  }

  deinit { folder.close() }

  /// Files whose plaintext fits this go whole: the ciphertext, a block longer, must fit a
  /// buffer too, with a block of room for the decryption's output.
  private var wholeLimit: Int64 { Int64(pool.bufferSize - 2 * AESCBCStream.blockSize) }

  /// Runs on the reader thread; closes the queue when done or failed.
  func run() throws {
    defer { queue.close() }
    let hasher = SHA256Hasher()
    let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: pool.bufferSize, alignment: 16)
    defer { scratch.deallocate() }
    let rules = ScanRules(bundleDirectoryName: "", includeBundle: true)
    // Directories still to walk (the next on top), and those whose subtrees are not done yet,
    // from the root down: the only ScannedDirectory values alive.
    var pending: [(planned: Int, parent: ScannedDirectory?, name: [UInt8], position: Int32)] = [
      (0, nil, [], -1)
    ]
    var open: [ScannedDirectory] = []
    while let next = pending.popLast() {
      let directory = ScannedDirectory(
        parent: next.parent, name: next.name, position: next.position, previous: nil, rules: rules)
      let planned = plan.directories[next.planned]
      describe(directory, planned)
      while let top = open.last, top.depth >= directory.depth {
        open.removeLast()
        guard queue.push(.endDirectory(top)) else { return }
      }
      open.append(directory)
      guard queue.push(.directory(directory)) else { return }
      for (position, child) in planned.children.enumerated() where !child.isDirectory {
        let item = ItemReference(directory: directory, position: Int32(position))
        let row = plan.items[child.index]
        if row.kind == .symlink {
          guard queue.push(.symlink(item)) else { return }
        } else {
          guard try read(item, row, hasher: hasher, scratch: scratch) else { return }
        }
      }
      for (position, child) in planned.children.enumerated().reversed() where child.isDirectory {
        pending.append((child.index, directory, child.name, Int32(position)))
      }
    }
    while let top = open.popLast() {
      guard queue.push(.endDirectory(top)) else { return }
    }
  }

  /// Gives `directory` what a scan would have found: its status and its entries in name
  /// order, each with the status its MBFile gives (whole-second mtimes; ctime and inode 0, so
  /// nothing takes an imported entry for a file on disk).
  private func describe(_ directory: ScannedDirectory, _ planned: PlannedDirectory) {
    directory.status = directoryStatus(planned.record)
    var names: [UInt8] = []
    var entries: [ScannedEntry] = []
    entries.reserveCapacity(planned.children.count)
    for child in planned.children {
      var type = TreeEntryType.directory
      var status: FileStatus
      var target: [UInt8]?
      if child.isDirectory {
        status = directoryStatus(plan.directories[child.index].record)
      } else {
        let row = plan.items[child.index]
        if row.kind == .symlink {
          type = .symlink
          target = row.record.target ?? []
        } else {
          type = .file
        }
        status = deviceBackupStatus(
          mode: row.record.mode, size: target.map { Int64($0.count) } ?? row.record.size,
          modified: row.record.lastModified)
      }
      var entry = ScannedEntry(
        nameStart: Int32(names.count), nameLength: Int32(child.name.count), status: EntryStatus(status),
        type: type, previous: nil)
      entry.linkTarget = target
      names += child.name
      names.append(0)
      entries.append(entry)
    }
    directory.names = names
    directory.entries = entries
  }

  /// A directory's status from its MBFile; 0755 and the import's time for one implied.
  private func directoryStatus(_ record: MBFileRecord?) -> FileStatus {
    deviceBackupStatus(
      mode: record?.mode ?? UInt32(S_IFDIR | 0o755), size: 0, modified: record?.lastModified ?? plan.time)
  }

  private func damaged(_ item: DeviceBackupItem, _ why: String) -> BackupError {
    DeviceBackup.refusal(
      backupPath,
      "'\(String(item.fileID.prefix(2)))/\(item.fileID)' (\(display(Snapshot.shortened(item.path))) of \(domain)) "
        + "is damaged: \(why)")
  }

  /// Reads one file and hands it over. Returns false when the archiver cancelled.
  private func read(
    _ reference: ItemReference, _ item: DeviceBackupItem, hasher: SHA256Hasher,
    scratch: UnsafeMutableRawBufferPointer
  )
    throws -> Bool
  {
    let size = item.record.size
    let status = EntryStatus(
      deviceBackupStatus(mode: item.record.mode, size: size, modified: item.record.lastModified))
    let protectionClass = ProtectionClass(deviceBackupClass: item.record.protectionClass)
    let attributes =
      protectionClass == .none
      ? [] : [ExtendedAttribute(name: protectionClassAttribute, value: Array(protectionClass.rawValue.utf8))]
    let file = OpenedFile(status: status, attributes: attributes)
    let contentPath = DeviceBackupNames.contentPath(item.fileID)
    guard
      let (fd, found) = try DeviceBackup.openRegular(
        contentPath, in: folder, path: backupPath)
    else {
      if size == 0 { return pushEmpty(reference, file) }
      return queue.push(
        .unreadable(
          item: reference,
          reason:
            "Manifest.db lists it, but its content '\(display(contentPath))' is not in the backup folder"
        ))
    }
    defer { fd.close() }
    var cipher: AESCBCStream?
    if isEncrypted {
      guard let stored = item.record.encryptionKey, let split = MBFileRecord.split(encryptionKey: stored)
      else {
        throw damaged(item, "its MBFile has no usable EncryptionKey")
      }
      guard let classKey = classKeys[split.protectionClass] else {
        throw damaged(
          item, "its EncryptionKey names class \(split.protectionClass), which the keybag does not hold")
      }
      guard let key = try AESKeyWrap.unwrap(split.wrapped, with: classKey), key.count == 32 else {
        throw damaged(item, "its key does not unwrap with its class key")
      }
      if found.size == 0 && size == 0 { return pushEmpty(reference, file) }
      let expected = (size / 16 + 1) * 16
      guard found.size == expected else {
        throw damaged(item, "it holds \(found.size) bytes, where \(size) bytes encrypted take \(expected)")
      }
      cipher = try AESCBCStream(key: key, encrypting: false)
    } else {
      guard found.size == size else {
        throw damaged(item, "it holds \(found.size) bytes, Manifest.db says \(size)")
      }
    }
    if size <= wholeLimit {
      let buffer = pool.take(beforeWaiting: queue.nudge)
      do {
        let count = try fill(
          buffer.bytes, from: fd, stored: Int(found.size), cipher: cipher, scratch: scratch, item: item)
        guard count == Int(size) else { throw damaged(item, "it decrypts to \(count) bytes, not \(size)") }
        var digest: Digest?
        if !pool.isMostlyFree {
          hasher.update(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
          digest = hasher.finalize()
        }
        let message = ContentMessage.whole(
          item: reference, file: file, buffer: buffer, count: count, digest: digest, stable: true)
        if !queue.push(message, cost: count + 256) {
          pool.give(buffer)
          return false
        }
        return true
      } catch {
        pool.give(buffer)
        throw error
      }
    }
    let archiverHashes = pool.isMostlyFree
    guard queue.push(.begin(item: reference, file: file, archiverHashes: archiverHashes, mode: .whole)) else {
      return false
    }
    var left = Int(found.size)
    var produced: Int64 = 0
    // Each buffer gets at most a buffer less two blocks of ciphertext: with the block the
    // cipher holds back, its output still fits.
    let step = cipher == nil ? pool.bufferSize : pool.bufferSize - 2 * AESCBCStream.blockSize
    while left > 0 || cipher != nil {
      let buffer = pool.take(beforeWaiting: queue.nudge)
      var count = 0
      do {
        if left > 0 {
          let want = min(step, left)
          if let cipher {
            try readExactly(fd, into: UnsafeMutableRawBufferPointer(rebasing: scratch[0..<want]), item: item)
            count = try decrypt(
              cipher, UnsafeRawBufferPointer(rebasing: scratch[0..<want]), into: buffer.bytes, item: item)
          } else {
            try readExactly(fd, into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want]), item: item)
            count = want
          }
          left -= want
        } else if let finishing = cipher {
          count = try finish(finishing, into: buffer.bytes, item: item)
          cipher = nil
        }
      } catch {
        pool.give(buffer)
        throw error
      }
      produced += Int64(count)
      guard produced <= size else {
        pool.give(buffer)
        throw damaged(item, "it decrypts to more than \(size) bytes")
      }
      if count == 0 {
        pool.give(buffer)
        continue
      }
      if !archiverHashes { hasher.update(UnsafeRawBufferPointer(rebasing: buffer[0..<count])) }
      guard queue.push(.chunk(buffer: buffer, count: count, cut: -1), cost: count) else {
        pool.give(buffer)
        return false
      }
    }
    guard produced == size else { throw damaged(item, "it decrypts to \(produced) bytes, not \(size)") }
    return queue.push(
      .end(
        item: reference, digest: archiverHashes ? nil : hasher.finalize(), short: 0, stable: true, final: true
      )
    )
  }

  private func pushEmpty(_ reference: ItemReference, _ file: OpenedFile) -> Bool {
    let buffer = pool.take(beforeWaiting: queue.nudge)
    if !queue.push(.whole(item: reference, file: file, buffer: buffer, count: 0, digest: nil, stable: true)) {
      pool.give(buffer)
      return false
    }
    return true
  }

  /// Reads a whole small file into `buffer`, decrypting through `scratch`; returns its length.
  private func fill(
    _ buffer: UnsafeMutableRawBufferPointer, from fd: FileDescriptor, stored: Int, cipher: AESCBCStream?,
    scratch: UnsafeMutableRawBufferPointer, item: DeviceBackupItem
  ) throws -> Int {
    guard let cipher else {
      try readExactly(fd, into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<stored]), item: item)
      return stored
    }
    try readExactly(fd, into: UnsafeMutableRawBufferPointer(rebasing: scratch[0..<stored]), item: item)
    let count = try decrypt(
      cipher, UnsafeRawBufferPointer(rebasing: scratch[0..<stored]), into: buffer, item: item)
    return count
      + (try finish(cipher, into: UnsafeMutableRawBufferPointer(rebasing: buffer[count...]), item: item))
  }

  private func decrypt(
    _ cipher: AESCBCStream, _ input: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer,
    item: DeviceBackupItem
  ) throws -> Int {
    do { return try cipher.update(input, into: output) } catch let error as CryptoError {
      throw damaged(item, error.reason)
    }
  }

  private func finish(
    _ cipher: AESCBCStream, into output: UnsafeMutableRawBufferPointer, item: DeviceBackupItem
  )
    throws -> Int
  {
    do { return try cipher.finish(into: output) } catch let error as CryptoError {
      throw damaged(item, error.reason)
    }
  }

  private func readExactly(
    _ fd: FileDescriptor, into buffer: UnsafeMutableRawBufferPointer, item: DeviceBackupItem
  )
    throws
  {
    var done = 0
    while done < buffer.count {
      let n: Int
      do {
        n = try fd.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[done...]))
      } catch let error as SystemError {
        throw BackupError(
          .unreadable(error.kind == .denied ? .denied : .io),
          "Unable to read '\(backupPath)/\(item.fileID.prefix(2))/\(item.fileID)': \(error.errno)")
      }
      if n == 0 { throw damaged(item, "it ended early") }
      done += n
    }
  }
}
