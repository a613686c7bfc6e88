import AppboxCore
import AppboxPlist
import AppboxTestSupport
import Foundation
import Glibc
import Testing

@testable import AppboxContainer

struct PreferencesTests {
  @Test func valuesParseStrictlyByType() throws {
    #expect(try PreferenceType.string.value(parsing: " a b ") == .string(" a b "))
    #expect(try PreferenceType.int.value(parsing: "-9223372036854775808") == .integer(Int64.min))
    #expect(try PreferenceType.float.value(parsing: "1e3") == .real(1000))
    #expect(try PreferenceType.bool.value(parsing: "NO") == .bool(false))
    #expect(
      try PreferenceType.date.value(parsing: "1970-01-01T00:00:01.5Z")
        == .date(Date(timeIntervalSince1970: 1.5)))
    #expect(
      try PreferenceType.date.value(parsing: "2024-01-02T04:04:05+01:00")
        == .date(Date(timeIntervalSince1970: 1_704_164_645)))
    #expect(try PreferenceType.data.value(parsing: "") == .data(Data()))
    // Above Int64.max, up to UInt64.max (CPython's plistlib data has such integers).
    #expect(try PreferenceType.int.value(parsing: "9223372036854775808") == .unsignedInteger(1 << 63))
    #expect(try PreferenceType.int.value(parsing: "18446744073709551615") == .unsignedInteger(.max))
    let bad: [(PreferenceType, String)] = [
      (.int, "18446744073709551616"), (.int, "-9223372036854775809"), (.int, "0x10"), (.int, ""),
      (.float, "inf"), (.float, "1,5"),
      (.bool, "y"),
      (.date, "2024-01-02"), (.date, "yesterday"), (.data, "AAE"), (.data, "not base64!"),
    ]
    for (type, text) in bad {
      #expect(throws: ContainerError.self, "\(type) '\(text)'") { try type.value(parsing: text) }
    }
  }

  @Test func preferencesRoundTripAndKeepKeysApart() throws {
    let device = try TestDevice()
    let preferences = try device.session().preferences(of: device.app)
    #expect(try preferences.dictionary().isEmpty)
    try preferences.set(.string("lower"), forKey: "key")
    try preferences.set(.string("upper"), forKey: "Key")
    try preferences.set(.array([.integer(1), .dictionary(["nested": .bool(true)])]), forKey: "list")
    #expect(try preferences.value(forKey: "key") == .string("lower"))
    #expect(try preferences.value(forKey: "Key") == .string("upper"))
    #expect(try preferences.dictionary().count == 3)
    try preferences.removeValue(forKey: "key")
    #expect(
      throws: ContainerError(
        .keyNotFound,
        "No preference 'key' in Library/Preferences/com.example.notes.plist "
          + "of com.example.notes")
    ) { try preferences.value(forKey: "key") }
    #expect(throws: ContainerError.self) { try preferences.set(.string("x"), forKey: "") }
    let file = try Data(contentsOf: URL(fileURLWithPath: device.home.preferencesFile))
    #expect(try PropertyList.decode(file)["Key"] == .string("upper"))
  }

  @Test func aMissingPreferencesFolderIsRecreatedOnWrite() throws {
    let device = try TestDevice()
    try FileTree.remove(atPath: device.home.path(of: .preferences))
    let preferences = try device.session().preferences(of: device.app)
    #expect(try preferences.dictionary().isEmpty)
    #expect(throws: ContainerError.self) { try preferences.removeValue(forKey: "k") }
    try preferences.set(.integer(1), forKey: "k")
    #expect(try preferences.value(forKey: "k") == .integer(1))
  }

  @Test func plantedSymlinksAreRefused() throws {
    let device = try TestDevice()
    let other = TemporaryDirectory("prefs-target")
    let target = try other.write("target.plist", "")
    try PropertyList.dictionary(["secret": .string("outside")]).binaryData().write(
      to: URL(fileURLWithPath: target))
    let preferences = try device.session().preferences(of: device.app)

    // The file itself replaced by a symlink: refused, for reads and writes alike.
    #expect(symlink(target, device.home.preferencesFile) == 0)
    for attempt in [{ _ = try preferences.dictionary() }, { try preferences.set(.string("x"), forKey: "k") }]
    {
      do {
        try attempt()
        Issue.record("followed a planted symlink")
      } catch let error as ContainmentError {
        #expect(error.reason == .symlink && error.kind == .denied)
      }
    }
    // The folder replaced by a symlink that leaves the home: refused as escaping.
    try FileTree.remove(atPath: device.home.path(of: .preferences))
    #expect(symlink(other.path, device.home.path(of: .preferences)) == 0)
    do {
      _ = try preferences.dictionary()
      Issue.record("followed a planted folder symlink")
    } catch let error as ContainmentError {
      // .escapes through openat2, .symlink through the component walk (which ContainmentTests
      // may switch on process-wide while this runs): denied either way.
      #expect(error.reason == .escapes || error.reason == .symlink)
      #expect(error.kind == .denied)
    }
    #expect(
      try PropertyList.decode(Data(contentsOf: URL(fileURLWithPath: target)))
        == .dictionary(["secret": .string("outside")]))
    #expect(try FileManager.default.contentsOfDirectory(atPath: other.path) == ["target.plist"])
  }
}
