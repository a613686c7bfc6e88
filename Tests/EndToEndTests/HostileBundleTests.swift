import AppboxCore
import AppboxPlist
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// Every hostile bundle is refused with exit 65 and one stderr line, leaves nothing under
/// ApplicationRoot, and never prints content of a file outside the bundle.
/// A damaged copy of a bundle; keeps its temp directory alive while tests use the path.
struct HostileBundle {
  let dir: TemporaryDirectory
  let path: String
}

struct HostileBundleTests {
  /// A copy of Notes 1.0 in a temp dir, for `mutate` to damage.
  func hostileBundle(_ mutate: (String) throws -> Void) throws -> HostileBundle {
    let dir = TemporaryDirectory("hostile")
    try copyTree(fixturePath("bundles/Notes-1.0/Notes.app"), to: dir.url("Notes.app"))
    try mutate(dir.url("Notes.app"))
    return HostileBundle(dir: dir, path: dir.url("Notes.app"))
  }

  func writeInfo(_ bundle: String, _ changes: [String: PropertyList?]) throws {
    let path = bundle + "/Info.plist"
    var dictionary = try PropertyList.decode(try Data(contentsOf: URL(fileURLWithPath: path))).dictionary!
    for (key, value) in changes { dictionary[key] = value }
    try PropertyList.dictionary(dictionary).binaryData().write(to: URL(fileURLWithPath: path))
  }

