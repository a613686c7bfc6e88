import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// The fscrypt wrappers on a real ext4 made with `-O encrypt` (root and a loop device).
@Suite(.enabled(if: EncryptedVolume.isAvailable, "needs root and loop devices"))
final class FscryptTests {
  let volume: EncryptedVolume
  let root: FileDescriptor

  init() throws {
    volume = try EncryptedVolume()
    root = try FileDescriptor.open(volume.path, O_RDONLY | O_DIRECTORY)
  }

  deinit { root.close() }

  /// A directory `name` under the volume carrying a policy for `key`, and the key's identifier.
  func encryptedDirectory(_ name: String, key: [UInt8]) throws -> (FileDescriptor, FscryptKeyIdentifier) {
    let identifier = try root.addEncryptionKey(key)
    try root.makeDirectory(name, mode: 0o700)
    let directory = try root.open(name, O_RDONLY | O_DIRECTORY)
    try directory.setEncryptionPolicy(identifier)
    return (directory, identifier)
  }

  @Test func supportIsToldApartFromAMissingFeatureAndAFileSystemWithout() throws {
    #expect(root.encryptionSupport() == .supported)
    let plain = try EncryptedVolume(megabytes: 16, encrypt: false)
    let plainRoot = try FileDescriptor.open(plain.path, O_RDONLY | O_DIRECTORY)
    #expect(plainRoot.closeAfter { $0.encryptionSupport() } == .featureDisabled)
    let shm = try FileDescriptor.open("/dev/shm", O_RDONLY | O_DIRECTORY)  // tmpfs: no fscrypt
    #expect(shm.closeAfter { $0.encryptionSupport() } == .unsupportedFileSystem)
  }

  @Test func aFileRenamedOutOfThePolicyDirectoryStaysEncryptedAndLocksWithItsKey() throws {
    let key = (0..<64).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 3) }
    let (staging, identifier) = try encryptedDirectory("staging", key: key)
    #expect(try root.encryptionKeyStatus(identifier) == .present)
    #expect(try staging.encryptionPolicy() == identifier)
    try root.makeDirectory("plain", mode: 0o755)
    let plain = try root.open("plain", O_RDONLY | O_DIRECTORY)
    defer { plain.close() }

    let file = try staging.open("f", O_WRONLY | O_CREAT | O_EXCL, mode: 0o644)
    try file.closeAfter { try $0.writeAll(Array("secret".utf8)) }
    try staging.rename("f", to: "f", in: plain)
    staging.close()
    #expect(try plain.isEncrypted(rawName: Array("f".utf8)))
    #expect(try plain.open("f", O_RDONLY).closeAfter { try $0.encryptionPolicy() } == identifier)
    #expect(try plain.encryptionPolicy() == nil, "the plain directory itself is not encrypted")

    #expect(try root.removeEncryptionKey(identifier).filesBusy == false)
    #expect(try root.encryptionKeyStatus(identifier) == .absent)
    #expect(throws: SystemError("open", path: "f", errno: .keyNotAvailable)) { try plain.open("f", O_RDONLY) }
    #expect(try plain.isEncrypted(rawName: Array("f".utf8)), "the name and the attribute stay visible")
    #expect(try plain.status(of: "f").size == 6)

    #expect(try root.addEncryptionKey(key) == identifier, "the identifier is a function of the key")
    #expect(try plain.open("f", O_RDONLY).closeAfter { try $0.readAll() } == Array("secret".utf8))
    // Removing an absent key is not an error.
    #expect(try root.removeEncryptionKey(identifier).filesBusy == false)
    #expect(try root.removeEncryptionKey(identifier).filesBusy == false)
  }

  @Test func aKeyRemovedWhileAFileIsOpenIsIncompletelyRemovedUntilItCloses() throws {
    let (staging, identifier) = try encryptedDirectory("staging", key: (0..<64).map { UInt8($0) })
    for name in ["held", "other"] {
      let fd = try staging.open(name, O_WRONLY | O_CREAT | O_EXCL, mode: 0o644)
      try fd.closeAfter { try $0.writeAll(Array(name.utf8)) }
      try staging.rename(name, to: name, in: root)
    }
    staging.close()
    let held = try root.open("held", O_RDONLY)
    #expect(try root.removeEncryptionKey(identifier).filesBusy)
    #expect(try root.encryptionKeyStatus(identifier) == .incompletelyRemoved)
    #expect(try held.readAll() == Array("held".utf8), "an open file stays usable")
    #expect(throws: SystemError("open", path: "other", errno: .keyNotAvailable)) {
      try root.open("other", O_RDONLY)
    }
    held.close()
    #expect(try root.removeEncryptionKey(identifier).filesBusy == false, "a retry finishes it once closed")
    #expect(try root.encryptionKeyStatus(identifier) == .absent)
    #expect(throws: SystemError("open", path: "held", errno: .keyNotAvailable)) {
      try root.open("held", O_RDONLY)
    }
  }

  @Test func aPolicyNeedsAnEmptyDirectoryAndNothingIsCreatedWithoutTheKey() throws {
    let identifier = try root.addEncryptionKey([UInt8](repeating: 9, count: 64))
    try root.makeDirectory("full", mode: 0o700)
    let full = try root.open("full", O_RDONLY | O_DIRECTORY)
    defer { full.close() }
    try full.open("x", O_WRONLY | O_CREAT).close()
    #expect(throws: SystemError.self) { try full.setEncryptionPolicy(identifier) }
    try root.removeEncryptionKey(identifier)
    try root.makeDirectory("empty", mode: 0o700)
    let empty = try root.open("empty", O_RDONLY | O_DIRECTORY)
    defer { empty.close() }
    // Root may set a policy naming an absent key (CAP_FOWNER), but nothing can be created under it.
    try empty.setEncryptionPolicy(identifier)
    #expect { try empty.open("y", O_WRONLY | O_CREAT | O_EXCL) } throws: {
      ($0 as? SystemError)?.errno == .keyNotAvailable
    }
  }

  @Test func dataRangesSkipHoles() throws {
    let fd = try root.open("sparse", O_RDWR | O_CREAT, mode: 0o644)
    defer { fd.close() }
    try fd.seek(to: 1 << 20)
    try fd.writeAll([UInt8](repeating: 1, count: 4096))
    try fd.truncate(to: 3 << 20)
    try fd.sync()
    #expect(try fd.dataRanges(size: 3 << 20) == [(1 << 20)..<((1 << 20) + 4096)])
    #expect(try fd.dataRanges(size: 0) == [])
  }
}
