import Foundation
import Testing

@testable import AppboxPlist

/// Decodes input that must be refused, and checks the refusal is a one-line bad-data error.
private func refusal(
  _ bytes: Data, limits: PropertyListLimits = .init(), sourceLocation: SourceLocation = #_sourceLocation
) -> PropertyListError? {
  do {
    let value = try PropertyList.decode(bytes, limits: limits)
    Issue.record(
      "decoded hostile input as \(String(describing: value).prefix(200))", sourceLocation: sourceLocation)
    return nil
  } catch let error as PropertyListError {
    #expect(error.kind == .badData, sourceLocation: sourceLocation)
    #expect(!error.description.isEmpty && !error.description.contains("\n"), sourceLocation: sourceLocation)
    return error
  } catch {
    Issue.record("threw \(error), not a PropertyListError", sourceLocation: sourceLocation)
    return nil
  }
}

private func refusal(_ xml: String, sourceLocation: SourceLocation = #_sourceLocation) -> PropertyListError? {
  refusal(Data(xml.utf8), sourceLocation: sourceLocation)
}

private func document(_ body: String) -> String {
  "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<plist version=\"1.0\">\n\(body)\n</plist>\n"
}

/// Small enough to try every truncation and thousands of corruptions.
private let compactPropertyList: PropertyList = .dictionary([
  "name": .string("Notes — ✓"),
  "list": .array([.integer(1), .integer(-70_000), .real(2.5), .bool(true), .data(Data([1, 2]))]),
  "when": .date(Date(timeIntervalSince1970: 1_000_000)),
  "nested": .dictionary(["a": .array([]), "b": .dictionary([:]), "c": .string("")]),
])

@Suite("Property lists: hostile input")
struct PropertyListHostileInputTests {
  @Test func everyTruncationOfABinaryPlistIsRefused() throws {
    let bytes = compactPropertyList.binaryData()
    #expect(try PropertyList.decode(bytes) == compactPropertyList)
    for length in 0..<bytes.count {
      #expect(refusal(bytes.prefix(length)) != nil, "prefix of \(length) bytes")
    }
    // The rich value has wide offsets and references; sample its prefixes.
    let rich = richPropertyList.binaryData()
    for length in stride(from: 0, to: rich.count, by: 101) + [rich.count - 1] {
      #expect(refusal(rich.prefix(length)) != nil, "prefix of \(length) bytes")
    }
  }

