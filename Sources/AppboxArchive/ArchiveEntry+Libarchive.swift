// Copies between `ArchiveEntry` and libarchive's `struct archive_entry`.
//
// Names go through the multibyte (`archive_entry_copy_pathname`) setters and getters, never the
// `_utf8` ones: in libarchive 3.6.2 `archive_entry_set_pathname_utf8` drops a name that is not
// valid UTF-8 ("Can't record entry in tar file without pathname") and makes the pax writer crash
// in the "C" locale. The multibyte form keeps bytes as they are; see ArchiveLocale.swift.

import CArchive

#if canImport(Glibc)
  import Glibc
#endif

extension ArchiveEntry {
  /// Why this entry cannot be written, or nil if it can.
  var invalidReason: String? {
    if path.isEmpty { return "the path is empty" }
    if containsNUL(path) { return "the path contains a NUL byte" }
    if let linkTarget, containsNUL(linkTarget) { return "the link target contains a NUL byte" }
    switch type {
    case .symlink, .hardlink:
      if linkTarget?.isEmpty ?? true { return "a link needs a non-empty target" }
    case .other(let bits):
      let allowed = [Glibc.S_IFIFO, Glibc.S_IFCHR, Glibc.S_IFBLK, Glibc.S_IFSOCK]
      if !allowed.contains(bits) {
        return "file type \(String(bits, radix: 8)) is not a FIFO, device or socket"
      }
    case .regular, .directory:
      break
    }
    if size < 0 { return "the size is negative" }
    if modificationTime.nanoseconds < 0 || modificationTime.nanoseconds >= 1_000_000_000 {
      return "nanoseconds are outside 0 ..< 1000000000"
    }
    for attribute in extendedAttributes where attribute.name.isEmpty || attribute.name.utf8.contains(0) {
      return "an extended attribute name is empty or contains a NUL byte"
    }
    if let sparseRegions {
      if type != .regular { return "only a regular file can be sparse" }
      var end: Int64 = 0
      for region in sparseRegions {
        guard region.offset >= end, region.length >= 0, region.offset <= size - region.length else {
          return "the sparse regions overlap, are out of order or extend past the size"
        }
        end = region.end
      }
    }
    return nil
  }

  /// The sparse map as it is stored: each region widened to 512-byte boundaries (clipped to the
  /// size), and regions that then touch merged. GNU tar reads each region's data from the start
  /// of a tar block, while libarchive writes the regions back to back, so an unaligned region
  /// would shift every later one for GNU tar; widened regions only carry some zeros as data.
  /// nil for a dense member (or an empty file).
  var storedSparseRegions: [ArchiveDataRegion]? {
    guard let sparseRegions, type == .regular, size > 0 else { return nil }
    var result: [ArchiveDataRegion] = []
    for region in sparseRegions where region.length > 0 {
      let start = region.offset & ~511
      let end = min((region.end + 511) & ~511, size)
      if let last = result.last, start <= last.end {
        result[result.count - 1].length = max(last.end, end) - last.offset
      } else {
        result.append(ArchiveDataRegion(offset: start, length: end - start))
      }
    }
    return result
  }

  /// The number of data bytes that follow this entry's header in the archive.
  var dataSize: Int64 { type == .regular ? size : 0 }

  /// Fills a cleared `archive_entry` with this entry's fields.
  ///
  /// Uses `archive_entry_copy_pathname`, `archive_entry_set_mtime` and `archive_entry_xattr_add_entry`.
  func copy(into handle: OpaquePointer) {
    withCString(path) { archive_entry_copy_pathname(handle, $0) }
    switch type {
    case .regular:
      archive_entry_set_filetype(handle, UInt32(Glibc.S_IFREG))
    case .directory:
      archive_entry_set_filetype(handle, UInt32(Glibc.S_IFDIR))
    case .symlink:
      archive_entry_set_filetype(handle, UInt32(Glibc.S_IFLNK))
      withCString(linkTarget ?? []) { archive_entry_copy_symlink(handle, $0) }
    case .hardlink:
      // A tar hard link is a regular-file header with a link name and no data.
      archive_entry_set_filetype(handle, UInt32(Glibc.S_IFREG))
      withCString(linkTarget ?? []) { archive_entry_copy_hardlink(handle, $0) }
    case .other(let bits):
      archive_entry_set_filetype(handle, bits)
    }
    archive_entry_set_perm(handle, permissions & 0o7777)
    archive_entry_set_uid(handle, Int64(uid))
    archive_entry_set_gid(handle, Int64(gid))
    if let userName { archive_entry_copy_uname(handle, userName) }
    if let groupName { archive_entry_copy_gname(handle, groupName) }
    archive_entry_set_size(handle, dataSize)
    if let regions = storedSparseRegions {
      for region in regions {
        archive_entry_sparse_add_entry(handle, region.offset, region.length)
      }
      // libarchive treats a member with an empty map as dense: an all-hole file gets the one
      // zero-length region at its end that GNU tar writes too.
      if regions.isEmpty { archive_entry_sparse_add_entry(handle, size, 0) }
    }
    archive_entry_set_mtime(handle, Int(modificationTime.seconds), Int(modificationTime.nanoseconds))
    for attribute in extendedAttributes {
      attribute.value.withUnsafeBytes { bytes in
        archive_entry_xattr_add_entry(handle, attribute.name, bytes.baseAddress, bytes.count)
      }
    }
  }

