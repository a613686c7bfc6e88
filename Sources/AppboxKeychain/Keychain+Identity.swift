// Whose an access group is: two namespaces, so that no app can name another app's group.
//
//   team       "TEAMID.rest"        TEAMID letters and digits, rest not empty: an app's
//                                   application identifier, and the groups its entitlements list
//   teamless   "noteam:bundle.id"   the only group of an app that declares no team
//
// ':' is in no team identifier and in no bundle identifier (reverse-DNS: letters, digits, '-'
// and '.'). So a team group starts with letters and digits followed by '.', and a teamless one
// with "noteam:": the two can never be equal, whatever bundle identifier an app declares.
// Before (keychain schema 2) a teamless app's group was its bare bundle identifier, and an app
// without a team whose bundle identifier was "ABCDE12345.com.example.notes" shared Notes'
// private group; "ABCDE12345.shared" shared the team's.
//
// Ambiguous bundle identifiers: one whose first label reads as a team identifier (ten
// uppercase letters and digits, the platform's form) would look like another team's
// application identifier wherever a person reads it; the installer refuses them (exit 65),
// and the migration below never hands such an app a group.
//
// Migration (schema 3). The schema step cannot tell the two kinds of row apart (a team group
// "ABCDE12345.x" and a teamless app's bare "ABCDE12345.x" are the same text), so it only
// marks a keychain that held items as `legacy` (settings.identities), and nothing acts for an
// app until `migrateIdentities` has run with the installed apps (DeviceRoot.openKeychain does,
// on the first use after the upgrade). In one transaction it moves the rows of each installed
// teamless app from its bare bundle identifier to its teamless group, unless that name is
// ambiguous or is a group of an installed team app: those rows stay where they are, the
// team's (which of them an impostor wrote cannot be known; the team's claim is the one the
// installer checked against entitlements). A moved row keeps the AES-GCM associated data it
// was sealed with: `sealed_group` names the group it was sealed under, until it is sealed
// again (an update of its data, or setting a passcode), which binds it to its group anew.
// Exports made before carry the bare name too: `importItems` reads them through the client's
// `legacyGroup`.

import AppboxStore

/// The namespaces of access groups (see Keychain+Identity.swift).
public enum KeychainAccessGroup {
  /// What starts the group of an app without a team.
  public static let teamlessPrefix = "noteam:"

  /// The only group of an app without a team.
  public static func teamless(_ bundleIdentifier: String) -> String { teamlessPrefix + bundleIdentifier }

  /// Whether `team` can prefix groups: ASCII letters and digits only, not empty.
  public static func isValidTeam(_ team: String) -> Bool {
    !team.isEmpty && team.utf8.allSatisfy { isAlphanumeric($0) }
  }

  /// Whether `bundleIdentifier`'s first label reads as a team identifier (ten uppercase ASCII
  /// letters and digits), so that it looks like another team's application identifier.
  public static func isAmbiguous(_ bundleIdentifier: String) -> Bool {
    let bytes = Array(bundleIdentifier.utf8)
    guard let dot = bytes.firstIndex(of: UInt8(ascii: ".")), dot == 10 else { return false }
    return bytes[..<dot].allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x5A) }
  }

  private static func isAlphanumeric(_ byte: UInt8) -> Bool {
    (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
  }
}

/// What `migrateIdentities` did.
public struct KeychainIdentityMigration: Sendable, Equatable {
  /// Items moved to their app's teamless group.
  public var moved: Int
  /// Teamless apps whose items stayed with the team group of the same name (or whose
  /// bundle identifier is ambiguous), by bundle identifier.
  public var keptForTeams: [String]
}

extension Keychain {
  /// Whether the keychain still holds rows from before the namespaces (see above).
  public var hasLegacyIdentities: Bool {
    get throws {
      if identitiesChecked { return false }
      let legacy = try database.scalar("SELECT 1 FROM settings WHERE name = 'identities'") != nil
      identitiesChecked = !legacy
      return legacy
    }
  }

  /// Refuses to act for an app while rows from before the namespaces remain (`.unavailable`).
  func requireCurrentIdentities() throws {
    guard try hasLegacyIdentities else { return }
    throw KeychainError(
      .migrationPending,
      "The keychain predates separate team and teamless access groups and has not been migrated yet; "
        + "any appbox keychain command migrates it")
  }

  /// Moves the rows of the installed teamless apps `teamless` (bundle identifiers) to their
  /// teamless groups, except those named like one of `teamGroups` (every group of the
  /// installed apps with a team) or ambiguous; then the keychain is current. Does nothing
  /// when it is current already. One transaction.
  @discardableResult
  public func migrateIdentities(teamless: [String], teamGroups: Set<String>) throws
    -> KeychainIdentityMigration?
  {
    try database.inTransaction(.immediate) {
      guard try database.scalar("SELECT 1 FROM settings WHERE name = 'identities'") != nil else {
        return nil
      }
      var result = KeychainIdentityMigration(moved: 0, keptForTeams: [])
      for bundleIdentifier in Set(teamless).sorted() {
        if teamGroups.contains(bundleIdentifier) || KeychainAccessGroup.isAmbiguous(bundleIdentifier) {
          result.keptForTeams.append(bundleIdentifier)
          continue
        }
        try database.execute(
          "UPDATE items SET access_group = ?2, sealed_group = ?1 WHERE access_group = ?1",
          .text(bundleIdentifier), .text(KeychainAccessGroup.teamless(bundleIdentifier)))
        result.moved += database.changes
      }
      try database.execute("DELETE FROM settings WHERE name = 'identities'")
      identitiesChecked = true
      return result
    }
  }

  /// The groups of an export as this client's groups now: its legacy name, when it has one,
  /// stands for its teamless group.
  func currentGroup(_ exported: String, for client: KeychainClient) -> String {
    guard let legacy = client.legacyGroup, exported == legacy, client.accessGroups.count == 1 else {
      return exported
    }
    return client.accessGroups[0]
  }
}
