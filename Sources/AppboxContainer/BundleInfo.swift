import AppboxCore
import AppboxKeychain
import AppboxPlist
import Foundation

/// A bundle version: dotted non-negative integers ("1", "2.0.1"), compared numerically,
/// missing components counting as zero ("1.0" == "1").
public struct BundleVersion: Comparable, Sendable, CustomStringConvertible {
  public let components: [UInt64]
  public let description: String

  public init?(_ text: String) {
    let parts = text.split(separator: ".", omittingEmptySubsequences: false)
    guard !text.isEmpty, parts.count <= 8,
      parts.allSatisfy({
        !$0.isEmpty && $0.count <= 18 && $0.allSatisfy(\.isASCII) && $0.allSatisfy(\.isNumber)
      })
    else { return nil }
    components = parts.compactMap { UInt64($0) }
    description = text
  }

  public static func < (a: BundleVersion, b: BundleVersion) -> Bool {
    for index in 0..<max(a.components.count, b.components.count) {
      let x = index < a.components.count ? a.components[index] : 0
      let y = index < b.components.count ? b.components[index] : 0
      if x != y { return x < y }
    }
    return false
  }

  public static func == (a: BundleVersion, b: BundleVersion) -> Bool { !(a < b) && !(b < a) }
}

/// What `archived-expanded-entitlements.xcent` grants.
public struct Entitlements: Sendable, Equatable {
  public var applicationIdentifier: String?
  public var teamIdentifier: String?
  public var keychainAccessGroups: [String]
  /// App groups (`com.apple.security.application-groups`), in order, without repeats.
  public var applicationGroups: [String] = []
}

/// A bundle's validated `Info.plist` (and entitlements).
public struct BundleInfo: Sendable {
  public var identifier: String
  /// The bundle directory's name without ".app".
  public var bundleName: String
  public var displayName: String
  public var executable: String
  public var version: BundleVersion
  public var shortVersion: String?
  /// Capabilities the device must have, and ones it must not (dictionary form, `false`).
  public var requiredCapabilities: [String]
  public var prohibitedCapabilities: [String]
  public var fileSharingEnabled: Bool
  public var entitlements: Entitlements?
  /// The URL schemes the app claims (`CFBundleURLTypes` → `CFBundleURLSchemes`), lowercased,
  /// in order, without repeats; entries that are not schemes are left out (URLSchemes.swift).
  public var urlSchemes: [String] = []

