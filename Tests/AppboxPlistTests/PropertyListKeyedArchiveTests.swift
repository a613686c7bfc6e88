import Foundation
import Testing

@testable import AppboxPlist

/// An MBFile-shaped archive, as an iOS backup's Manifest.db holds one per file.
private func sampleArchive(
  path: String = "Documents/notes.txt", key: [UInt8]? = Array(repeating: 7, count: 44)
)
  -> Data
{
  var builder = KeyedArchiveBuilder()
  var fields: PropertyListDictionary = [
    "Size": .integer(1234), "Mode": .integer(0o100644), "LastModified": .integer(1_700_000_000),
    "ProtectionClass": .integer(3), "Flags": .integer(0),
  ]
  fields["RelativePath"] = builder.add(.string(path))
  if let key { fields["EncryptionKey"] = builder.addMutableData(Data(key)) }
  return builder.archive(root: fields, className: "MBFile", ancestors: ["MBFile", "NSObject"])
}

@Suite("Property lists: keyed archives")
struct PropertyListKeyedArchiveTests {
  @Test func anArchiveRoundTripsWithRealUIDObjects() throws {
    let bytes = sampleArchive()
    // The references are binary UID objects (marker 0x8N), not dictionaries.
    #expect([UInt8](bytes).contains { $0 & 0xF0 == 0x80 && $0 & 0x0F < 4 })
    let archive = try KeyedArchive.decode(bytes)
    #expect(try archive.className(of: archive.root) == "MBFile")
    #expect(try archive.string(archive.root["RelativePath"]) == "Documents/notes.txt")
    #expect(try archive.data(archive.root["EncryptionKey"]) == Data(repeating: 7, count: 44))
    #expect(archive.root["Size"]?.integer == 1234)
    // The root is the second object, as NSKeyedArchiver lays it out (readers rely on it).
    #expect(archive.objects[1] == archive.root)
    #expect(archive.objects[0] == .string("$null"))
    let noKey = try KeyedArchive.decode(sampleArchive(key: nil))
    #expect(try noKey.data(noKey.root["EncryptionKey"]) == nil)
  }

  @Test func ordinaryDecodingStillRefusesUIDs() {
    #expect(throws: PropertyListError.self) { try PropertyList.decode(sampleArchive()) }
    do {
      _ = try PropertyList.decode(sampleArchive())
    } catch let error as PropertyListError {
      #expect(error.reason == .unsupported)
    } catch {
      Issue.record("unexpected \(error)")
    }
  }

  @Test func anXMLArchiveWithCFUIDDictionariesIsRead() throws {
    let xml = """
      <?xml version="1.0" encoding="UTF-8"?>
      <plist version="1.0"><dict>
      <key>$archiver</key><string>NSKeyedArchiver</string>
      <key>$version</key><integer>100000</integer>
      <key>$top</key><dict><key>root</key><dict><key>CF$UID</key><integer>1</integer></dict></dict>
      <key>$objects</key><array><string>$null</string>
      <dict><key>RelativePath</key><dict><key>CF$UID</key><integer>2</integer></dict></dict>
      <string>Library/x</string></array>
      </dict></plist>
      """
    let archive = try KeyedArchive.decode(Data(xml.utf8))
    #expect(try archive.string(archive.root["RelativePath"]) == "Library/x")
  }

  @Test func hostileArchivesAreOneClearRefusal() throws {
    func refusal(_ bytes: Data, limits: PropertyListLimits = .init()) -> PropertyListError? {
      do {
        let archive = try KeyedArchive.decode(bytes, limits: limits)
        // Decoding may succeed; following what it holds must not trap either.
        _ = try archive.className(of: archive.root)
        _ = try archive.string(archive.root["RelativePath"])
        _ = try archive.data(archive.root["EncryptionKey"])
        return nil
      } catch let error as PropertyListError {
        #expect(error.kind == .badData)
        #expect(!error.description.contains("\n"))
        return error
      } catch {
        Issue.record("threw \(error)")
        return nil
      }
    }
    let bytes = sampleArchive()
    for length in 0..<bytes.count { #expect(refusal(bytes.prefix(length)) != nil, "prefix \(length)") }
    var generator = SystemRandomNumberGenerator()
    for _ in 0..<3000 {
      var damaged = [UInt8](bytes)
      for _ in 0..<Int.random(in: 1...4, using: &generator) {
        damaged[Int.random(in: 8..<damaged.count, using: &generator)] = UInt8.random(
          in: 0...255, using: &generator)
      }
      _ = refusal(Data(damaged))
    }
    #expect(refusal(bytes, limits: PropertyListLimits(maxObjects: 5))?.reason == .tooManyObjects)
    #expect(refusal(bytes, limits: PropertyListLimits(maxBytes: 64))?.reason == .tooLarge)
    // Not an archive at all, and a root UID pointing past the objects.
    #expect(refusal(PropertyList.dictionary(["a": .integer(1)]).binaryData())?.reason == .malformed)
    var builder = KeyedArchiveBuilder()
    let fields: PropertyListDictionary = ["RelativePath": KeyedArchiveUID.uid(999)]
    #expect(
      refusal(builder.archive(root: fields, className: "MBFile", ancestors: ["MBFile"]))?.reason == .malformed
    )
  }

  @Test func aReferenceCycleIsFollowedOneStepAtATime() throws {
    var builder = KeyedArchiveBuilder()
    // The root refers to itself: resolving gives the root back, never a loop.
    let fields: PropertyListDictionary = [
      "RelativePath": KeyedArchiveUID.uid(1), "Self": KeyedArchiveUID.uid(1),
    ]
    let archive = try KeyedArchive.decode(
      builder.archive(root: fields, className: "MBFile", ancestors: ["MBFile"]))
    #expect(try archive.resolve(archive.root["Self"]!) == archive.root)
    #expect(throws: PropertyListError.self) { try archive.string(archive.root["RelativePath"]) }
  }
}
