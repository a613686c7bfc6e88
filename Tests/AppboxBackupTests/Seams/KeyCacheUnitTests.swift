// The device's copy of an encrypted repository's key (Repository/KeyCache.swift) without the
// CLI: it opens only for the same password, device secret, repository and unchanged key
// object; it is private to the owner; and an encrypted repository opened with a device secret
// keeps one, which goes stale when the password changes.

import AppboxCore
import AppboxCrypto
import AppboxTestSupport
import Foundation
import Glibc
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

struct KeyCacheUnitTests {
  let password = Array("correct horse".utf8)
  let secret = [UInt8](repeating: 0x5A, count: 32)
  let keyObject = Array("{\"kdf\":\"scrypt\",\"stands\":\"in for a key object\"}".utf8)

  func saved(_ directory: TemporaryDirectory) throws -> RepositoryKey {
    let key = try RepositoryKey(master: [UInt8](repeating: 3, count: 32), segmentSize: 4096)
    try KeyCache.save(
      directory: directory.path, key: key, keyName: "k1", keyObject: keyObject, password: password,
      secret: secret, repositoryID: "repo-1")
    return key
  }

  func open(
    _ directory: TemporaryDirectory, keyObjects: [(name: String, bytes: [UInt8])]? = nil,
    password: [UInt8]? = nil,
    secret: [UInt8]? = nil, repositoryID: String = "repo-1"
  ) throws -> (key: RepositoryKey, keyName: String)? {
    try KeyCache.open(
      directory: directory.path, keyObjects: keyObjects ?? [("k0", Array("other".utf8)), ("k1", keyObject)],
      password: password ?? self.password, secret: secret ?? self.secret, repositoryID: repositoryID,
      segmentSize: 4096)
  }

  @Test func theCopyOpensOnlyForTheSamePasswordDeviceRepositoryAndKeyObject() throws {
    let directory = TemporaryDirectory("key-cache")
    let key = try saved(directory)
    let opened = try #require(try open(directory))
    #expect(opened.keyName == "k1" && opened.key.master == key.master && opened.key.segmentSize == 4096)
    var st = stat()
    #expect(stat(directory.url("key"), &st) == 0 && st.st_mode & 0o777 == 0o600)
    // Not the master key in the clear.
    let file = Array(try Data(contentsOf: URL(fileURLWithPath: directory.url("key"))))
    let text = String(decoding: file, as: UTF8.self)
    #expect(
      !text.contains(Data(key.master).base64EncodedString())
        && !text.contains(String(repeating: "03", count: 32)))
    #expect(try open(directory, password: Array("wrong".utf8)) == nil)
    #expect(try open(directory, secret: [UInt8](repeating: 0x5B, count: 32)) == nil)
    #expect(try open(directory, repositoryID: "repo-2") == nil)
    #expect(try open(directory, keyObjects: [("k1", keyObject + [0x20])]) == nil)
    #expect(try open(directory, keyObjects: [("k2", keyObject)]) == nil)
    KeyCache.remove(directory: directory.path)
    #expect(try open(directory) == nil)
  }

  @Test func aTamperedCopyDoesNotOpen() throws {
    let directory = TemporaryDirectory("key-cache")
    _ = try saved(directory)
    let path = directory.url("key")
    var object = try #require(
      try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path)))
        as? [String: String])
    var sealed = Array(try #require(object["sealed"].flatMap { Data(base64Encoded: $0) }))
    sealed[sealed.count / 2] ^= 1
    object["sealed"] = Data(sealed).base64EncodedString()
    try JSONSerialization.data(withJSONObject: object).write(to: URL(fileURLWithPath: path))
    #expect(try open(directory) == nil)
    try Data("not json".utf8).write(to: URL(fileURLWithPath: path))
    #expect(try open(directory) == nil)
    #expect(KeyCache.enabled([:]) && KeyCache.enabled(["APPBOX_REPOSITORY_KEY_CACHE": "1"]))
    #expect(!KeyCache.enabled(["APPBOX_REPOSITORY_KEY_CACHE": "0"]))
  }

  @Test func anEncryptedRepositoryKeepsACopyThatAPasswordChangeMakesStale() throws {
    let directory = TemporaryDirectory("key-cache")
    let location = RepositoryLocation.directory(directory.url("repo"))
    let secret = self.secret
    func options(_ password: String) -> RepositoryOptions {
      RepositoryOptions(
        environment: [:], cacheDirectory: directory.url("cache"), password: { Array(password.utf8) },
        deviceSecret: { secret }, passwordGiven: true)
    }
    let created = try Repository.initialize(
      location, password: Array("first".utf8), options: options("first"))
    let cache = try #require(created.cacheDirectory)
    let firstKey = try #require(created.keyName)
    func cachedKeyName() -> String? {
      (try? JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: cache + "/key"))))
        .flatMap { $0 as? [String: String] }?["key"]
    }
    #expect(cachedKeyName() == firstKey)
    let again = try Repository(location: location, options: options("first"))
    #expect(again.keyName == firstKey && again.key?.master == created.key?.master)
    // A wrong password is denied even though this device holds a copy of the key.
    var thrown: (any Error)?
    do { _ = try Repository(location: location, options: options("wrong")) } catch { thrown = error }
    #expect((thrown as? BackupError)?.code == .denied, "\(String(describing: thrown))")
    // `repo passwd`: the copy names a key object that is gone; the new password opens (the
    // slow way) and the copy is renewed for the new key object.
    try again.changePassword(to: Array("second".utf8))
    let renewed = try Repository(location: location, options: options("second"))
    #expect(renewed.keyName != firstKey && renewed.key?.master == created.key?.master)
    #expect(cachedKeyName() == renewed.keyName)
    #expect(throws: BackupError.self) { _ = try Repository(location: location, options: options("first")) }
  }
}
