import AppboxKeychain

extension AppRecord {
  /// The app as the keychain sees it: its entitlements' access groups, then its application
  /// identifier; an app without a team gets its own group in the teamless namespace.
  public var keychainClient: KeychainClient {
    KeychainClient(
      bundleIdentifier: bundleIdentifier, teamIdentifier: teamIdentifier,
      keychainAccessGroups: keychainAccessGroups)
  }

  /// Whether the app declares a team (so its groups are in the team namespace).
  var hasTeam: Bool { !(teamIdentifier ?? "").isEmpty }
}

extension DeviceRoot {
  /// The device's keychain (`<root>/Keychains`), created with its device key on first use.
  /// A keychain from before access-group namespaces is migrated first, with the installed
  /// apps of the registry (AppboxKeychain/Keychain+Identity.swift): every path that acts for
  /// an app (the CLI, backups, the broker) opens it here.
  public func openKeychain() throws -> Keychain {
    let keychain = try Keychain(directory: keychains)
    if try keychain.hasLegacyIdentities {
      try Self.migrateIdentities(of: keychain, apps: try Registry(root: self).apps())
    }
    return keychain
  }

  /// Moves the teamless apps' items into their namespace; an item under a name some team app
  /// also has as a group stays the team's.
  static func migrateIdentities(of keychain: Keychain, apps: [AppRecord]) throws {
    let teamGroups = Set(apps.filter(\.hasTeam).flatMap(\.keychainClient.accessGroups))
    try keychain.migrateIdentities(
      teamless: apps.filter { !$0.hasTeam }.map(\.bundleIdentifier), teamGroups: teamGroups)
  }
}

extension DeviceSession {
  /// The device's keychain (`<root>/Keychains`), created with its device key on first use
  /// and migrated to access-group namespaces when it predates them.
  public func openKeychain() throws -> Keychain {
    let keychain = try Keychain(directory: root.keychains)
    if try keychain.hasLegacyIdentities {
      try DeviceRoot.migrateIdentities(of: keychain, apps: registry.apps())
    }
    return keychain
  }

  /// What `app` keeps in the keychain, against its quota (`inspect`).
  public func keychainUsage(of app: AppRecord) throws -> KeychainUsage {
    try openKeychain().usage(for: app.keychainClient)
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
