import AppboxKeychain

extension AppRecord {
  /// The app as the keychain sees it: its entitlements' access groups, then its application
  /// identifier (or its bundle identifier when it has no team).
  public var keychainClient: KeychainClient {
    KeychainClient(
      bundleIdentifier: bundleIdentifier, teamIdentifier: teamIdentifier,
      keychainAccessGroups: keychainAccessGroups)
  }
}

extension DeviceSession {
  /// The device's keychain (`<root>/Keychains`), created with its device key on first use.
  public func openKeychain() throws -> Keychain {
    try Keychain(directory: root.keychains)
  }

  /// Deletes every keychain item only `app` can reach: items in its groups that no other
  /// installed app lists. Uninstall runs it (and recovery repeats it for an interrupted
  /// uninstall); `keychain APP reset` runs it for an installed app. Returns how many went.
  /// Pass `keychain` to use one already opened.
  @discardableResult
  public func deleteKeychainItems(of app: AppRecord, in keychain: Keychain? = nil) throws -> Int {
    let others = try registry.apps().filter { $0.bundleIdentifier != app.bundleIdentifier }
    return try (keychain ?? openKeychain()).deleteItems(
      onlyReachableBy: app.keychainClient, others: others.map(\.keychainClient))
  }
}
