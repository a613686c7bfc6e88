import AppboxCrypto
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

struct TreeTests {
  static func sample() -> Tree {
    Tree(entries: [
      TreeEntry(
        name: Array("A.txt".utf8), type: .file, permissions: 0o644, uid: 1000, gid: 1000, size: 3,
        modificationTime: 1_700_000_000_123_456_789, changeTime: -5, inode: 42, linkCount: 2,
        digest: SHA256.hash([1, 2, 3]),
        extendedAttributes: [ExtendedAttribute(name: "user.a", value: [0, 255])]),
      TreeEntry(
        name: Array("a.txt".utf8), type: .file, permissions: 0o4755, size: 0, digest: SHA256.hash([UInt8]())),
      TreeEntry(
        name: [0x62, 0xFF], type: .symlink, permissions: 0o777, size: 5, linkTarget: Array("../x".utf8)),
      TreeEntry(name: Array("dir".utf8), type: .directory, permissions: 0o700, digest: SHA256.hash([9])),
      TreeEntry(name: Array("skip".utf8), type: .file, permissions: 0o600, size: 99, isExcluded: true),
      TreeEntry(name: Array("zfifo".utf8), type: .fifo, permissions: 0o600),
    ])
  }

  @Test func roundTripsEveryField() throws {
    let tree = Self.sample()
    #expect(try Tree.decode(tree.encoded()) == tree)
  }

  @Test func serializationIsDeterministicAndContentAddressed() {
    let (data, digest) = Self.sample().encodedWithDigest()
    #expect(data == Self.sample().encoded())
    #expect(digest == SHA256.hash(data))
    var changed = Self.sample()
    changed.entries[0].changeTime += 1
    #expect(changed.encodedWithDigest().digest != digest)
  }

  @Test func findsEntriesByName() {
    let tree = Self.sample()
    #expect(tree.entry(named: Array("a.txt".utf8))?.permissions == 0o4755)
    #expect(tree.entry(named: [0x62, 0xFF])?.linkTarget == Array("../x".utf8))
    #expect(tree.entry(named: Array("missing".utf8)) == nil)
  }

  @Test func refusesEntriesOutOfOrderOrDuplicated() {
    var tree = Self.sample()
    tree.entries.swapAt(0, 1)
    #expect(throws: BackupError.self) { try Tree.decode(tree.encoded()) }
    var duplicate = Self.sample()
    duplicate.entries.insert(duplicate.entries[0], at: 0)
    #expect(throws: BackupError.self) { try Tree.decode(duplicate.encoded()) }
  }

  @Test(arguments: [Array("..".utf8), Array(".".utf8), Array("a/b".utf8), [UInt8](), [0x61, 0x00]])
  func refusesNamesThatWouldEscape(_ name: [UInt8]) {
    let tree = Tree(entries: [TreeEntry(name: name, type: .fifo, permissions: 0o600)])
    #expect(throws: BackupError.self) { try Tree.decode(tree.encoded()) }
  }

  @Test func refusesAFileWithoutDigestOrASymlinkWithoutTarget() {
    let file = Tree(entries: [TreeEntry(name: Array("f".utf8), type: .file, permissions: 0o600)])
    #expect(throws: BackupError.self) { try Tree.decode(file.encoded()) }
    let link = Tree(entries: [TreeEntry(name: Array("l".utf8), type: .symlink, permissions: 0o777)])
    #expect(throws: BackupError.self) { try Tree.decode(link.encoded()) }
  }

  @Test func everyTruncationAndMostBitFlipsAreRefusedWithoutTrapping() {
    let data = Self.sample().encoded()
    for length in 0..<data.count {
      #expect(throws: BackupError.self) { try Tree.decode(Array(data[0..<length])) }
    }
    for index in data.indices {
      var damaged = data
      damaged[index] ^= 0x80
      _ = try? Tree.decode(damaged)  // must not trap; may decode to another valid tree
    }
    #expect(throws: BackupError.self) { try Tree.decode(data + [0]) }
  }

  @Test func varintsRoundTripExtremes() throws {
    var writer = ByteWriter()
    let values: [UInt64] = [0, 1, 127, 128, 300, UInt64(UInt32.max), UInt64.max]
    let signed: [Int64] = [0, -1, 1, Int64.min, Int64.max]
    for value in values { writer.varint(value) }
    for value in signed { writer.signed(value) }
    try writer.bytes.withUnsafeBytes { raw throws in
      var reader = ByteReader(raw)
      for value in values {
        let decoded = try reader.varint()
        #expect(decoded == value)
      }
      for value in signed {
        let decoded = try reader.signed()
        #expect(decoded == value)
      }
      #expect(reader.isAtEnd)
    }
  }
}
