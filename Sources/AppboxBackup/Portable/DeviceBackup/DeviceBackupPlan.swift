// import-backup, step 1: one domain's Manifest.db rows judged, and laid out as the archive
// plan a backup's scan would have produced.
//
// Algorithm: one query for the domain (`SELECT … FROM Files WHERE domain = ?`), stepped once
// over its rows (no SQL per file). Each row: the path is at most 64 KiB without NUL; the fileID
// is 40 hex digits and the SHA-1 of "<domain>-<path>" (so `XX/<fileID>` names a file inside the
// folder, and no two rows share one); the flags are a file, directory or symlink and the
// MBFile's Mode agrees; the MBFile decodes within its limits. The empty path is the domain's
// root. Rows are sorted by path, placed (an app keeps Documents and Library; a group all of
// its container; both skip Library/Caches, and an app what else iOS keeps there, counted), and
// judged by ImportValidator: the rules of `import` (no absolute path, `..`, `.` or empty
// component, no setuid or setgid bit, no path twice, no write through a symlink or into a file,
// member count, apparent size and free space within the limits). Then the directories and
// entries become ScannedDirectory values, entries sorted by name, each with the status its
// MBFile gives (whole-second mtimes; ctime and inode 0, so change detection never takes an
// imported entry for a file on disk), and ArchivePlan orders the items as a full backup would.
//
// Invariants: nothing is read from the folder here but Manifest.db; any refusal is one
// `.refusedArchive` error naming the folder, Manifest.db and the row (exit 65).

import AppboxContainer
import AppboxCore
import AppboxStore
import Foundation
import Glibc

/// One admitted row of a domain.
struct DeviceBackupItem {
  var fileID: String
  var path: [UInt8]
  var kind: DeviceBackupEntryKind
  var record: MBFileRecord
}

/// A domain's rows as an archive plan.
struct DeviceBackupPlan {
  var archive: ArchivePlan
  var items: [DeviceBackupItem]
  /// For each `.file` item of `archive`, by item index: its row in `items`.
  var fileRows: [Int: Int]
  /// Rows left out (Library/Caches, and what an app's home does not keep), by group.
  var skipped: SkippedMembers
  var rowCount: Int
}

extension DeviceBackup {
  /// Reads and judges `domain`'s rows (a group's container when `isGroup`).
  func plan(for domain: DeviceBackupDomain, limits: ImportLimits, room: Int64, time: Date) throws
    -> DeviceBackupPlan
  {
    let isGroup: Bool
    if case .group = domain { isGroup = true } else { isGroup = false }
    func refuse(_ what: String) -> BackupError {
      Self.refusal(path, "Manifest.db: \(what) (\(domain.name))")
    }
    var validator = ImportValidator(
      maxEntries: limits.maxEntries, maxBytes: limits.maxBytes, maxDataBytes: room,
      allowedTopLevel: isGroup ? nil : ImportValidator.topLevel)
    // The scan: one query, stepped once; the cheap checks here, the rest in `judge`, a batch
    // of rows at a time on both cores (the first refusal in scan order wins, as if judged one
    // by one), so only a batch of raw rows is held at once.
    var raw: [RawRow] = []
    var rows: [DeviceBackupItem] = []
    var root: MBFileRecord?
    var count = 0
    func judgeBatch() throws {
      for outcome in Self.judgeAll(raw, domain: domain.name) {
        switch outcome {
        case .failure(let refusal): throw refuse(refusal.why)
        case .success(let item):
          if item.path.isEmpty {
            guard item.kind == .directory, root == nil else {
              throw refuse("the domain's root row is not one directory")
            }
            root = item.record
          } else {
            rows.append(item)
          }
        }
      }
      count += raw.count
      raw.removeAll(keepingCapacity: true)
    }
    let statement = try database.prepare(
      "SELECT fileID, relativePath, flags, file FROM Files WHERE domain = ?1")
    try statement.bind(domain.name, at: 1)
    do {
      while try statement.step() {
        try validator.count()
        let relative = statement.blob(1)
        let shown = display(Snapshot.shortened(relative))
        guard relative.count <= ScanRules.maximumPathLength else {
          throw refuse("row '\(shown)' has a path longer than \(ScanRules.maximumPathLength) bytes")
        }
        guard !relative.contains(0) else { throw refuse("row '\(shown)' has a NUL byte in its path") }
        let blob = statement.blob(3)
        guard blob.count <= MBFileRecord.limits.maxBytes else {
          throw refuse("row '\(shown)' has an MBFile over 64 KiB")
        }
        raw.append(RawRow(id: statement.blob(0), path: relative, flags: statement.int64(2), blob: blob))
        if raw.count == 8192 { try judgeBatch() }
      }
      try judgeBatch()
    } catch let error as BackupError
      where error.code == .refusedArchive && !error.message.hasPrefix("Refused")
    {
      throw refuse(error.message)
    } catch let error as StoreError {
      throw Self.refusal(path, "Manifest.db is damaged: \(error.message)")
    }
    rows.sort { $0.path.lexicographicallyPrecedes($1.path) }
    var layout = TreeLayout(time: time, root: root)
    var skipped = SkippedMembers()
    var kept: [DeviceBackupItem] = []
    do {
      for row in rows {
        if let group = Self.skipGroup(row.path, isGroup: isGroup) {
          skipped.add(group)
          continue
        }
        let target: [UInt8] = row.kind == .symlink ? (row.record.target ?? []) : []
        let facts = ArchiveEntryFacts(
          path: row.path,
          kind: row.kind == .directory ? .directory : row.kind == .file ? .regular : .symlink(target),
          permissions: row.record.mode & 0o7777, size: row.kind == .file ? row.record.size : 0,
          dataSize: row.kind == .file ? row.record.size : 0, attributeNames: [])
        let (admission, implied) = try validator.admit(facts)
        for directory in implied { layout.addDirectory(directory, record: nil) }
        switch admission {
        case .directory: layout.addDirectory(row.path, record: row.record)
        case .file, .symlink, .hardlink:
          layout.addEntry(row.path, record: row.record, kind: row.kind, row: kept.count)
          kept.append(row)
        }
      }
    } catch let error as BackupError where error.code == .refusedArchive {
      throw refuse(error.message)
    }
    let (directories, rowOfEntry) = layout.finish()
    let archive = ArchivePlan(directories: directories, full: true)
    var fileRows: [Int: Int] = [:]
    for (index, item) in archive.items.enumerated() {
      if case .file(let directory, let entry) = item { fileRows[index] = rowOfEntry[directory][entry] }
    }
    return DeviceBackupPlan(
      archive: archive, items: kept, fileRows: fileRows, skipped: skipped, rowCount: count)
  }

