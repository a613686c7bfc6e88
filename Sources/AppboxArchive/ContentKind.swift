// Whether a member's data is worth compressing, told cheaply: by its name's extension and by
// the magic bytes it starts with. Content that is already compressed (photos, video, audio,
// archives, fonts in compressed containers) goes into stored frames at the cost of a copy;
// everything else is compressed, and a frame that does not get at least 1/32 smaller is
// stored anyway (FrameWriter.swift), so a wrong guess costs time, never bytes.

/// What a member's data is, as far as compression goes.
public enum ContentKind: Sendable, Equatable {
  /// Text, property lists, databases, executables: compress.
  case compressible
  /// Already compressed: store as it is.
  case incompressible
  /// Not known from the name: decided from the data's first bytes.
  case unknown

  /// The kind its name tells (the last component's extension, ASCII, any case).
  public static func of(path: [UInt8]) -> ContentKind {
    guard let dot = path.lastIndex(of: UInt8(ascii: ".")), !path[dot...].contains(UInt8(ascii: "/")) else {
      return .unknown
    }
    let suffix = path[(dot + 1)...]
    guard suffix.count >= 2, suffix.count <= 5 else { return .unknown }
    let lowered = String(decoding: suffix.map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }, as: UTF8.self)
    return compressedExtensions.contains(lowered) ? .incompressible : .unknown
  }

  /// Extensions of formats whose data is compressed already.
  static let compressedExtensions: Set<String> = [
    // images
    "jpg", "jpeg", "png", "gif", "webp", "heic", "heif", "avif", "jxl",
    // video and audio
    "mp4", "m4v", "mov", "mkv", "webm", "avi", "3gp", "m4a", "mp3", "aac", "ogg", "oga", "opus", "flac",
    // archives and compressed files
    "zip", "gz", "tgz", "bz2", "xz", "txz", "zst", "lz4", "lzma", "7z", "rar", "br", "jar", "ipa", "apk",
    "dmg", "xip",
    // compressed containers
    "woff", "woff2", "docx", "xlsx", "pptx", "epub",
  ]

  /// The kind the first bytes of the data tell (at least 12 of them for every format below;
  /// fewer tell less).
  public static func of(leadingBytes bytes: UnsafeRawBufferPointer) -> ContentKind {
    func starts(_ magic: [UInt8], at offset: Int = 0) -> Bool {
      bytes.count >= offset + magic.count && magic.indices.allSatisfy { bytes[offset + $0] == magic[$0] }
    }
    let magics: [[UInt8]] = [
      [0xFF, 0xD8, 0xFF],  // JPEG
      [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A],  // PNG
      Array("GIF8".utf8),
      [0x1F, 0x8B],  // gzip
      [0x28, 0xB5, 0x2F, 0xFD],  // zstd
      [0xFD, 0x37, 0x7A, 0x58, 0x5A, 0x00],  // xz
      Array("BZh".utf8),
      [0x04, 0x22, 0x4D, 0x18],  // lz4
      [0x37, 0x7A, 0xBC, 0xAF, 0x27, 0x1C],  // 7z
      Array("PK\u{3}\u{4}".utf8),  // zip and its containers
      Array("Rar!".utf8),
      Array("OggS".utf8),
      Array("fLaC".utf8),
      Array("ID3".utf8),  // MP3
      Array("wOFF".utf8), Array("wOF2".utf8),
    ]
    if magics.contains(where: { starts($0) }) { return .incompressible }
    // ISO base media (MP4, MOV, HEIC, AVIF, M4A): a box named `ftyp` first.
    if starts(Array("ftyp".utf8), at: 4) { return .incompressible }
    // RIFF containers holding compressed data: WebP, AVI.
    if starts(Array("RIFF".utf8)) && (starts(Array("WEBP".utf8), at: 8) || starts(Array("AVI ".utf8), at: 8))
    {
      return .incompressible
    }
    return .unknown
  }
}