  /// Checks a bundle identifier: reverse-DNS characters only (letters, digits, '-', '.'),
  /// 1-255 bytes, no empty label (so no "..", no leading or trailing dot).
  public static func isValidIdentifier(_ identifier: String) -> Bool {
    let bytes = Array(identifier.utf8)
    guard (1...255).contains(bytes.count) else { return false }
    let allowed = bytes.allSatisfy { b in
      (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x2D
        || b == 0x2E
    }
    return allowed
      && !identifier.split(separator: ".", omittingEmptySubsequences: false).contains { $0.isEmpty }
  }

  /// Parses and validates Info.plist content (and optional entitlements content).
  /// `bundle` names the bundle in messages.
  init(infoPlist: Data, entitlements entitlementsData: Data?, bundleName: String, bundle: String) throws {
    func invalid(_ message: String) -> ContainerError {
      ContainerError(.invalidBundle, "Invalid bundle '\(bundle)': \(message)")
    }
    let plist: PropertyList
    do {
      plist = try PropertyList.decode(
        infoPlist, limits: PropertyListLimits(maxDepth: 32, maxObjects: 100_000))
    } catch {
      throw invalid("Info.plist is not a valid property list (\(error))")
    }
    guard plist.dictionary != nil else { throw invalid("Info.plist is not a dictionary") }
    guard let identifierValue = plist["CFBundleIdentifier"] else {
      throw invalid("CFBundleIdentifier is missing")
    }
    guard let identifier = identifierValue.string else { throw invalid("CFBundleIdentifier is not a string") }
    guard Self.isValidIdentifier(identifier) else {
      let shown = identifier.count > 60 ? String(identifier.prefix(60)) + "…" : identifier
      throw invalid(
        "CFBundleIdentifier '\(shown.replacingOccurrences(of: "\0", with: "\\0"))' is not a reverse-DNS identifier "
          + "(1-255 letters, digits, '-' and '.')")
    }
    guard !KeychainAccessGroup.isAmbiguous(identifier) else {
      throw invalid(
        "CFBundleIdentifier '\(identifier.prefix(60))' starts with '\(identifier.prefix(11))', which reads as a team "
          + "identifier: it would pass for another team's application identifier; choose a reverse-DNS name")
    }
    guard !AppGroupIdentifier.hasGroupPrefix(identifier) else {
      throw invalid(
        "CFBundleIdentifier '\(identifier.prefix(60))' starts with 'group.', which names app groups, not apps"
      )
    }
    guard let versionText = plist["CFBundleVersion"]?.string else {
      throw invalid("CFBundleVersion is missing or not a string")
    }
    guard let version = BundleVersion(versionText) else {
      throw invalid("CFBundleVersion '\(versionText.prefix(40))' is not dotted integers such as 1.2.3")
    }
    guard let executable = plist["CFBundleExecutable"]?.string else {
      throw invalid("CFBundleExecutable is missing or not a string")
    }
    guard !executable.isEmpty, !executable.contains("/"), executable != ".", executable != "..",
      !executable.utf8.contains(0)
    else {
      throw invalid(
        "CFBundleExecutable '\(executable.prefix(60))' must be a file name directly in the bundle")
    }
    var required: [String] = []
    var prohibited: [String] = []
    if let capabilities = plist["UIRequiredDeviceCapabilities"] {
      if let array = capabilities.array {
        for item in array {
          guard let name = item.string else {
            throw invalid("UIRequiredDeviceCapabilities holds a non-string")
          }
          required.append(name)
        }
      } else if let dictionary = capabilities.dictionary {
        for (name, value) in dictionary.sorted(by: { $0.key < $1.key }) {
          guard let flag = value.bool else {
            throw invalid("UIRequiredDeviceCapabilities['\(name)'] is not a bool")
          }
          if flag { required.append(name) } else { prohibited.append(name) }
        }
      } else {
        throw invalid("UIRequiredDeviceCapabilities is neither an array nor a dictionary")
      }
    }
    var fileSharing = false
    if let value = plist["UIFileSharingEnabled"] {
      guard let flag = value.bool else { throw invalid("UIFileSharingEnabled is not a bool") }
      fileSharing = flag
    }
    self.identifier = identifier
    self.bundleName = bundleName
    self.displayName = plist["CFBundleDisplayName"]?.string ?? plist["CFBundleName"]?.string ?? bundleName
    self.executable = executable
    self.version = version
    self.shortVersion = plist["CFBundleShortVersionString"]?.string
    self.requiredCapabilities = required
    self.prohibitedCapabilities = prohibited
    self.fileSharingEnabled = fileSharing
    self.urlSchemes = URLScheme.claimed(by: plist)
    self.entitlements = try entitlementsData.map {
      try Self.parseEntitlements($0, identifier: identifier, invalid)
    }
  }

  private static func parseEntitlements(
    _ data: Data, identifier: String, _ invalid: (String) -> ContainerError
  ) throws -> Entitlements {
    let plist: PropertyList
    do {
      plist = try PropertyList.decode(data, limits: PropertyListLimits(maxDepth: 16, maxObjects: 10_000))
    } catch {
      throw invalid("archived-expanded-entitlements.xcent is not a valid property list (\(error))")
    }
    guard plist.dictionary != nil else { throw invalid("the entitlements are not a dictionary") }
    let team = plist["com.apple.developer.team-identifier"]?.string
    let applicationID = plist["application-identifier"]?.string
    var groups: [String] = []
    if let value = plist["keychain-access-groups"] {
      guard let array = value.array, array.allSatisfy({ $0.string != nil }) else {
        throw invalid("keychain-access-groups is not an array of strings")
      }
      groups = array.compactMap(\.string)
    }
    var applicationGroups: [String] = []
    if let value = plist[AppGroupIdentifier.entitlement] {
      guard let array = value.array, array.allSatisfy({ $0.string != nil }) else {
        throw invalid("\(AppGroupIdentifier.entitlement) is not an array of strings")
      }
      for group in array.compactMap(\.string) where !applicationGroups.contains(group) {
        guard AppGroupIdentifier.isValid(group) else {
          throw invalid(
            "app group '\(group.prefix(80))' is not 'group.' followed by a reverse-DNS name (such as "
              + "group.com.example.shared: letters, digits, '-' and '.', 255 bytes at most)")
        }
        applicationGroups.append(group)
      }
      guard applicationGroups.count <= AppGroupIdentifier.maximumPerApp else {
        throw invalid(
          "more than \(AppGroupIdentifier.maximumPerApp) app groups in \(AppGroupIdentifier.entitlement)")
      }
      if team == nil && !applicationGroups.isEmpty {
        throw invalid("\(AppGroupIdentifier.entitlement) needs com.apple.developer.team-identifier")
      }
    }
    if let team {
      guard !team.isEmpty, team.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber) }) else {
        throw invalid("team identifier '\(team.prefix(40))' is not alphanumeric")
      }
      if let applicationID, applicationID != "\(team).\(identifier)" {
        throw invalid("application-identifier '\(applicationID.prefix(80))' is not '\(team).\(identifier)'")
      }
      if let stray = groups.first(where: { !$0.hasPrefix(team + ".") || $0.count <= team.count + 1 }) {
        throw invalid("keychain access group '\(stray.prefix(80))' is not prefixed by the team id '\(team).'")
      }
    } else if !groups.isEmpty {
      throw invalid("keychain-access-groups needs com.apple.developer.team-identifier")
    }
    return Entitlements(
      applicationIdentifier: applicationID, teamIdentifier: team, keychainAccessGroups: groups,
      applicationGroups: applicationGroups)
  }

  /// Refuses the bundle when the device lacks a required capability or has a prohibited one.
  public func checkCapabilities(of device: DeviceIdentity, bundle: String) throws {
    let capabilities = device.effectiveCapabilities
    let missing = requiredCapabilities.filter { !capabilities.contains($0) }
    if !missing.isEmpty {
      throw ContainerError(
        .missingCapability,
        "Cannot install '\(bundle)': the device lacks required capabilit\(missing.count == 1 ? "y" : "ies") "
          + missing.joined(separator: ", "))
    }
    let present = prohibitedCapabilities.filter { capabilities.contains($0) }
    if !present.isEmpty {
      throw ContainerError(
        .missingCapability,
        "Cannot install '\(bundle)': it must not run on a device with " + present.joined(separator: ", "))
    }
  }
}