  struct RawRow {
    var id: [UInt8]
    var path: [UInt8]
    var flags: Int64
    var blob: [UInt8]
  }

  struct Refusal: Error {
    var why: String
  }

  /// One row judged: its fileID, flags and MBFile, or why it is refused.
  static func judge(_ row: RawRow, domain: String) -> Result<DeviceBackupItem, Refusal> {
    let shown = display(Snapshot.shortened(row.path))
    let expected = DeviceBackupNames.fileID(domain: domain, relativePath: row.path)
    guard DeviceBackupNames.isFileID(row.id), row.id.elementsEqual(expected.utf8) else {
      return .failure(
        Refusal(why: "row '\(shown)' has a fileID that is not the SHA-1 of its domain and path"))
    }
    guard let kind = DeviceBackupEntryKind(rawValue: row.flags) else {
      return .failure(Refusal(why: "row '\(shown)' has flags \(row.flags) (1 file, 2 directory, 4 symlink)"))
    }
    let record: MBFileRecord
    do {
      record = try MBFileRecord.decode(row.blob)
    } catch let error as PropertyListError {
      return .failure(Refusal(why: "row '\(shown)' has a damaged MBFile: \(error.description)"))
    } catch let error as BackupError {
      return .failure(Refusal(why: "row '\(shown)' has a damaged MBFile: \(error.message)"))
    } catch {
      return .failure(Refusal(why: "row '\(shown)' has a damaged MBFile: \(error)"))
    }
    guard record.mode & UInt32(S_IFMT) == kind.modeType else {
      return .failure(
        Refusal(
          why: "row '\(shown)' has a Mode (0o\(String(record.mode, radix: 8))) that disagrees with its flags")
      )
    }
    return .success(DeviceBackupItem(fileID: expected, path: row.path, kind: kind, record: record))
  }

  /// `judge` over every row, half of them on a second thread.
  static func judgeAll(_ rows: [RawRow], domain: String) -> [Result<DeviceBackupItem, Refusal>] {
    guard rows.count > 512 else { return rows.map { judge($0, domain: domain) } }
    let results = UnsafeMutableBufferPointer<Result<DeviceBackupItem, Refusal>?>.allocate(
      capacity: rows.count)
    results.initialize(repeating: nil)
    defer { results.deallocate() }
    nonisolated(unsafe) let shared = results
    nonisolated(unsafe) let input = rows
    let half = rows.count / 2
    let helper = WorkerThread(name: "appbox-judge") {
      for index in half..<input.count { shared[index] = judge(input[index], domain: domain) }
    }
    for index in 0..<half { results[index] = judge(rows[index], domain: domain) }
    try? helper.join()
    return results.map { $0! }
  }