  /// Reads a libarchive entry into a value, normalising the path (see `ArchiveReader.nextEntry()`).
  ///
  /// Uses `archive_entry_pathname`, `archive_entry_filetype` and `archive_entry_xattr_next`.
  init(libarchiveEntry handle: OpaquePointer) {
    let rawPath = archive_entry_pathname(handle).map { bytesOf(cString: $0) } ?? []
    let hardlink = archive_entry_hardlink(handle).map { bytesOf(cString: $0) }
    let fileType = archive_entry_filetype(handle)
    let type: ArchiveEntryType
    var linkTarget: [UInt8]? = nil
    if let hardlink {
      type = .hardlink
      linkTarget = ArchiveEntry.normalized(hardlink)
    } else {
      switch fileType {
      case UInt32(Glibc.S_IFREG): type = .regular
      case UInt32(Glibc.S_IFDIR): type = .directory
      case UInt32(Glibc.S_IFLNK):
        type = .symlink
        linkTarget = archive_entry_symlink(handle).map { bytesOf(cString: $0) } ?? []
      default: type = .other(fileType)
      }
    }
    var attributes: [ArchiveExtendedAttribute] = []
    if archive_entry_xattr_reset(handle) > 0 {
      var name: UnsafePointer<CChar>? = nil
      var value: UnsafeRawPointer? = nil
      var length = 0
      while archive_entry_xattr_next(handle, &name, &value, &length) == ARCHIVE_OK {
        guard let name else { continue }
        let bytes = value.map { Array(UnsafeRawBufferPointer(start: $0, count: length)) } ?? []
        attributes.append(ArchiveExtendedAttribute(name: String(cString: name), value: bytes))
      }
    }
    var sparseRegions: [ArchiveDataRegion]?
    if type == .regular, archive_entry_sparse_reset(handle) > 0 {
      var regions: [ArchiveDataRegion] = []
      var offset: la_int64_t = 0
      var length: la_int64_t = 0
      while archive_entry_sparse_next(handle, &offset, &length) == ARCHIVE_OK {
        if length > 0 { regions.append(ArchiveDataRegion(offset: offset, length: length)) }
      }
      sparseRegions = regions
    }
    self.init(
      path: ArchiveEntry.normalized(rawPath), type: type, permissions: archive_entry_perm(handle) & 0o7777,
      uid: UInt32(truncatingIfNeeded: archive_entry_uid(handle)),
      gid: UInt32(truncatingIfNeeded: archive_entry_gid(handle)),
      userName: archive_entry_uname(handle).map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 },
      groupName: archive_entry_gname(handle).map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 },
      size: type == .regular ? archive_entry_size(handle) : 0,
      modificationTime: ArchiveTimestamp(
        seconds: Int64(archive_entry_mtime(handle)),
        nanoseconds: Int32(truncatingIfNeeded: archive_entry_mtime_nsec(handle))),
      linkTarget: linkTarget, extendedAttributes: attributes, sparseRegions: sparseRegions)
  }

  /// Drops leading `./` components and trailing slashes; an empty result becomes `.`.
  /// Absolute paths and `..` are left alone for the caller to refuse.
  static func normalized(_ raw: [UInt8]) -> [UInt8] {
    let slash = UInt8(ascii: "/")
    let dot = UInt8(ascii: ".")
    var start = 0
    while raw.count - start >= 2 && raw[start] == dot && raw[start + 1] == slash {
      start += 2
      while start < raw.count && raw[start] == slash { start += 1 }
    }
    var end = raw.count
    while end - start > 1 && raw[end - 1] == slash { end -= 1 }
    if start == end || (end - start == 1 && raw[start] == dot) { return [dot] }
    return Array(raw[start..<end])
  }
}

/// Whether `bytes` holds a zero byte (memchr: a path 10,000 levels deep is 20 KB long).
private func containsNUL(_ bytes: [UInt8]) -> Bool {
  bytes.withUnsafeBytes { raw in raw.count > 0 && memchr(raw.baseAddress!, 0, raw.count) != nil }
}

/// The bytes of a NUL-terminated C string, without the NUL.
func bytesOf(cString: UnsafePointer<CChar>) -> [UInt8] {
  Array(UnsafeRawBufferPointer(start: cString, count: strlen(cString)).bindMemory(to: UInt8.self))
}

/// Calls `body` with `bytes` as a NUL-terminated C string.
func withCString<T>(_ bytes: [UInt8], _ body: (UnsafePointer<CChar>) throws -> T) rethrows -> T {
  var terminated = bytes
  terminated.append(0)
  return try terminated.withUnsafeBufferPointer { buffer in
    try buffer.baseAddress!.withMemoryRebound(to: CChar.self, capacity: buffer.count) { try body($0) }
  }
}