  @Test func everyTruncationOfAnXMLPlistIsRefused() throws {
    let bytes = Array(compactPropertyList.xmlData())
    #expect(try PropertyList.decode(Data(bytes)) == compactPropertyList)
    let end = Array("</plist>".utf8)
    let closing = try #require(
      (0...(bytes.count - end.count)).first { bytes[$0..<$0 + end.count].elementsEqual(end) })
    for length in 0..<closing + end.count {
      #expect(refusal(Data(bytes.prefix(length))) != nil, "prefix of \(length) bytes")
    }
  }

  @Test func hundredThousandNestedXMLArraysHitTheDepthLimit() {
    let depth = 100_000
    let xml = String(repeating: "<array>", count: depth) + String(repeating: "</array>", count: depth)
    #expect(refusal(xml)?.reason == .tooDeep)
    var unbounded = PropertyListLimits()
    unbounded.maxDepth = .max
    let error = refusal(Data(xml.utf8), limits: unbounded)
    #expect(error?.reason == .tooDeep)
    #expect(error?.description == "XML property list nested deeper than 512 levels at line 1")
  }

  @Test func depthLimitIsExact() throws {
    let nested = { (depth: Int) in
      String(repeating: "<array>", count: depth - 1) + "<true/>"
        + String(repeating: "</array>", count: depth - 1)
    }
    #expect(try PropertyList.decode(Data(nested(64).utf8)) != .bool(true))
    #expect(refusal(nested(65))?.reason == .tooDeep)
    var limits = PropertyListLimits()
    limits.maxDepth = 3
    #expect(throws: PropertyListError.self) { try PropertyList.decode(Data(nested(4).utf8), limits: limits) }
    #expect(try PropertyList.decode(Data(nested(3).utf8), limits: limits).array?.count == 1)
  }

  @Test func deeplyNestedBinaryHitsTheDepthLimit() {
    let depth = 100_000
    var objects = (0..<depth - 1).map { [0xA1] + bigEndian(UInt64($0 + 1), width: 4) }
    objects.append([0xA0])
    let bytes = binaryPlist(objects: objects, referenceWidth: 4)
    let error = refusal(bytes)
    #expect(error?.reason == .tooDeep)
    #expect(error?.description == "binary property list: nested deeper than 64 levels")
    var unbounded = PropertyListLimits()
    unbounded.maxDepth = .max
    #expect(refusal(bytes, limits: unbounded)?.reason == .tooDeep)
  }

  @Test func selfReferenceIsACycle() {
    let direct = binaryPlist(objects: [[0xA1, 0x00]])
    #expect(refusal(direct)?.reason == .cyclic)
    #expect(refusal(direct)?.description == "binary property list: object 0 contains itself")
    // dict {"k": [dict]}: the cycle passes through an array and a dictionary value.
    let indirect = binaryPlist(objects: [[0xD1, 0x01, 0x02], [0x51, 0x6B], [0xA1, 0x00]])
    #expect(refusal(indirect)?.reason == .cyclic)
    let viaKey = binaryPlist(objects: [[0xD1, 0x00, 0x01], [0x09]])
    #expect(refusal(viaKey)?.reason == .cyclic)
  }

  @Test func sharedObjectsAreAllowedButCannotExplode() throws {
    // Object i is an array holding object i+1 twice: fine as a graph, 2^40 values as a tree.
    var objects = (0..<40).map { index -> [UInt8] in [0xA2, UInt8(index + 1), UInt8(index + 1)] }
    objects.append([0x09])
    #expect(refusal(binaryPlist(objects: objects))?.reason == .tooManyObjects)
    let shallow = binaryPlist(objects: [[0xA2, 1, 1], [0xA2, 2, 2], [0x09]])
    #expect(
      try PropertyList.decode(shallow)
        == .array(Array(repeating: .array([.bool(true), .bool(true)]), count: 2)))
    // One 40 KB string referenced 2,000 times would expand to 80 MB.
    let string: [UInt8] =
      [0x5F, 0x12] + bigEndian(40_000, width: 4) + [UInt8](repeating: 0x61, count: 40_000)
    let array: [UInt8] = [0xAF, 0x11] + bigEndian(2000, width: 2) + [UInt8](repeating: 1, count: 2000)
    #expect(refusal(binaryPlist(objects: [array, string]))?.reason == .tooLarge)
  }

  @Test func outOfRangeOffsetsAndReferencesAreRefused() {
    let valid = [[0xA1, 0x01], [0x09]] as [[UInt8]]
    let pastTable = binaryPlist(objects: valid, offsets: [8, 0xFFFF_FFFF])
    #expect(refusal(pastTable)?.description == "binary property list: offset of object 1 out of range")
    #expect(refusal(binaryPlist(objects: valid, offsets: [8, 3])) != nil)
    let badReference = binaryPlist(objects: [[0xA1, 0x07], [0x09]])
    #expect(refusal(badReference)?.description == "binary property list: object reference out of range")
    #expect(refusal(binaryPlist(objects: valid, top: 2)) != nil)
    #expect(refusal(binaryPlist(objects: valid, objectCount: 0)) != nil)
    #expect(refusal(binaryPlist(objects: valid, objectCount: UInt64.max)) != nil)
    #expect(refusal(binaryPlist(objects: valid, referenceWidth: 0)) != nil)
    #expect(refusal(binaryPlist(objects: valid, referenceWidth: 9)) != nil)
  }

  @Test func countsLargerThanTheDataAreRefused() {
    let huge = bigEndian(UInt64(Int64.max), width: 8)
    for marker: UInt8 in [0xAF, 0xDF, 0x4F, 0x5F, 0x6F] {
      let error = refusal(binaryPlist(objects: [[marker, 0x13] + huge]))
      #expect(error?.description.hasPrefix("binary property list: object count") == true)
    }
    #expect(refusal(binaryPlist(objects: [[0xAF, 0x13] + bigEndian(UInt64.max, width: 8)])) != nil)
    #expect(refusal(binaryPlist(objects: [[0x4E, 1, 2, 3]])) != nil)
    #expect(refusal(binaryPlist(objects: [[0xAF, 0x09]])) != nil)
  }

  @Test func unsupportedObjectsAreRefused() {
    #expect(refusal(binaryPlist(objects: [[0x80, 0x01]]))?.reason == .unsupported)
    #expect(refusal(binaryPlist(objects: [[0x00]]))?.reason == .unsupported)
    for marker: UInt8 in [0x0F, 0xC0, 0x70, 0x34, 0x15, 0x21] {
      #expect(refusal(binaryPlist(objects: [[marker, 0, 0, 0, 0, 0, 0, 0, 0]]))?.reason == .malformed)
    }
    #expect(
      refusal(binaryPlist(objects: [[0xD1, 0x01, 0x01], [0x09]]))?.description
        == "binary property list: dictionary key is not a string")
    #expect(
      refusal(binaryPlist(objects: [[0x61, 0xD8, 0x00]]))?.description
        == "binary property list: invalid UTF-16 in a string")
    #expect(refusal(binaryPlist(objects: [[0x51, 0xE9]])) != nil)
  }

  @Test func invalidUTF8IsRefused() {
    var bytes = Array(document("<dict>\n<key>a</key>\n<string>x</string>\n</dict>").utf8)
    let index = bytes.lastIndex(of: UInt8(ascii: "x")) ?? 0
    bytes[index] = 0xC3
    bytes.insert(0x28, at: index + 1)
    #expect(refusal(Data(bytes))?.description == "malformed XML property list: invalid UTF-8 at line 5")
    #expect(refusal(Data([0x3C, 0x73, 0xFF, 0x3E])) != nil)
  }

  @Test(arguments: [
    ("<string>x</key>", "expected </string> at line 3"),
    ("<array><dict></array></dict>", "</array> does not close <dict> at line 3"),
    ("<dict><key>a</key></dict>", "key 'a' has no value at line 3"),
    ("<dict><key>a</key><key>b</key><true/></dict>", "key 'a' has no value at line 3"),
    ("<dict><string>a</string></dict>", "expected <key> in <dict>, found <string> at line 3"),
    ("<key>a</key>", "<key> outside a <dict> at line 3"),
    ("<foo/>", "unknown element <foo> at line 3"),
    ("<array>stray<true/></array>", "unexpected text in <array> at line 3"),
    ("<string>a<b/></string>", "unexpected markup inside <string> at line 3"),
    ("<string>&bogus;</string>", "unknown entity reference '&bogus;' at line 3"),
    ("<string>&#xD800;</string>", "unknown entity reference '&#xD800;' at line 3"),
    ("<string>a & b</string>", "unterminated entity reference at line 3"),
    ("<integer>18446744073709551616</integer>", "integer out of range at line 3"),
    ("<integer>-9223372036854775809</integer>", "integer out of range at line 3"),
    ("<integer>12abc</integer>", "invalid integer '12abc' at line 3"),
    ("<real>1.2.3</real>", "invalid real '1.2.3' at line 3"),
    ("<date>2024-02-30T00:00:00Z</date>", "invalid date '2024-02-30T00:00:00Z' at line 3"),
    ("<data>AB=C</data>", "invalid base64 in <data> at line 3"),
    ("<true>yes</true>", "<true> must be empty at line 3"),
    ("<array>\n<!-- unterminated </array>", "unterminated comment at line 4"),
    ("<array>\n<true/>\n", "</plist> does not close <array> at line 6"),
  ])
  func malformedXMLIsRefused(body: String, message: String) {
    let error = refusal(document(body))
    #expect(error?.reason == .malformed)
    #expect(error?.description == "malformed XML property list: " + message)
  }

  @Test func trailingGarbageAndEarlyEndAreRefused() throws {
    #expect(
      refusal(document("<true/>") + "<true/>")?.description
        == "malformed XML property list: unexpected content after the root element at line 5")
    #expect(refusal(document("<true/><true/>")) != nil)
    #expect(refusal(document("<true/>") + "junk") != nil)
    #expect(try PropertyList.decode(Data((document("<true/>") + "<!-- a comment -->\n").utf8)) == .bool(true))
    #expect(
      refusal("<plist version=\"1.0\">\n<array>\n<true/>\n")?.description
        == "malformed XML property list: unexpected end of data in <array> at line 4")
  }

  @Test func nonPlistFilesAreRefused() {
    let png = Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 13])
    #expect(refusal(png) != nil)
    #expect(
      refusal("{\"CFBundleIdentifier\": \"com.example\"}")?.description
        == "not a property list: neither bplist00 nor XML")
    #expect(refusal(Data()) != nil)
    #expect(
      refusal("<html><body>hi</body></html>")?.description
        == "malformed XML property list: unknown element <html> at line 1")
    #expect(refusal("bplist15" + String(repeating: "\0", count: 40))?.reason == .unsupported)
    #expect(refusal("<?xml version=\"1.0\"?>") != nil)
    #expect(
      refusal("<plist version=\"1.0\"></plist>")?.description
        == "malformed XML property list: <plist> holds no value at line 1")
    #expect(
      refusal("<plist version=\"1.0\">hello<true/></plist>")?.description
        == "malformed XML property list: unexpected text in <plist> at line 1")
  }

  @Test func sizeAndObjectLimitsApply() throws {
    var limits = PropertyListLimits()
    limits.maxBytes = 100
    let big = richPropertyList.xmlData()
    #expect(refusal(big, limits: limits)?.reason == .tooLarge)
    #expect(refusal(richPropertyList.binaryData(), limits: limits)?.reason == .tooLarge)
    limits = PropertyListLimits(maxObjects: 3)
    let four = PropertyList.array([.integer(1), .integer(2), .integer(3)])
    #expect(refusal(four.xmlData(), limits: limits)?.reason == .tooManyObjects)
    #expect(refusal(four.binaryData(), limits: limits)?.reason == .tooManyObjects)
    limits.maxObjects = 4
    #expect(try PropertyList.decode(four.xmlData(), limits: limits) == four)
    #expect(try PropertyList.decode(four.binaryData(), limits: limits) == four)
  }

  /// Random corruption of valid files: every outcome is a value or a PropertyListError.
  @Test func randomlyCorruptedFilesNeverCrash() {
    var random = SplitMix64(seed: 0x5EED)
    var refused = 0
    for original in [Array(compactPropertyList.binaryData()), Array(compactPropertyList.xmlData())] {
      for _ in 0..<20_000 {
        var bytes = original
        for _ in 0..<1 + Int(random.next() % 4) {
          bytes[Int(random.next() % UInt64(bytes.count))] = UInt8(truncatingIfNeeded: random.next())
        }
        do {
          _ = try PropertyList.decode(Data(bytes))
        } catch is PropertyListError {
          refused += 1
        } catch {
          Issue.record("threw \(error), not a PropertyListError")
        }
      }
    }
    #expect(refused > 20_000)
  }
}

/// A small deterministic generator, so that a failing corruption can be reproduced.
struct SplitMix64 {
  var state: UInt64
  init(seed: UInt64) { state = seed }
  mutating func next() -> UInt64 {
    state &+= 0x9E37_79B9_7F4A_7C15
    var mixed = state
    mixed = (mixed ^ (mixed >> 30)) &* 0xBF58_476D_1CE4_E5B9
    mixed = (mixed ^ (mixed >> 27)) &* 0x94D0_49BB_1331_11EB
    return mixed ^ (mixed >> 31)
  }
}
