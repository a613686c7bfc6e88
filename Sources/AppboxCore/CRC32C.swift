import CSystem

/// CRC-32C (Castagnoli), the checksum of whole archive files: it catches damage (flipped
/// bits, truncation, a swapped file) at memory speed with the CPU's crc32 instruction, so
/// checking archives costs no second cryptographic pass. Content authenticity is the
/// per-file SHA-256's job. Uses `appbox_crc32c` (C, SSE 4.2 or a table).
public struct CRC32C: Sendable, Equatable {
  public private(set) var value: UInt32 = 0

  public init() {}

  public mutating func update(_ buffer: UnsafeRawBufferPointer) {
    guard let base = buffer.baseAddress, !buffer.isEmpty else { return }
    value = appbox_crc32c(value, base, buffer.count)
  }

  public mutating func update(_ bytes: [UInt8]) { bytes.withUnsafeBytes { update($0) } }

  /// Reads `fd` from its current position to the end, folding every byte in; returns the
  /// number of bytes read. Uses `read(2)`.
  @discardableResult
  public mutating func update(readingFrom fd: FileDescriptor) throws -> Int64 {
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 64)
    defer { buffer.deallocate() }
    var total: Int64 = 0
    while true {
      let n = try fd.read(into: buffer)
      if n == 0 { return total }
      update(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
      total += Int64(n)
    }
  }

  /// The table-driven computation, whatever the CPU supports (tests compare the two paths).
  public static func softwareValue(of bytes: [UInt8]) -> UInt32 {
    bytes.withUnsafeBytes { appbox_crc32c_software(0, $0.baseAddress, $0.count) }
  }
}
