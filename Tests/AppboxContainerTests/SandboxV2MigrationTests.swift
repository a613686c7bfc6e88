import AppboxCore
import AppboxStore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

@testable import AppboxContainer

/// Devices made before sandbox v2: their registry gets per-app uids, and their seals,
/// which recorded no modes, are checked for unsafe modes and sealed at the next launch.
struct SandboxV2MigrationTests {
  @Test func aVersionOneRegistryGetsDistinctUidsInTheAppRange() throws {
    let dir = TemporaryDirectory("migrate")
    let root = DeviceRoot(path: dir.url("root"))
    try root.createLayout()
    let database = try Database(path: root.registryFile)
    try database.migrate([Registry.migrations[0]])
    for index in 0..<50 {
      try database.execute(
        """
        INSERT INTO apps(bundle_id, container_id, bundle_name, display_name, executable, version, access_groups,
          file_sharing, seal, installed_at) VALUES (?1, ?2, 'A', 'A', 'A', '1.0', '', 0, 'x', 0)
        """, .text("com.example.app\(index)"), .text(UUID().uuidString))
    }
    let registry = try Registry(root: root)
    let apps = try registry.apps()
    #expect(apps.count == 50)
    #expect(Set(apps.map(\.uid)).count == 50)
    #expect(apps.allSatisfy { AppUser.range.contains($0.uid) && $0.bundleModes == nil })
    // app_users knows each, so a reinstall of any of them gets its uid back.
    for app in apps { #expect(try registry.uid(for: app.bundleIdentifier) == app.uid) }
    #expect(!Set(apps.map(\.uid)).contains(try registry.uid(for: "com.example.new")))
  }

  @Test func aLegacySealIsSealedWithItsModesAtTheNextLaunch() throws {
    let device = try TestDevice()
    let session = try device.session(mutating: true)
    try session.registry.database.execute("UPDATE apps SET bundle_modes = NULL")
    let legacy = try session.app("com.example.notes")
    #expect(legacy.bundleModes == nil)
    #expect(try Seal.verify(bundleAt: device.home.bundlePath, expectedDigest: legacy.seal).isValid)
    #expect(try session.launch(legacy, options: SandboxOptions(standardOutput: try devNull())) == 0)
    let sealed = try session.app("com.example.notes")
    #expect(sealed.bundleModes == device.app.bundleModes)
    // From now on a mode change breaks the seal.
    #expect(chmod(device.home.bundlePath + "/Notes", 0o700) == 0)
    let state = try Seal.verify(
      bundleAt: device.home.bundlePath, expectedDigest: sealed.seal, expectedModes: sealed.bundleModes)
    #expect(state == .broken(path: "Notes", reason: "changed mode (sealed 755, now 700)"))
  }

  @Test func aLegacySealRefusesModesNoInstallGives() throws {
    let device = try TestDevice()
    let session = try device.session(mutating: true)
    try session.registry.database.execute("UPDATE apps SET bundle_modes = NULL")
    let legacy = try session.app("com.example.notes")
    for (path, mode) in [("Notes", 0o4755), ("Info.plist", 0o646), ("Base.lproj", 0o777)] {
      let full = device.home.bundlePath + "/" + path
      var st = stat()
      #expect(stat(full, &st) == 0)
      #expect(chmod(full, mode_t(mode)) == 0)
      let state = try Seal.verify(bundleAt: device.home.bundlePath, expectedDigest: legacy.seal)
      #expect(!state.isValid, "\(path) \(String(mode, radix: 8))")
      #expect(state.summary.contains("'\(path)' has mode"), "\(state.summary)")
      #expect(chmod(full, st.st_mode & 0o7777) == 0)
    }
    do {
      #expect(chmod(device.home.bundlePath + "/Notes", 0o4755) == 0)
      _ = try session.launch(legacy)
      Issue.record("launched a setuid bundle")
    } catch let error as ContainerError {
      #expect(error.code == .sealBroken)
    }
    #expect(try session.app("com.example.notes").bundleModes == nil)  // nothing recorded for a broken seal
  }

  @Test func installNormalizesTheBundlesModes() throws {
    let dir = TemporaryDirectory("modes")
    try copyTree(fixturePath("bundles/Notes-1.0/Notes.app"), to: dir.url("Notes.app"))
    #expect(chmod(dir.url("Notes.app/Notes"), 0o700) == 0)
    #expect(chmod(dir.url("Notes.app/Info.plist"), 0o600) == 0)
    #expect(chmod(dir.url("Notes.app/Base.lproj"), 0o700) == 0)
    let root = DeviceRoot(path: dir.url("root"))
    let app = try DeviceSession.open(root: root, mutating: true, creating: true).install(
      bundleAt: dir.url("Notes.app")
    ).app
    let bundle = root.home(app.containerID) + "/Notes.app"
    for (path, mode) in [("Notes", 0o755), ("Info.plist", 0o644), ("Base.lproj", 0o755), (".", 0o755)] {
      var st = stat()
      #expect(lstat(bundle + "/" + path, &st) == 0 && st.st_mode & 0o7777 == mode_t(mode), "\(path)")
    }
    let modes = try #require(app.bundleModes.flatMap(BundleModes.init(text:)))
    #expect(modes.entries["Notes"] == 0o755 && modes.entries["."] == 0o755)
    #expect(modes.entries["_CodeSignature/CodeResources"] == 0o644 && modes.entries["Localized"] == nil)
  }
}

private func devNull() throws -> FileDescriptor { try FileDescriptor.open("/dev/null", O_WRONLY) }
