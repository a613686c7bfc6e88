import AppboxCrypto
import Testing

@testable import AppboxBackup

struct TreeTests {
  @Test func roundTrips() throws {
    let tree = Tree(entries: [
      TreeEntry(name: Array("a".utf8), type: .file, permissions: 0o644, size: 3, digest: SHA256.hash([1, 2, 3])),
    ])
    #expect(try Tree.decode(tree.encoded()) == tree)
  }
}
