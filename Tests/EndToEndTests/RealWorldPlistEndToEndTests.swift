// Property lists and capabilities as shipping apps have them (issue 12): a key repeated in
// Info.plist, `armv7` required on a 64-bit device, integers above Int64.max and keys in two
// Unicode normalizations in preferences, and dates no calendar holds.

import AppboxCore
import AppboxPlist
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// A copy of the Notes 1.0 bundle (unsealed) whose Info.plist is `edit` applied to its XML.
private func notesBundle(in dir: TemporaryDirectory, _ edit: (String) -> String) throws -> String {
  let bundle = dir.url("Notes.app")
  let copy = try runProcess("/bin/cp", ["-a", fixturePath("bundles/Notes-1.0/Notes.app"), bundle])
  #expect(copy.status == 0, "\(copy.err)")
  try? FileManager.default.removeItem(atPath: bundle + "/_CodeSignature")
  let info = try PropertyList.decode(Data(contentsOf: URL(fileURLWithPath: bundle + "/Info.plist")))
  let xml = edit(String(decoding: info.xmlData(), as: UTF8.self))
  try Data(xml.utf8).write(to: URL(fileURLWithPath: bundle + "/Info.plist"))
  return bundle
}

/// Adds `<key>key</key>value` as the last entries of the top dictionary.
private func appending(_ entries: String, to xml: String) -> String {
  guard let end = xml.range(of: "</dict>\n</plist>", options: .backwards) else { return xml }
  return xml.replacingCharacters(in: end, with: entries + "\n</dict>\n</plist>")
}

struct RealWorldPlistEndToEndTests {
  /// DuckDuckGo's Info.plist repeats a key; Mastodon's, Home Assistant's and isowords' require
  /// `armv7`. Both install on the default device, and the last value of the key is the one used.
  @Test func aShippingStyleInfoPlistInstallsOnTheDefaultDevice() throws {
    let dir = TemporaryDirectory("realworld")
    let bundle = try notesBundle(in: dir) {
      appending(
        """
        <key>CFBundleShortVersionString</key><string>9.9</string>
        <key>UIRequiredDeviceCapabilities</key><array><string>armv7</string><string>metal</string></array>
        """, to: $0)
    }
    let device = Device()
    #expect(try device.run("device", "init").status == 0)
    let listed = try #require(try device.json("device") as? [String: Any])
    let capabilities = Set(listed["capabilities"] as? [String] ?? [])
    #expect(capabilities.isSuperset(of: ["arm64", "armv7", "nfc", "telephony", "metal", "arkit"]))
    #expect(capabilities.isDisjoint(with: ["driverkit", "ipad-minimum-performance-m1", "armv6"]))
    #expect(try device.install(path: bundle) != "")
    let inspect = try #require(try device.json("inspect", "com.example.notes") as? [String: Any])
    #expect(inspect["shortVersion"] as? String == "9.9")
  }

  /// arm64 implies armv7 on any device, also one whose list names only arm64; a device
  /// without arm64 refuses the app, naming armv7.
  @Test func arm64ImpliesArmv7() throws {
    let dir = TemporaryDirectory("realworld")
    let bundle = try notesBundle(in: dir) {
      $0.replacingOccurrences(of: "<string>arm64</string>", with: "<string>armv7</string>")
    }
    let old = Device()
    let unknown = try old.run("device", "init", "--capabilities", "wifi,metal,teleportation")
    #expect(
      unknown.status == 0 && unknown.err.contains("'teleportation' is not a capability"), "\(unknown.err)")
    let refused = try old.run("install", bundle)
    #expect(refused.status == 65 && refused.err.contains("armv7"), "\(refused.err)")
    #expect(try old.run("device", "init", "--capabilities", "arm64,wifi,metal").status == 0)
    let installed = try old.run("install", bundle)
    #expect(installed.status == 0, "\(installed.err)")
  }

  /// CPython's plistlib data has integers up to UInt64.max: `defaults` writes, reads and prints
  /// them, and plistlib reads the file back.
  @Test func unsignedSixtyFourBitPreferencesRoundTrip() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    let written = try device.run(
      "defaults", "com.example.notes", "write", "big", "18446744073709551615", "--type", "int")
    #expect(written.status == 0, "\(written.err)")
    let read = try device.run("defaults", "com.example.notes", "read", "big")
    #expect(read.out == "18446744073709551615\n")
    let json = try device.run("--json", "defaults", "com.example.notes", "read", "big")
    #expect(json.out.contains("\"value\": 18446744073709551615"), "\(json.out)")
    let file = device.home + "/Library/Preferences/com.example.notes.plist"
    let python = try runProcess(
      "/usr/bin/python3",
      ["-c", "import plistlib,sys; print(plistlib.load(open(sys.argv[1],'rb'))['big'])", file])
    #expect(python.out == "18446744073709551615\n", "\(python.err)")
  }

  /// Keys that differ only in normalization stay two keys through `defaults`.
  @Test func preferenceKeysInNFCAndNFDStayApart() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    #expect(try device.run("defaults", "com.example.notes", "write", "caf\u{E9}", "composed").status == 0)
    #expect(try device.run("defaults", "com.example.notes", "write", "cafe\u{301}", "decomposed").status == 0)
    let composed = try device.run("defaults", "com.example.notes", "read", "caf\u{E9}")
    let decomposed = try device.run("defaults", "com.example.notes", "read", "cafe\u{301}")
    #expect(composed.out == "composed\n" && decomposed.out == "decomposed\n")
    let all = try device.run("defaults", "com.example.notes", "read")
    #expect(all.out.split(separator: "\n").count == 2, "\(all.out)")
  }

  /// A NaN or year-10000 date that an app wrote into its preferences: refused with 65 and a
  /// reason, never printed as "" or an absurd year.
  @Test func datesNoCalendarHoldsAreRefused() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    // {"when": <date NaN>} as a binary plist.
    var bytes = Array("bplist00".utf8) + [0xD1, 0x01, 0x02, 0x54] + Array("when".utf8) + [0x33]
    bytes += withUnsafeBytes(of: Double.nan.bitPattern.bigEndian) { Array($0) }
    let offsets: [UInt8] = [8, 11, 16]
    let table = bytes.count
    bytes += offsets + [0, 0, 0, 0, 0, 0, 1, 1] + [0, 0, 0, 0, 0, 0, 0, 3] + [UInt8](repeating: 0, count: 8)
    bytes += [0, 0, 0, 0, 0, 0, 0, UInt8(table)]
    try Data(bytes).write(
      to: URL(fileURLWithPath: device.home + "/Library/Preferences/com.example.notes.plist"))
    let read = try device.run("defaults", "com.example.notes", "read")
    #expect(read.status == 65, "\(read.out)\(read.err)")
    #expect(read.err.contains("between the years 1 and 9999"), "\(read.err)")
  }
}
