// Which one decompression filter an archive needs, from its first bytes.
//
// libarchive can detect compression itself (`archive_read_support_filter_all`), but it does so
// recursively: whatever a filter produces is bid on again, by every filter, up to 25 layers. A
// hostile input can use that: libarchive 3.6.2 spins forever on a gzip file that decompresses
// into a gzip header with an endless name field (its own test file
// `test_read_filter_gzip_recursive.gz`). Real archives have one layer (every archive of the
// corpora in the README's Compatibility section does), so the reader detects that layer here
// and enables only its filter. gzip, whose header scan is the one that can run away, is
// appended (`archive_read_append_filter`: no bidding at all on its output); the others are
// enabled alone (`archive_read_support_filter_X`), because 3.6.2 crashes appending `compress`
// (its init reads before the input is open) and cannot append lzop or grzip.
//
// The checks follow libarchive's own bidders (magic numbers; lzma, which has none, by the
// plausibility of its header), so every archive libarchive would read with one filter is
// still read.

import CArchive

enum CompressionFilter: String, Equatable {
  case none, gzip, bzip2, compress, xz, lzma, lzip, lz4, zstd, lzop, lrzip, grzip, rpm
  case uuencode

  var name: String { rawValue }

  /// Enables this filter, and no other, on a reader not yet opened.
  /// Uses `archive_read_append_filter` (gzip) or `archive_read_support_filter_*`.
  func enable(on handle: OpaquePointer) -> Int32 {
    switch self {
    case .none: return ARCHIVE_OK
    case .gzip: return archive_read_append_filter(handle, ARCHIVE_FILTER_GZIP)
    case .bzip2: return archive_read_support_filter_bzip2(handle)
    case .compress: return archive_read_support_filter_compress(handle)
    case .xz: return archive_read_support_filter_xz(handle)
    case .lzma: return archive_read_support_filter_lzma(handle)
    case .lzip: return archive_read_support_filter_lzip(handle)
    case .lz4: return archive_read_support_filter_lz4(handle)
    case .zstd: return archive_read_support_filter_zstd(handle)
    case .lzop: return archive_read_support_filter_lzop(handle)
    case .lrzip: return archive_read_support_filter_lrzip(handle)
    case .grzip: return archive_read_support_filter_grzip(handle)
    case .rpm: return archive_read_support_filter_rpm(handle)
    case .uuencode: return archive_read_support_filter_uu(handle)
    }
  }

  /// The filter for an archive starting with `head` (the first few KiB, or all of a short file).
  static func detect(_ head: [UInt8]) -> CompressionFilter {
    func starts(_ magic: [UInt8], at offset: Int = 0) -> Bool {
      head.count >= offset + magic.count && head[offset..<offset + magic.count].elementsEqual(magic)
    }
    if starts([0x1F, 0x8B]) { return .gzip }
    if starts([0x1F, 0x9D]) { return .compress }
    if starts(Array("BZh".utf8)), head.count > 3, (0x31...0x39).contains(head[3]) {
      return .bzip2
    }
    if starts([0xFD, 0x37, 0x7A, 0x58, 0x5A, 0x00]) { return .xz }
    if starts(Array("LZIP".utf8)) { return .lzip }
    if starts(Array("LRZI".utf8)) { return .lrzip }
    if starts([0x28, 0xB5, 0x2F, 0xFD]) { return .zstd }
    if starts([0x04, 0x22, 0x4D, 0x18]) || starts([0x02, 0x21, 0x4C, 0x18]) {
      return .lz4
    }
    // Skippable frames (lz4 and zstd share them): the first real frame after them decides.
    var frame = 0
    for _ in 0..<16 {
      guard head.count >= frame + 8, head[frame] & 0xF0 == 0x50, starts([0x2A, 0x4D, 0x18], at: frame + 1)
      else {
        break
      }
      let length =
        Int(head[frame + 4]) | Int(head[frame + 5]) << 8 | Int(head[frame + 6]) << 16 | Int(head[frame + 7])
        << 24
      frame += 8 + length
    }
    if frame > 0 {
      if starts([0x28, 0xB5, 0x2F, 0xFD], at: frame) { return .zstd }
      if starts([0x04, 0x22, 0x4D, 0x18], at: frame) || starts([0x02, 0x21, 0x4C, 0x18], at: frame) {
        return .lz4
      }
    }
    if starts([0x89, 0x4C, 0x5A, 0x4F, 0x00, 0x0D, 0x0A, 0x1A, 0x0A]) { return .lzop }
    if starts(Array("GRZipII".utf8) + [0x00, 0x02, 0x04, 0x3A, 0x29]) { return .grzip }
    if starts([0xED, 0xAB, 0xEE, 0xDB]) { return .rpm }
    if isUuencoded(head) { return .uuencode }
    if isLZMA(head) { return .lzma }
    return .none
  }

  /// A `begin MODE NAME` or `begin-base64 MODE NAME` line at the start of one of the first
  /// lines, as libarchive's uudecode bidder looks for.
  private static func isUuencoded(_ head: [UInt8]) -> Bool {
    var lineStart = 0
    for _ in 0..<32 {
      let rest = head[lineStart...]
      for prefix in ["begin ", "begin-base64 "] where rest.starts(with: Array(prefix.utf8)) {
        let mode = rest.dropFirst(prefix.utf8.count).prefix(3)
        if mode.count == 3 && mode.allSatisfy({ (0x30...0x37).contains($0) }) { return true }
      }
      guard let newline = rest.firstIndex(of: 0x0A) else { return false }
      lineStart = newline + 1
    }
    return false
  }

  /// The 13-byte header of an lzma ("alone") stream: properties below 225, a dictionary size
  /// of 2^n or 2^n + 2^(n-1), and an uncompressed size that is unknown (all ones) or sane.
  private static func isLZMA(_ head: [UInt8]) -> Bool {
    guard head.count >= 13, head[0] <= 224 else { return false }
    let dictionary = UInt32(head[1]) | UInt32(head[2]) << 8 | UInt32(head[3]) << 16 | UInt32(head[4]) << 24
    let plausible = (12...30).contains { shift in
      dictionary == 1 << shift || dictionary == (1 << shift) + (1 << (shift - 1))
    }
    guard plausible else { return false }
    let size = head[5..<13]
    return size.allSatisfy { $0 == 0xFF } || (head[11] == 0 && head[12] == 0)
  }
}
