import Foundation

/// The kind of password an item holds (SecItem's `kSecClass`).
public enum KeychainItemClass: String, Sendable, CaseIterable {
  /// `kSecClassGenericPassword`.
  case generic
  /// `kSecClassInternetPassword`.
  case internet

  /// "generic password", "internet password": for messages.
  public var displayName: String { "\(rawValue) password" }
}

/// One keychain item: what `add` takes and what `find` returns.
///
/// Class, service, account and access group identify the item; label and comment describe it;
/// `data` is the secret.
public struct KeychainItem: Sendable, Equatable {
  public var itemClass: KeychainItemClass
  public var service: String
  public var account: String
  /// Where the item lives. On `add`, nil means the app's first access group; in results it
  /// is always set.
  public var accessGroup: String?
  public var label: String?
  public var comment: String?
  /// The secret. Required on `add`; in results, nil unless the query asked for data.
  public var data: [UInt8]?
  /// Set by the keychain; ignored on `add`.
  public var created: Date?
  /// Set by the keychain; ignored on `add`.
  public var modified: Date?
  /// When the item can be read (`kSecAttrAccessible`).
  public var accessibility: KeychainAccessibility

  public init(
    itemClass: KeychainItemClass = .generic, service: String, account: String, accessGroup: String? = nil,
    label: String? = nil, comment: String? = nil, data: [UInt8]? = nil, created: Date? = nil,
    modified: Date? = nil, accessibility: KeychainAccessibility = .whenUnlocked
  ) {
    self.accessibility = accessibility
    self.itemClass = itemClass
    self.service = service
    self.account = account
    self.accessGroup = accessGroup
    self.label = label
    self.comment = comment
    self.data = data
    self.created = created
    self.modified = modified
  }

  /// "generic password 'svc' / 'acct' in group 'G'": names the item in messages, never its secret.
  public var summary: String {
    var text = "\(itemClass.displayName) service '\(service)' account '\(account)'"
    if let accessGroup { text += " in group '\(accessGroup)'" }
    return text
  }
}

/// Which items a `find`, `update` or `delete` applies to: every attribute that is set must
/// match; unset attributes match anything. The access group, when set, must be one the app
/// is entitled to; unset, the search covers all of the app's groups.
public struct KeychainQuery: Sendable, Equatable {
  /// How many results `find` returns (SecItem's `kSecMatchLimit`).
  public enum Limit: Sendable, Equatable {
    /// The first match, in the order of the app's access groups.
    case one
    /// Every match.
    case all
  }

  public var itemClass: KeychainItemClass?
  public var service: String?
  public var account: String?
  public var accessGroup: String?
  public var label: String?
  public var comment: String?
  /// Only items of this accessibility class (SecItem's `kSecAttrAccessible` in a query).
  public var accessibility: KeychainAccessibility?
  /// For `find` only.
  public var limit: Limit
  /// For `find` only: whether results carry `data` (SecItem's `kSecReturnData`); attributes
  /// are always returned.
  public var returnsData: Bool

  public init(
    itemClass: KeychainItemClass? = nil, service: String? = nil, account: String? = nil,
    accessGroup: String? = nil, label: String? = nil, comment: String? = nil,
    accessibility: KeychainAccessibility? = nil, limit: Limit = .all, returnsData: Bool = false
  ) {
    self.accessibility = accessibility
    self.itemClass = itemClass
    self.service = service
    self.account = account
    self.accessGroup = accessGroup
    self.label = label
    self.comment = comment
    self.limit = limit
    self.returnsData = returnsData
  }
}

/// What `update` changes; nil leaves an attribute as it is (an empty string clears a label
/// or comment).
public struct KeychainChanges: Sendable, Equatable {
  public var data: [UInt8]?
  public var label: String?
  public var comment: String?

  public init(data: [UInt8]? = nil, label: String? = nil, comment: String? = nil) {
    self.data = data
    self.label = label
    self.comment = comment
  }

  public var isEmpty: Bool { data == nil && label == nil && comment == nil }
}

/// An app as the keychain sees it: a name for messages and the access groups it may use.
public struct KeychainClient: Sendable, Equatable {
  /// The app's bundle identifier, used in messages.
  public var name: String
  /// The groups the app may read and write, in order; the first is where `add` puts an item
  /// that names no group.
  public var accessGroups: [String]
  /// The name this app's only group had before access groups had namespaces (its bare bundle
  /// identifier, for an app without a team), under which exports made then carry its items;
  /// nil when there is none, or when that name is ambiguous (see Keychain+Identity.swift).
  public var legacyGroup: String?

  public init(name: String, accessGroups: [String], legacyGroup: String? = nil) {
    self.name = name
    var unique: [String] = []
    for group in accessGroups where !unique.contains(group) { unique.append(group) }
    self.accessGroups = unique
    self.legacyGroup = legacyGroup
  }

  /// The platform rule: the entitlements' `keychain-access-groups` (each prefixed by the
  /// team id), then the application identifier `TEAMID.bundle.id`. An app without a team gets
  /// one group of its own in the teamless namespace (`KeychainAccessGroup.teamless`), which no
  /// team-prefixed group can equal. Groups not prefixed by the app's own team are dropped (the
  /// installer refuses such bundles; this keeps the rule true for any caller), a team
  /// identifier that is not letters and digits gets no group at all, and the application
  /// identifier is built from the team rather than taken from the entitlements, which the
  /// installer checks against the same `TEAMID.bundle.id` only when a team is given.
  public init(bundleIdentifier: String, teamIdentifier: String?, keychainAccessGroups: [String]) {
    guard let team = teamIdentifier, !team.isEmpty else {
      self.init(
        name: bundleIdentifier, accessGroups: [KeychainAccessGroup.teamless(bundleIdentifier)],
        legacyGroup: KeychainAccessGroup.isAmbiguous(bundleIdentifier) ? nil : bundleIdentifier)
      return
    }
    guard KeychainAccessGroup.isValidTeam(team) else {
      self.init(name: bundleIdentifier, accessGroups: [])
      return
    }
    let prefix = team + "."
    let groups = keychainAccessGroups.filter { $0.hasPrefix(prefix) && $0.count > prefix.count }
    self.init(name: bundleIdentifier, accessGroups: groups + [prefix + bundleIdentifier])
  }

  /// Whether the app may use `group`.
  public func isEntitled(to group: String) -> Bool { accessGroups.contains(group) }
}

/// What `importItems` did.
public enum KeychainImportResult: Sendable, Equatable {
  /// The export was made on this device: its items replaced those of its access groups.
  case restored(count: Int)
  /// The export was sealed under another device's key: nothing was restored.
  case otherDevice(reason: String)
  /// The export came from another device through an encrypted repository: its portable items
  /// (not this-device-only) were restored; `notes` say what was not.
  case restoredFromElsewhere(count: Int, notes: [String])
}
