/// Builds tar archives byte by byte, for hostile inputs no well-behaved writer produces
/// (pax path overrides, absolute names, data shorter than declared). Tests only.
public struct RawTar: Sendable {
  public private(set) var bytes: [UInt8] = []

  public init() {}

  /// A ustar header. `type` is the typeflag ("0" file, "5" directory, "2" symlink, "1" hard
  /// link, "x" pax extended header).
  public mutating func header(
    _ name: String, type: Character = "0", size: Int = 0, mode: Int = 0o644, linkName: String = ""
  ) {
    var block = [UInt8](repeating: 0, count: 512)
    func put(_ text: String, at offset: Int, length: Int) {
      for (index, byte) in text.utf8.prefix(length).enumerated() { block[offset + index] = byte }
    }
    func octal(_ value: Int, at offset: Int, length: Int) {
      let digits = String(value, radix: 8)
      put(
        String(repeating: "0", count: max(0, length - 1 - digits.count)) + digits, at: offset,
        length: length - 1)
    }
    put(name, at: 0, length: 100)
    octal(mode, at: 100, length: 8)
    octal(0, at: 108, length: 8)
    octal(0, at: 116, length: 8)
    octal(size, at: 124, length: 12)
    octal(1_700_000_000, at: 136, length: 12)
    block[156] = type.asciiValue ?? UInt8(ascii: "0")
    put(linkName, at: 157, length: 100)
    put("ustar", at: 257, length: 6)
    put("00", at: 263, length: 2)
    for index in 148..<156 { block[index] = UInt8(ascii: " ") }
    let sum = block.reduce(0) { $0 + Int($1) }
    let digits = String(sum, radix: 8)
    put(String(repeating: "0", count: 6 - digits.count) + digits, at: 148, length: 6)
    block[154] = 0
    block[155] = UInt8(ascii: " ")
    bytes += block
  }

  /// Data, padded to a whole block.
  public mutating func data(_ content: [UInt8]) {
    bytes += content
    let remainder = content.count % 512
    if remainder != 0 { bytes += [UInt8](repeating: 0, count: 512 - remainder) }
  }

  /// A pax extended header ("x") applying `records` to the next member.
  public mutating func pax(_ records: [(String, String)]) {
    var body: [UInt8] = []
    for (key, value) in records {
      let rest = " \(key)=\(value)\n".utf8.count
      var length = rest + 1
      while String(length).utf8.count + rest != length { length += 1 }
      body += Array("\(length) \(key)=\(value)\n".utf8)
    }
    header("PaxHeaders/x", type: "x", size: body.count)
    data(body)
  }

  /// A pax extended header ("x") whose body is `body` exactly, well-formed or not.
  public mutating func paxRaw(_ body: [UInt8]) {
    header("PaxHeaders/x", type: "x", size: body.count)
    data(body)
  }

  /// An old GNU header ("ustar  " magic) for a regular file, with the `realsize` field (meant
  /// for sparse files only) set to `realSize`.
  public mutating func gnuHeader(_ name: String, size: Int, realSize: Int) {
    header(name, size: size)
    var block = Array(bytes[(bytes.count - 512)...])
    for index in 257..<265 { block[index] = 0 }
    for (index, byte) in "ustar  ".utf8.enumerated() { block[257 + index] = byte }
    let digits = String(realSize, radix: 8)
    let field = String(repeating: "0", count: 11 - digits.count) + digits
    for (index, byte) in field.utf8.enumerated() { block[483 + index] = byte }
    for index in 148..<156 { block[index] = UInt8(ascii: " ") }
    let sum = block.reduce(0) { $0 + Int($1) }
    let checksum = String(sum, radix: 8)
    for (index, byte) in (String(repeating: "0", count: 6 - checksum.count) + checksum).utf8.enumerated() {
      block[148 + index] = byte
    }
    block[154] = 0
    bytes.replaceSubrange((bytes.count - 512)..., with: block)
  }

  /// The end-of-archive marker: two zero blocks.
  public mutating func end() { bytes += [UInt8](repeating: 0, count: 1024) }
}