  func expectRefused(
    _ bundle: HostileBundle, mentioning fragment: String, sourceLocation: SourceLocation = #_sourceLocation
  )
    throws
  {
    let device = Device()
    let result = try withExtendedLifetime(bundle) { try device.run("install", bundle.path) }
    #expect(
      result.status == 65, "\(fragment): status \(result.status) \(result.err)",
      sourceLocation: sourceLocation)
    #expect(result.err.contains(fragment), "stderr was: \(result.err)", sourceLocation: sourceLocation)
    #expect(result.err.split(separator: "\n").count == 1, "\(result.err)", sourceLocation: sourceLocation)
    #expect(
      !result.err.contains("root:x:0:0") && !result.out.contains("root:x:0:0"), sourceLocation: sourceLocation
    )
    #expect(
      device.applicationRootEntries().isEmpty, "left \(device.applicationRootEntries())",
      sourceLocation: sourceLocation)
  }

  @Test func brokenInfoPlists() throws {
    let missing = try hostileBundle { try FileManager.default.removeItem(atPath: $0 + "/Info.plist") }
    try expectRefused(missing, mentioning: "Info.plist is missing")

    let garbage = try hostileBundle {
      try Data("<plist><dict><key>x".utf8).write(to: URL(fileURLWithPath: $0 + "/Info.plist"))
    }
    try expectRefused(garbage, mentioning: "Info.plist is not a valid property list")

    let truncated = try hostileBundle { bundle in
      let data = PropertyList.dictionary(["CFBundleIdentifier": .string("com.example.notes")]).binaryData()
      try data.prefix(data.count - 7).write(to: URL(fileURLWithPath: bundle + "/Info.plist"))
    }
    try expectRefused(truncated, mentioning: "Info.plist is not a valid property list")

    let nested = try hostileBundle { bundle in
      let text =
        "<plist><dict><key>k</key>" + String(repeating: "<array>", count: 50_000)
        + String(repeating: "</array>", count: 50_000) + "</dict></plist>"
      try Data(text.utf8).write(to: URL(fileURLWithPath: bundle + "/Info.plist"))
    }
    try expectRefused(nested, mentioning: "Info.plist is not a valid property list")

    let linked = try hostileBundle { bundle in
      try FileManager.default.removeItem(atPath: bundle + "/Info.plist")
      #expect(symlink("/etc/passwd", bundle + "/Info.plist") == 0)
    }
    try expectRefused(linked, mentioning: "points outside the bundle")

    let innerLink = try hostileBundle { bundle in
      try FileManager.default.moveItem(atPath: bundle + "/Info.plist", toPath: bundle + "/Real.plist")
      #expect(symlink("Real.plist", bundle + "/Info.plist") == 0)
    }
    try expectRefused(innerLink, mentioning: "Info.plist is a symbolic link")
  }

  @Test func badIdentifiers() throws {
    let cases: [(PropertyList?, String)] = [
      (.string(""), "is not a reverse-DNS identifier"),
      (.string("../evil"), "is not a reverse-DNS identifier"),
      (.string("com.example/evil"), "is not a reverse-DNS identifier"),
      (.string("com..example"), "is not a reverse-DNS identifier"),
      (.string("com.exa\u{0}mple"), "is not a reverse-DNS identifier"),
      (.string(String(repeating: "a", count: 10_000)), "is not a reverse-DNS identifier"),
      (.integer(42), "CFBundleIdentifier is not a string"),
      (nil, "CFBundleIdentifier is missing"),
    ]
    for (value, message) in cases {
      let bundle = try hostileBundle { try writeInfo($0, ["CFBundleIdentifier": value]) }
      try expectRefused(bundle, mentioning: message)
    }
  }

  @Test func badVersionsAndExecutables() throws {
    let version = try hostileBundle { try writeInfo($0, ["CFBundleVersion": .string("1.0beta")]) }
    try expectRefused(version, mentioning: "is not dotted integers")
    let noVersion = try hostileBundle { try writeInfo($0, ["CFBundleVersion": nil]) }
    try expectRefused(noVersion, mentioning: "CFBundleVersion is missing")
    let missingExecutable = try hostileBundle { try FileManager.default.removeItem(atPath: $0 + "/Notes") }
    try expectRefused(missingExecutable, mentioning: "the executable 'Notes' (CFBundleExecutable) is missing")
    let slashExecutable = try hostileBundle {
      try writeInfo($0, ["CFBundleExecutable": .string("bin/Notes")])
    }
    try expectRefused(slashExecutable, mentioning: "must be a file name directly in the bundle")
    let dirExecutable = try hostileBundle { try writeInfo($0, ["CFBundleExecutable": .string("Base.lproj")]) }
    try expectRefused(dirExecutable, mentioning: "is missing or not a regular file")
  }

  @Test func escapingSymlinksAndSpecialFiles() throws {
    let absolute = try hostileBundle { #expect(symlink("/etc/passwd", $0 + "/passwd") == 0) }
    try expectRefused(absolute, mentioning: "symbolic link 'passwd' points outside the bundle")
    let relative = try hostileBundle { #expect(symlink("../../../etc", $0 + "/Base.lproj/up") == 0) }
    try expectRefused(relative, mentioning: "symbolic link 'Base.lproj/up' points outside the bundle")
    // Each link stays inside on its own, but together they climb out.
    let chained = try hostileBundle { bundle in
      #expect(symlink(".", bundle + "/self") == 0)
      #expect(symlink("self/../escape", bundle + "/out") == 0)
    }
    try expectRefused(chained, mentioning: "symbolic link 'out' points outside the bundle")
    let fifo = try hostileBundle { #expect(mkfifo($0 + "/pipe", 0o644) == 0) }
    try expectRefused(fifo, mentioning: "'pipe' is a FIFO")
    let device = try hostileBundle { bundle in
      if mknod(bundle + "/null", S_IFCHR | 0o644, dev_t((1 << 8) | 3)) != 0 {
        // Without CAP_MKNOD, a socket stands in as the special file.
        _ = mkfifo(bundle + "/null", 0o644)
      }
    }
    try expectRefused(device, mentioning: "'null' is a")
  }

  @Test func bundleThatIsASymlinkOrNotABundle() throws {
    let dir = TemporaryDirectory("hostile")
    try copyTree(fixturePath("bundles/Notes-1.0/Notes.app"), to: dir.url("Real.app"))
    try dir.symlink("Notes.app", to: dir.url("Real.app"))
    try expectRefused(
      HostileBundle(dir: dir, path: dir.url("Notes.app")), mentioning: "the bundle itself is a symbolic link")
    try dir.makeDirectory("Plain")
    try expectRefused(
      HostileBundle(dir: dir, path: dir.url("Plain")), mentioning: "a bundle is a directory named <Name>.app")
  }

  @Test func missingCapabilitiesAreNamed() throws {
    let bundle = try hostileBundle {
      try writeInfo(
        $0,
        [
          "UIRequiredDeviceCapabilities": .array([
            .string("arm64"), .string("driverkit"), .string("ipad-minimum-performance-m1"),
          ])
        ])
    }
    try expectRefused(
      bundle, mentioning: "lacks required capabilities driverkit, ipad-minimum-performance-m1")
    let dictionary = try hostileBundle {
      try writeInfo($0, ["UIRequiredDeviceCapabilities": .dictionary(["wifi": .bool(false)])])
    }
    try expectRefused(dictionary, mentioning: "must not run on a device with wifi")
  }

  @Test func tamperedProvidedSealIsRefused() throws {
    let dir = TemporaryDirectory("hostile")
    try copyTree(fixturePath("bundles/Journal-1.0/Journal.app"), to: dir.url("Journal.app"))
    try Data("#!/bin/sh\necho changed\n".utf8).write(to: URL(fileURLWithPath: dir.url("Journal.app/Journal")))
    try expectRefused(
      HostileBundle(dir: dir, path: dir.url("Journal.app")),
      mentioning: "seal check failed: 'Journal' was modified")
  }

  @Test func setuidBitsAreNeverCopied() throws {
    let bundle = try hostileBundle { #expect(chmod($0 + "/Notes", 0o6755) == 0) }
    let device = Device()
    let id = try withExtendedLifetime(bundle) { try device.install(path: bundle.path) }
    var st = stat()
    #expect(stat(device.root + "/ApplicationRoot/\(id)/Notes.app/Notes", &st) == 0)
    #expect(st.st_mode & 0o7777 == 0o755)
  }
}
