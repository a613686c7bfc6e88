// A file's content identity: the digest a tree entry records and the blob and chunk tables are
// keyed by. Two kinds (docs/repository-format-sparse.md has the whole story):
//
// - plain: the SHA-256 of every byte of the file. Every file but the sparse ones, and every
//   file of trees written before the sparse kind existed.
// - sparse (a tree entry with the `sparseIdentity` flag, trees of version 2): defined over the
//   file's data map and data, so that hashing it costs the data, not the apparent size (a 1 TiB
//   file with a few megabytes in it hashes those megabytes). With the file cut into 4 KiB
//   blocks from its start (the last one shorter), it is
//     SHA-256( "appbox sparse 1\n" · size as 8 bytes little-endian ·
//              for each block holding a byte that is not zero, in order:
//                its index as 8 bytes little-endian · its bytes )
//     XOR SHA-256("appbox sparse content identity, version 1")
//   A function of the content alone: however a file system maps the file (a hole, or blocks of
//   zeros written out) and however an archive stores it (sparse member or not), the same bytes
//   give the same identity, so a file restored with a different map still matches. The final
//   XOR keeps the two kinds apart by construction: a plain digest is the SHA-256 of bytes an
//   app chooses, and without it an app could write a file whose bytes are another content's
//   sparse encoding, whose plain digest would then equal that content's sparse identity.
//
// Either kind is computed in one pass over data given at its offsets, in increasing order;
// bytes never given (holes) are zeros. The plain kind must hash those zeros; the sparse kind
// skips them, and skips blocks of zeros inside the data too.

import AppboxCore
import AppboxCrypto
import Glibc

/// Computes a content identity from data at offsets.
package final class ContentHasher {
  static let blockSize = 4096
  private static let prefix = Array("appbox sparse 1\n".utf8)
  private static let mask: Digest = SHA256.hash(Array("appbox sparse content identity, version 1".utf8))

  let isSparse: Bool
  private let hasher: SHA256Hasher
  private let size: Int64
  /// Plain: how far the content was hashed. Sparse: the block being filled (index, or -1).
  private var position: Int64 = 0
  private var blockIndex: Int64 = -1
  /// The block being filled (sparse kind only).
  private let block: UnsafeMutableRawBufferPointer?
  /// Bytes of file data given (holes excluded): what hashing read.
  private(set) var dataBytes: Int64 = 0

  /// A hasher of a content of `size` bytes, of the sparse kind or the plain one, using `hasher`
  /// (which it leaves ready for the next content).
  package init(sparse: Bool, size: Int64, hasher: SHA256Hasher = SHA256Hasher()) {
    isSparse = sparse
    self.size = size
    self.hasher = hasher
    block = sparse ? .allocate(byteCount: Self.blockSize, alignment: 64) : nil
    if sparse {
      hasher.update(Self.prefix)
      var length = UInt64(size).littleEndian
      withUnsafeBytes(of: &length) { hasher.update($0) }
    }
  }

  deinit { block?.deallocate() }

  /// The content's bytes `data` at `offset` (not before what was given already); whatever lies
  /// between is zeros.
  package func update(_ data: UnsafeRawBufferPointer, at offset: Int64) {
    guard !data.isEmpty else { return }
    dataBytes += Int64(data.count)
    if !isSparse {
      if offset > position { zeros(offset - position) }
      hasher.update(data)
      position = offset + Int64(data.count)
      return
    }
    var start = 0
    let blockSize = Int64(Self.blockSize)
    while start < data.count {
      let at = offset + Int64(start)
      let index = at / blockSize
      let within = Int(at % blockSize)
      let rest = data.count - start
      if within == 0 && rest >= Self.blockSize && index != blockIndex {
        // Whole blocks straight from the data.
        flushBlock()
        var whole = rest / Self.blockSize
        // The last block of the file may be shorter: never hash past `size`.
        while whole > 0 {
          let piece = UnsafeRawBufferPointer(rebasing: data[start..<(start + Self.blockSize)])
          hashBlock(index: (offset + Int64(start)) / blockSize, piece)
          start += Self.blockSize
          whole -= 1
        }
        continue
      }
      if index != blockIndex {
        flushBlock()
        blockIndex = index
        block!.initializeMemory(as: UInt8.self, repeating: 0)
      }
      let count = min(Self.blockSize - within, rest)
      (block!.baseAddress! + within).copyMemory(from: data.baseAddress! + start, byteCount: count)
      start += count
    }
  }

  /// `count` zero bytes at the current end (plain: hashed; sparse: nothing to do).
  func zeros(_ count: Int64) {
    guard !isSparse, count > 0 else { return }
    hashZeros(count, into: hasher)
    position += count
  }

  /// The identity; the zeros up to `size` that were not given count as given.
  package func finalize() -> Digest {
    if isSparse {
      flushBlock()
      return hasher.finalize().xor(Self.mask)
    }
    if size > position { zeros(size - position) }
    return hasher.finalize()
  }

  private func flushBlock() {
    guard blockIndex >= 0 else { return }
    let length = Int(min(Int64(Self.blockSize), size - blockIndex * Int64(Self.blockSize)))
    if length > 0 { hashBlock(index: blockIndex, UnsafeRawBufferPointer(rebasing: block![0..<length])) }
    blockIndex = -1
  }

  private func hashBlock(index: Int64, _ bytes: UnsafeRawBufferPointer) {
    guard !isAllZero(bytes) else { return }
    var encoded = UInt64(index).littleEndian
    withUnsafeBytes(of: &encoded) { hasher.update($0) }
    hasher.update(bytes)
  }
}

extension Digest {
  /// The bitwise XOR of two digests.
  package func xor(_ other: Digest) -> Digest {
    withUnsafeBytes { a in
      other.withUnsafeBytes { b in Digest(bytes: (0..<Digest.byteCount).map { a[$0] ^ b[$0] }) }
    }
  }
}

/// Hashes `count` zero bytes (a hole, or a file's missing tail) into `hasher`.
package func hashZeros(_ count: Int64, into hasher: SHA256Hasher) {
  let zeros = [UInt8](repeating: 0, count: 64 * 1024)
  var left = count
  zeros.withUnsafeBytes { buffer in
    while left > 0 {
      let n = Int(min(left, Int64(buffer.count)))
      hasher.update(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
      left -= Int64(n)
    }
  }
}
