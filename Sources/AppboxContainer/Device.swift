import AppboxCore
import AppboxKeychain
import AppboxPlist
import Foundation

/// A device's identity, kept in `<root>/device.plist`.
public struct DeviceIdentity: Sendable, Equatable {
  /// An uppercase UUID, fixed when the device is created.
  public var udid: String
  public var name: String
  public var capabilities: [String]
  public var created: Date

  /// The UIRequiredDeviceCapabilities keys the platform documents (Apple's "Required Device
  /// Capabilities" page, which lists each model's): a `device init --capabilities` key outside
  /// this list is accepted, with a warning.
  public static let documentedCapabilities: Set<String> = [
    "accelerometer", "arkit", "armv6", "armv7", "arm64", "arm64e", "auto-focus-camera", "bluetooth-le",
    "camera-flash", "driverkit", "front-facing-camera", "gamekit", "gps", "gyroscope", "healthkit",
    "ipad-minimum-performance-m1", "iphone-ipad-minimum-performance-a12", "iphone-performance-gaming-tier",
    "location-services", "magnetometer", "metal", "microphone", "nfc", "opengles-1", "opengles-2",
    "opengles-3", "peer-peer", "sms", "still-camera", "telephony", "video-camera", "wifi",
  ]

  /// A current iPhone's (an iPhone 15 Pro): every documented key but the iPad-only ones
  /// (`driverkit`, `ipad-minimum-performance-m1`) and `armv6`, whose code no 64-bit device runs.
  public static let defaultCapabilities = [
    "accelerometer", "arkit", "armv7", "arm64", "arm64e", "auto-focus-camera", "bluetooth-le", "camera-flash",
    "front-facing-camera", "gamekit", "gps", "gyroscope", "healthkit", "iphone-ipad-minimum-performance-a12",
    "iphone-performance-gaming-tier", "location-services", "magnetometer", "metal", "microphone", "nfc",
    "opengles-1", "opengles-2", "opengles-3", "peer-peer", "sms", "still-camera", "telephony", "video-camera",
    "wifi",
  ]

  /// What the device satisfies: its capabilities and what they imply. As on the platform, an
  /// arm64 device satisfies `armv7` (apps built for both list it).
  public var effectiveCapabilities: Set<String> {
    var result = Set(capabilities)
    if result.contains("arm64") || result.contains("arm64e") { result.insert("armv7") }
    if result.contains("arm64e") { result.insert("arm64") }
    return result
  }

  public init(udid: String = UUID().uuidString, name: String, capabilities: [String], created: Date = Date())
  {
    self.udid = udid
    self.name = name
    self.capabilities = capabilities
    self.created = Date(timeIntervalSince1970: created.timeIntervalSince1970.rounded(.down))
  }

  var propertyList: PropertyList {
    .dictionary([
      "UDID": .string(udid),
      "DeviceName": .string(name),
      "Capabilities": .array(capabilities.map(PropertyList.string)),
      "Created": .date(created),
    ])
  }

  init(propertyList plist: PropertyList, path: String) throws {
    guard let udid = plist["UDID"]?.string, UUID(uuidString: udid) != nil,
      let name = plist["DeviceName"]?.string,
      let capabilities = plist["Capabilities"]?.array?.compactMap(\.string)
    else {
      throw ContainerError(
        .invalidDevice, "Device identity '\(path)' is missing UDID, DeviceName or Capabilities")
    }
    self.init(udid: udid, name: name, capabilities: capabilities, created: plist["Created"]?.date ?? Date())
  }
}

extension DeviceRoot {
  /// Reads the device identity, or nil when the root has none yet.
  public func identityIfPresent() throws -> DeviceIdentity? {
    guard let bytes = FileManager.default.contents(atPath: deviceFile) else {
      if FileManager.default.fileExists(atPath: deviceFile) {
        throw ContainerError(.invalidDevice, "Unable to read device identity '\(deviceFile)'")
      }
      return nil
    }
    let plist: PropertyList
    do {
      plist = try PropertyList.decode(bytes)
    } catch {
      throw ContainerError(
        .invalidDevice, "Device identity '\(deviceFile)' is not a valid property list: \(error)")
    }
    return try DeviceIdentity(propertyList: plist, path: deviceFile)
  }

  /// Writes `identity` to `device.plist` atomically.
  public func saveIdentity(_ identity: DeviceIdentity) throws {
    try AtomicFile.write(identity.propertyList.xmlData(), toPath: deviceFile, mode: 0o644)
  }

  /// Fails with `.noDevice` (exit 66) unless the root holds a device identity.
  public func requireDevice() throws {
    guard try identityIfPresent() != nil else {
      throw ContainerError(.noDevice, "No device at \(path) (appbox device init creates one)")
    }
  }

  /// The device; with `creating`, the root is made with a fresh identity when it has none,
  /// otherwise that is `.noDevice` and nothing is written.
  public func prepare(creating: Bool = false, lockWait: LockWait = .none) throws -> DeviceIdentity {
    if !creating { try requireDevice() }
    try createLayout()
    if let identity = try identityIfPresent() { return identity }
    let lock = try self.lock(lockWait: lockWait)
    defer { withExtendedLifetime(lock) {} }
    if let identity = try identityIfPresent() { return identity }
    let host = ProcessInfo.processInfo.hostName.split(separator: ".").first.map(String.init) ?? "linux"
    let identity = DeviceIdentity(
      name: "appbox device (\(host))", capabilities: DeviceIdentity.defaultCapabilities)
    // The device key is born with the device: made before the identity, so a root with an
    // identity always has one (a root made before the keychain gets it on first keychain use).
    try Keychain.prepare(directory: keychains)
    try saveIdentity(identity)
    return identity
  }
}
