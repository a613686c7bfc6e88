import AppboxCore
import AppboxCrypto
import AppboxPlist
import Foundation
import Glibc

/// A home built under a staging name inside ApplicationRoot, ready to be renamed into
/// place: `.staging-<CONTAINER-ID>`.
public struct StagedHome: Sendable {
  public var containerID: String
  public var info: BundleInfo
  public var bundleDirectoryName: String
  /// Hex SHA-256 of the staged bundle's CodeResources.
  public var seal: String
  /// The staged bundle's modes (`BundleModes.text`).
  public var bundleModes: String
  public var stagingName: String { HomeStaging.prefix + containerID }

  func record(installedAt: Date = Date(), uid: UInt32) -> AppRecord {
    AppRecord(
      bundleIdentifier: info.identifier, containerID: containerID, bundleName: info.bundleName,
      displayName: info.displayName, executable: info.executable, version: info.version.description,
      shortVersion: info.shortVersion, teamIdentifier: info.entitlements?.teamIdentifier,
      applicationIdentifier: info.entitlements?.applicationIdentifier,
      keychainAccessGroups: info.entitlements?.keychainAccessGroups ?? [],
      fileSharingEnabled: info.fileSharingEnabled, seal: seal, installedAt: installedAt, updatedAt: nil,
      uid: uid, bundleModes: bundleModes, urlSchemes: info.urlSchemes)
  }
}

/// Builds homes from untrusted bundles, all-or-nothing.
public enum HomeStaging {
  static let prefix = ".staging-"
  static let trashPrefix = ".trash-"

  /// Moves `Documents` and `Library` from `source` into the staging home `staging` with
  /// rename(2), replacing the empty ones staging made (an absent one becomes empty). The
  /// cost does not depend on how much data they hold.
  public static func moveData(from source: FileDescriptor, into staging: FileDescriptor) throws {
    for directory in ["Documents", "Library"] {
      try FileTree.remove(directory, in: staging)
      if try source.statusIfPresent(of: directory) != nil {
        try source.rename(directory, to: directory, in: staging, flags: .noReplace)
      } else {
        try staging.makeDirectory(directory, mode: 0o755)
      }
      CrashPoint.hit("update.moved-one")
    }
  }

