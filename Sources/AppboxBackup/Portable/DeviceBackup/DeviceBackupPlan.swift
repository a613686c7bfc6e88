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
// member count, apparent size and free space within the limits). The admitted rows are then
// laid out as directories (PlannedDirectory), each with its children sorted by name: the
// depth-first order a backup's scan hands directories over in. The plan is the domain's own
// (all of it must be judged before anything is written, and rows come in no useful order);
// the content reader makes each directory a ScannedDirectory only as it walks it.
//
// Invariants: nothing is read from the folder here but Manifest.db; any refusal is one
// `.refusedArchive` error naming the folder, Manifest.db and the row (exit 65).

import AppboxContainer
import AppboxCore
import AppboxPipeline
import AppboxPlist
import AppboxRepository
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

/// A directory of a domain as the import lays it out: its MBFile (nil: implied by a deeper
/// path) and its children in name order.
struct PlannedDirectory {
  var record: MBFileRecord?
  var children: [PlannedChild] = []
}

/// A child of a planned directory: a subdirectory (`index` into the plan's directories) or an
/// admitted file or symlink (`index` into its items).
struct PlannedChild {
  var name: [UInt8]
  var index: Int
  var isDirectory: Bool
}

/// A domain's admitted rows, laid out as directories (the content reader turns each into a
/// ScannedDirectory only when it walks it, so the pipeline holds the directories on its path,
/// as for a backup; the plan itself is a few small values per row).
struct DeviceBackupPlan {
  var items: [DeviceBackupItem]
  /// The domain's root first.
  var directories: [PlannedDirectory]
  /// The import's time (seconds), for implied directories and a root without a row.
  var time: Int64
  /// Rows left out (Library/Caches, and what an app's home does not keep), by group.
  var skipped: SkippedMembers
  var rowCount: Int
  /// Regular files to read, and their bytes.
  var fileCount: Int
  var fileBytes: Int64
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
    var layout = DomainLayout(root: validator.root, record: root)
    var skipped = SkippedMembers()
    var kept: [DeviceBackupItem] = []
    var fileCount = 0
    var fileBytes: Int64 = 0
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
        let admitted = try validator.admit(facts)
        layout.add(row, at: kept.count, admitted, parents: validator.trail, root: validator.root)
        if case .directory = admitted.admission { continue }
        if row.kind == .file {
          fileCount += 1
          fileBytes += row.record.size
        }
        kept.append(row)
      }
    } catch let error as BackupError where error.code == .refusedArchive {
      throw refuse(error.message)
    }
    return DeviceBackupPlan(
      items: kept, directories: layout.finish(), time: Int64(time.timeIntervalSince1970), skipped: skipped,
      rowCount: count, fileCount: fileCount, fileBytes: fileBytes)
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
    let input = rows
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

/// Lays out admitted rows as directories with their children. A directory is known by the
/// validator's own node for it (never by its path: a row 30,000 levels deep implies 30,000
/// directories, whose paths would add up to gigabytes), and its parent is always laid out
/// first (rows come sorted, and the validator creates implied directories shallowest first).
private struct DomainLayout {
  var directories: [PlannedDirectory]
  var index: [ObjectIdentifier: Int]

  init(root: ImportDirectory, record: MBFileRecord?) {
    directories = [PlannedDirectory(record: record)]
    index = [ObjectIdentifier(root): 0]
  }

  /// Lays out `row` (admitted as `admitted`; `parents` is the validator's trail for it, the
  /// directories of its path from the top): the directories it implies, then itself. A file
  /// or symlink is item `position` of the plan.
  mutating func add(
    _ row: DeviceBackupItem, at position: Int, _ admitted: ImportValidator.Admitted,
    parents: [ImportDirectory], root: ImportDirectory
  ) {
    let names = Self.lastNames(of: row.path, count: admitted.impliedCount + 1)
    for (offset, depth) in ((parents.count - admitted.impliedCount)..<parents.count).enumerated() {
      addDirectory(
        parents[depth], named: names[offset], in: depth == 0 ? root : parents[depth - 1], record: nil)
    }
    let parent = parents.last ?? root
    if case .directory = admitted.admission, let directory = admitted.directory {
      addDirectory(directory, named: names[names.count - 1], in: parent, record: row.record)
    } else {
      directories[index[ObjectIdentifier(parent)]!].children.append(
        PlannedChild(name: names[names.count - 1], index: position, isDirectory: false))
    }
  }

  /// A directory with its MBFile (nil: implied). One repeated keeps its first metadata.
  private mutating func addDirectory(
    _ directory: ImportDirectory, named name: [UInt8], in parent: ImportDirectory, record: MBFileRecord?
  ) {
    guard index[ObjectIdentifier(directory)] == nil else { return }
    let made = directories.count
    index[ObjectIdentifier(directory)] = made
    directories[index[ObjectIdentifier(parent)]!].children.append(
      PlannedChild(name: name, index: made, isDirectory: true))
    directories.append(PlannedDirectory(record: record))
  }

  /// The last `count` components of `path`, in order (read from its end: their cost only).
  private static func lastNames(of path: [UInt8], count: Int) -> [[UInt8]] {
    var names: [[UInt8]] = []
    var end = path.count
    while names.count < count {
      let start = path[..<end].lastIndex(of: UInt8(ascii: "/")).map { $0 + 1 } ?? 0
      names.append(Array(path[start..<end]))
      guard start > 0 else { break }
      end = start - 1
    }
    return names.reversed()
  }

  /// The directories, each one's children in name order.
  func finish() -> [PlannedDirectory] {
    directories.map { directory in
      var sorted = directory
      sorted.children.sort { $0.name.lexicographicallyPrecedes($1.name) }
      return sorted
    }
  }
}
