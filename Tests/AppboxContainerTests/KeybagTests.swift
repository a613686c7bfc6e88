import AppboxCore
import AppboxCrypto
import AppboxPlist
import AppboxTestSupport
import Foundation
import Testing

@testable import AppboxContainer

/// The keybag's wrapping, without a kernel: what opens it and what does not.
struct KeybagTests {
  /// Cheap scrypt parameters: these tests are about the wrapping, not the cost.
  static let fast = Scrypt.Parameters(n: 16, r: 1, p: 1)

  static func keys() throws -> [ProtectionClass: (key: [UInt8], identifier: FscryptKeyIdentifier)] {
    var keys: [ProtectionClass: (key: [UInt8], identifier: FscryptKeyIdentifier)] = [:]
    for protectionClass in ProtectionClass.keyed {
      keys[protectionClass] = (
        try SecureRandom.bytes(64), FscryptKeyIdentifier(bytes: try SecureRandom.bytes(16))!
      )
    }
    return keys
  }

  static let device = Keybag.DeviceBinding(keybagKey: [UInt8](repeating: 7, count: 32), udid: "UDID-A")

  @Test func theRightPasscodeOnTheRightDeviceOpensItAndNothingElseDoes() throws {
    let keys = try Self.keys()
    let keybag = try Keybag.wrapping(
      keys, passcode: Array("1234".utf8), passcodeSet: true, device: Self.device, parameters: Self.fast)
    let opened = try #require(try keybag.unwrap(passcode: Array("1234".utf8), device: Self.device))
    #expect(opened.mapValues { $0 } == keys.mapValues(\.key))
    #expect(try keybag.unwrap(passcode: Array("1235".utf8), device: Self.device) == nil)
    #expect(try keybag.unwrap(passcode: [], device: Self.device) == nil)
    // A copied root with the passcode, but without this device's key (or with another UDID).
    var otherKey = Self.device
    otherKey.keybagKey[0] ^= 1
    #expect(try keybag.unwrap(passcode: Array("1234".utf8), device: otherKey) == nil)
    var otherUDID = Self.device
    otherUDID.udid = "UDID-B"
    #expect(try keybag.unwrap(passcode: Array("1234".utf8), device: otherUDID) == nil)
  }

  @Test func theFileHoldsNoKeyInTheClearAndSwappedKeysDoNotOpen() throws {
    let keys = try Self.keys()
    let directory = TemporaryDirectory("keybag")
    var keybag = try Keybag.wrapping(
      keys, passcode: Array("1234".utf8), passcodeSet: true, device: Self.device, parameters: Self.fast)
    try keybag.save(in: directory.path)
    let bytes = try Data(contentsOf: URL(fileURLWithPath: directory.url(Keybag.fileName)))
    for (key, _) in keys.values { #expect(bytes.range(of: Data(key)) == nil) }
    var st = stat()
    #expect(stat(directory.url(Keybag.fileName), &st) == 0 && st.st_mode & 0o777 == 0o600)
    let loaded = try #require(try Keybag.load(in: directory.path))
    #expect(loaded == keybag)

    // The sealed keys are bound to their class: exchanging two fails authentication.
    let complete = keybag.keys[.complete]!.sealed
    keybag.keys[.complete]!.sealed = keybag.keys[.untilFirstUnlock]!.sealed
    keybag.keys[.untilFirstUnlock]!.sealed = complete
    #expect(try keybag.unwrap(passcode: Array("1234".utf8), device: Self.device) == nil)
  }

  @Test func aDamagedKeybagIsBadData() throws {
    let directory = TemporaryDirectory("keybag")
    try directory.write(Keybag.fileName, "not a plist")
    #expect { try Keybag.load(in: directory.path) } throws: { ($0 as? ContainerError)?.kind == .badData }
    try directory.write(
      Keybag.fileName,
      String(decoding: PropertyList.dictionary(["Version": .integer(1)]).xmlData(), as: UTF8.self))
    #expect { try Keybag.load(in: directory.path) } throws: { ($0 as? ContainerError)?.kind == .badData }
    #expect(try Keybag.load(in: directory.url("missing")) == nil)
  }

  @Test func theDelayScheduleIsThePlatforms() {
    #expect(
      (1...10).map { UnlockAttempts.delay(afterFailures: $0) } == [0, 0, 0, 0, 60, 300, 900, 900, 3600, 3600])
  }

  @Test func protectionClassesAreOrderedWeakestFirst() {
    #expect(ProtectionClass.allCases.sorted() == [.none, .untilFirstUnlock, .completeUnlessOpen, .complete])
    #expect(ProtectionClass.keyed.filter(\.isDroppedAtLock) == [.complete, .completeUnlessOpen])
  }
}