  /// Copies and validates the bundle at `bundlePath` into a new staging home inside
  /// ApplicationRoot, seals it, and creates the standard directories. On any failure the
  /// staging directory is removed and nothing is left under ApplicationRoot.
  static func stage(bundleAt bundlePath: String, root: DeviceRoot, device: DeviceIdentity) throws
    -> StagedHome
  {
    var trimmed = bundlePath
    while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed.removeLast() }
    let directoryName = splitPath(trimmed).name
    func invalid(_ message: String) -> ContainerError {
      ContainerError(.invalidBundle, "Invalid bundle '\(directoryName)': \(message)")
    }
    guard directoryName.hasSuffix(".app"), directoryName.count > 4, !directoryName.hasPrefix(".") else {
      throw invalid("a bundle is a directory named <Name>.app")
    }
    var st = stat()
    guard lstat(trimmed, &st) == 0 else {
      let error = SystemError("read bundle", path: trimmed)
      if error.errno == .noEntry { throw ContainerError(.fileNotFound, "No bundle at '\(trimmed)'") }
      throw error
    }
    switch FileStatus(st).type {
    case .directory: break
    case .symlink: throw invalid("the bundle itself is a symbolic link")
    default: throw invalid("not a directory")
    }
    let source = try FileDescriptor.open(trimmed, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    defer { source.close() }

    let containerID = UUID().uuidString
    let applicationRoot = try FileDescriptor.open(root.applicationRoot, O_RDONLY | O_DIRECTORY)
    defer { applicationRoot.close() }
    let stagingName = prefix + containerID
    try applicationRoot.makeDirectory(stagingName, mode: 0o700)
    do {
      let staging = try applicationRoot.open(stagingName, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
      defer { staging.close() }
      let staged = try build(
        staging, from: source, directoryName: directoryName, containerID: containerID, device: device,
        invalid: invalid)
      // One syncfs makes the whole staged tree durable before anything points at it.
      try staging.syncFileSystem()
      return staged
    } catch {
      try? FileTree.remove(stagingName, in: applicationRoot)
      throw error
    }
  }

  private static func build(
    _ staging: FileDescriptor, from source: FileDescriptor, directoryName: String, containerID: String,
    device: DeviceIdentity, invalid: (String) -> ContainerError
  ) throws -> StagedHome {
    try staging.makeDirectory(directoryName, mode: BundleModes.directoryMode)
    let bundle = try staging.open(directoryName, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    defer { bundle.close() }
    try bundle.setPermissions(BundleModes.directoryMode)
    var modes = BundleModes()
    var items = try BundleWalker(bundle: directoryName).walk(source, copyingTo: bundle, modes: &modes)
    func item(_ path: String) -> BundleItem? { items.first { $0.path == path } }

    // Everything below reads the staged copy, which nobody else writes.
    func readFile(_ path: String, label: String) throws -> Data? {
      switch item(path) {
      case nil: return nil
      case .symlink?: throw invalid("\(label) is a symbolic link")
      case .directory?: throw invalid("\(label) is a directory")
      case .file(_, _, let size)?:
        guard size <= 4 << 20 else { throw invalid("\(label) is larger than 4 MiB") }
        let fd = try bundle.open(path, O_RDONLY | O_NOFOLLOW)
        return try fd.closeAfter { Data(try $0.readAll(limit: 4 << 20)) }
      }
    }
    guard let infoPlist = try readFile("Info.plist", label: "Info.plist") else {
      throw invalid("Info.plist is missing")
    }
    let entitlements = try readFile("archived-expanded-entitlements.xcent", label: "the entitlements file")
    let info = try BundleInfo(
      infoPlist: infoPlist, entitlements: entitlements, bundleName: String(directoryName.dropLast(4)),
      bundle: directoryName)
    guard case .file? = item(info.executable) else {
      throw invalid(
        "the executable '\(info.executable)' (CFBundleExecutable) is missing or not a regular file")
    }
    let executableStatus = try bundle.status(of: info.executable)
    guard executableStatus.permissions & 0o111 != 0 else {
      throw invalid("the executable '\(info.executable)' is not executable")
    }
    try info.checkCapabilities(of: device, bundle: directoryName)

    // Verify the seal the bundle carries, or seal it now.
    let sealData: Data
    if let existing = try readFile(CodeResources.path, label: CodeResources.path) {
      let resources = try CodeResources(data: existing, bundle: directoryName)
      if case .broken(let path, let reason) = resources.verify(items) {
        throw ContainerError(
          .sealBroken, "Invalid bundle '\(directoryName)': seal check failed: '\(path)' \(reason)")
      }
      sealData = existing
    } else {
      sealData = CodeResources(items: items).xmlData()
      if item("_CodeSignature") == nil {
        try bundle.makeDirectory("_CodeSignature", mode: BundleModes.directoryMode)
        modes.entries["_CodeSignature"] = BundleModes.directoryMode
      }
      let signature = try bundle.open("_CodeSignature", O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
      try signature.closeAfter { signature in
        try signature.setPermissions(BundleModes.directoryMode)
        try AtomicFile.write(sealData, to: "CodeResources", in: signature, durable: false)
        guard fchmodat(signature.rawValue, "CodeResources", BundleModes.fileMode(executable: false), 0) == 0
        else {
          throw SystemError("change mode", path: CodeResources.path)
        }
      }
      modes.entries[CodeResources.path] = BundleModes.fileMode(executable: false)
      items.append(
        .file(path: CodeResources.path, digest: SHA256.hash(sealData), size: Int64(sealData.count)))
    }

    for directory in Home.standardDirectories { try staging.makeDirectory(directory, mode: 0o755) }
    let metadata = PropertyList.dictionary([
      "MCMMetadataIdentifier": .string(info.identifier),
      "MCMMetadataUUID": .string(containerID),
      "MCMMetadataContentClass": .integer(2),
    ])
    try AtomicFile.write(metadata.binaryData(), to: Home.metadataFile, in: staging, durable: false)
    try staging.setPermissions(0o700)
    return StagedHome(
      containerID: containerID, info: info, bundleDirectoryName: directoryName,
      seal: SHA256.hash(sealData).hex, bundleModes: modes.text)
  }
}
