// `dump` of a folder: the folder and everything below it as one pax tar stream, made from the
// trees and the stored contents (no archive of the snapshot is copied: an incremental one holds
// only what changed).
//
// Algorithm: walk the folder depth first in name order (SnapshotBrowser.swift), and write a
// member per entry, its path relative to the folder's parent (so `tar -x` of `dump S Documents`
// makes `Documents/…`, and of the top makes the home as the snapshot had it): a directory
// member before its contents, a file member followed by its content (ContentStream.swift, every
// byte verified; holes written as zeros), symlinks with their targets byte for byte, FIFOs.
// Files recorded with a link count above one and the same inode are hard links: the first path
// met carries the content and the others are hard-link members naming it. Mode, times, owner
// ids and `user.` attributes come from the tree entries (the protection record is a private
// attribute, left out as restore leaves it out).
//
// Invariants: member paths are relative, made of validated tree names (no `..`, `/` or NUL in
// a name), so an extraction stays in its directory; the stream is finished (end-of-archive
// blocks) only when everything was written and verified: a damaged content stops it short, and
// the command fails (65).

import AppboxArchive
import AppboxCore
import AppboxCrypto
import AppboxRepository
import Glibc

/// Where a dump's tar bytes go (standard output, a file).
public final class ClosureArchiveOutput: ArchiveOutput {
  private let body: (UnsafeRawBufferPointer) throws -> Void
  public init(_ body: @escaping (UnsafeRawBufferPointer) throws -> Void) { self.body = body }
  public func write(_ bytes: UnsafeRawBufferPointer) throws { try body(bytes) }
}

/// What a dump of a folder wrote.
public struct DumpReport: Sendable {
  public var members = 0
  public var bytes: Int64 = 0
}

extension Repository {
  /// Writes the entry at `path` of `snapshot` as a pax tar to `output`: a folder with
  /// everything below it, or one file, symlink or FIFO.
  public func dumpTar(_ path: [UInt8], of snapshot: Snapshot, to output: ArchiveOutput) throws -> DumpReport {
    let top = try entry(at: path, in: snapshot)
    let writer = try ArchiveWriter(output: output, compression: .none, name: "standard output")
    var report = DumpReport()
    var firstPathOfInode: [UInt64: [UInt8]] = [:]
    // The member path: the entry's path from the top, minus the folder's parent.
    let parent = Array(
      top.path.split(separator: UInt8(ascii: "/")).dropLast().joined(separator: [UInt8(ascii: "/")]))
    func memberPath(_ full: [UInt8]) -> [UInt8] {
      parent.isEmpty ? full : Array(full.dropFirst(parent.count + 1))
    }
    func write(_ item: BrowsedEntry) throws {
      let entry = item.entry
      var member = ArchiveEntry(
        path: memberPath(item.path), type: .regular, permissions: entry.permissions, uid: entry.uid,
        gid: entry.gid,
        modificationTime: ArchiveTimestamp(
          seconds: entry.modificationTime.floorDivided(by: 1_000_000_000),
          nanoseconds: Int32(entry.modificationTime.floorModulo(1_000_000_000))),
        extendedAttributes: splitProtectionRecord(entry.extendedAttributes).0.map {
          ArchiveExtendedAttribute(name: $0.name, value: $0.value)
        })
      switch entry.type {
      case .directory:
        member.type = .directory
        try writer.writeHeader(member)
      case .symlink:
        member.type = .symlink
        member.linkTarget = entry.linkTarget ?? []
        try writer.writeHeader(member)
      case .fifo:
        member.type = .other(UInt32(Glibc.S_IFIFO))
        try writer.writeHeader(member)
      case .socket:
        return
      case .file:
        if entry.linkCount > 1 {
          if let first = firstPathOfInode[entry.inode] {
            member.type = .hardlink
            member.linkTarget = first
            try writer.writeHeader(member)
            try writer.finishEntry()
            report.members += 1
            return
          }
          firstPathOfInode[entry.inode] = member.path
        }
        member.size = entry.size
        try writer.writeHeader(member)
        var position: Int64 = 0
        try readContent(of: entry, path: item.path) { data, offset in
          if offset > position { try writer.writeZeros(offset - position) }
          try writer.writeData(data)
          position = offset + Int64(data.count)
        }
        if entry.size > position { try writer.writeZeros(entry.size - position) }
        report.bytes += entry.size
      }
      try writer.finishEntry()
      report.members += 1
    }
    if top.path.isEmpty {
      try walk(snapshot.rootTree, path: [], recursive: true, write)
    } else {
      try write(top)
      if top.entry.type == .directory, let digest = top.entry.digest {
        try walk(digest, path: top.path, recursive: true, write)
      }
    }
    try writer.finish()
    return report
  }
}

extension Int64 {
  fileprivate func floorDivided(by divisor: Int64) -> Int64 {
    let quotient = self / divisor
    return (self % divisor < 0) ? quotient - 1 : quotient
  }
  fileprivate func floorModulo(_ divisor: Int64) -> Int64 {
    let remainder = self % divisor
    return remainder < 0 ? remainder + divisor : remainder
  }
}
