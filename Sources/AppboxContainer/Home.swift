import AppboxCore
import Foundation

/// The standard locations of a home.
public enum HomeLocation: String, CaseIterable, Sendable {
  case data, bundle, documents, library, preferences, caches, tmp

  /// The location relative to the home ("" for the home itself).
  public func relativePath(bundleDirectoryName: String) -> String {
    switch self {
    case .data: return ""
    case .bundle: return bundleDirectoryName
    case .documents: return "Documents"
    case .library: return "Library"
    case .preferences: return "Library/Preferences"
    case .caches: return "Library/Caches"
    case .tmp: return "tmp"
    }
  }
}

/// The private file-system home of one installed app.
public struct Home: Sendable {
  public let root: DeviceRoot
  public let app: AppRecord

  public init(root: DeviceRoot, app: AppRecord) {
    self.root = root
    self.app = app
  }

  public var path: String { root.home(app.containerID) }
  public var bundlePath: String { path + "/" + app.bundleDirectoryName }
  public var preferencesFile: String { path + "/Library/Preferences/\(app.bundleIdentifier).plist" }

  /// The absolute path of a standard location.
  public func path(of location: HomeLocation) -> String {
    let relative = location.relativePath(bundleDirectoryName: app.bundleDirectoryName)
    return relative.isEmpty ? path : path + "/" + relative
  }

  /// The file the simulator keeps at the top of each home to say whose it is.
  public static let metadataFile = ".com.apple.mobile_container_manager.metadata.plist"

  /// The directories every home has (created at install), in creation order.
  public static let standardDirectories = [
    "Documents", "Library", "Library/Preferences", "Library/Caches", "tmp",
  ]
}

/// The name of the extended attribute that marks a file or folder "exclude from backup".
public let excludeFromBackupAttribute = "user.appbox.exclude-from-backup"