  /// The group a row is skipped under, or nil when it is imported. A malformed path is
  /// never skipped: the validator refuses it.
  static func skipGroup(_ path: [UInt8], isGroup: Bool) -> String? {
    let components = path.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
    if path.first == UInt8(ascii: "/")
      || components.contains(where: {
        $0.isEmpty || $0.elementsEqual([0x2E]) || $0.elementsEqual([0x2E, 0x2E])
      })
    {
      return nil
    }
    let first = components[0]
    if first.elementsEqual("Library".utf8), components.count >= 2, components[1].elementsEqual("Caches".utf8)
    {
      return "Library/Caches"
    }
    if isGroup || first.elementsEqual("Documents".utf8) || first.elementsEqual("Library".utf8) { return nil }
    return display(Snapshot.shortened(Array(first.prefix(64))))
  }
}

/// A status as a scan would have taken it, from what an MBFile says.
func deviceBackupStatus(mode: UInt32, size: Int64, modified seconds: Int64) -> FileStatus {
  var raw = stat()
  raw.st_mode = mode
  raw.st_size = Int(max(0, size))
  raw.st_nlink = 1
  raw.st_uid = getuid()
  raw.st_gid = getgid()
  // Whole seconds, kept where nanoseconds since 1970 fit an Int64.
  raw.st_mtim = timespec(tv_sec: Int(min(max(seconds, 0), 9_000_000_000)), tv_nsec: 0)
  return FileStatus(raw)
}

/// Builds the scanned directories from admitted paths, parents before children.
private struct TreeLayout {
  struct Pending {
    var name: [UInt8]
    var type: TreeEntryType
    var status: EntryStatus
    var linkTarget: [UInt8]?
    var child: Int?
    var row: Int
  }

  var directories: [ScannedDirectory] = []
  var pending: [[Pending]] = [[]]
  var index: [[UInt8]: Int] = [[]: 0]
  let time: Date

  init(time: Date, root: MBFileRecord?) {
    self.time = time
    var home = ScannedDirectory()
    home.status = deviceBackupStatus(
      mode: root?.mode ?? UInt32(S_IFDIR | 0o755), size: 0,
      modified: root?.lastModified ?? Int64(time.timeIntervalSince1970))
    directories = [home]
  }

  private static func split(_ path: [UInt8]) -> (parent: [UInt8], name: [UInt8]) {
    guard let slash = path.lastIndex(of: UInt8(ascii: "/")) else { return ([], path) }
    return (Array(path[..<slash]), Array(path[(slash + 1)...]))
  }

  /// A directory, with its MBFile's metadata, or 0755 and the import's time when implied. A
  /// directory repeated keeps its first metadata.
  mutating func addDirectory(_ path: [UInt8], record: MBFileRecord?) {
    guard index[path] == nil else { return }
    let (parentPath, name) = Self.split(path)
    let parent = index[parentPath]!
    let status = deviceBackupStatus(
      mode: record?.mode ?? UInt32(S_IFDIR | 0o755), size: 0,
      modified: record?.lastModified ?? Int64(time.timeIntervalSince1970))
    var directory = ScannedDirectory()
    directory.parent = parent
    directory.name = name
    directory.pathLength = path.count
    directory.status = status
    let child = directories.count
    directories.append(directory)
    pending.append([])
    index[path] = child
    pending[parent].append(
      Pending(
        name: name, type: .directory, status: EntryStatus(status), linkTarget: nil, child: child, row: -1))
  }

  mutating func addEntry(_ path: [UInt8], record: MBFileRecord, kind: DeviceBackupEntryKind, row: Int) {
    let (parentPath, name) = Self.split(path)
    let parent = index[parentPath]!
    let target = kind == .symlink ? record.target : nil
    let status = deviceBackupStatus(
      mode: record.mode, size: kind == .symlink ? Int64(target?.count ?? 0) : record.size,
      modified: record.lastModified)
    pending[parent].append(
      Pending(
        name: name, type: kind == .symlink ? .symlink : .file, status: EntryStatus(status),
        linkTarget: target,
        child: nil, row: row))
  }

  /// The directories with their entries in name order, and each entry's row (-1: a directory).
  func finish() -> ([ScannedDirectory], [[Int]]) {
    var result = directories
    var rows: [[Int]] = []
    for (position, entries) in pending.enumerated() {
      let sorted = entries.sorted { $0.name.lexicographicallyPrecedes($1.name) }
      var names: [UInt8] = []
      var scanned: [ScannedEntry] = []
      scanned.reserveCapacity(sorted.count)
      for entry in sorted {
        var made = ScannedEntry(
          nameStart: Int32(names.count), nameLength: Int32(entry.name.count), status: entry.status,
          type: entry.type,
          previous: nil)
        made.linkTarget = entry.linkTarget
        made.child = entry.child
        names += entry.name
        names.append(0)
        scanned.append(made)
      }
      result[position].names = names
      result[position].entries = scanned
      rows.append(sorted.map(\.row))
    }
    return (result, rows)
  }
}
