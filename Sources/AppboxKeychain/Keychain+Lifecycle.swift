import AppboxStore

// An item belongs to its access group, not to the app that wrote it. So "the app's items"
// are those in groups no other installed app lists: uninstall and reset delete exactly
// those, and an item in a group another installed app still lists stays for that app.

extension Keychain {
  /// The groups of `client` that none of `others` lists.
  public static func groups(onlyReachableBy client: KeychainClient, others: [KeychainClient]) -> [String] {
    let shared = Set(others.flatMap(\.accessGroups))
    return client.accessGroups.filter { !shared.contains($0) }
  }

  /// Deletes every item in a group of `client` that none of `others` (the other installed
  /// apps) lists, in one transaction; returns how many went. Used by uninstall and reset.
  /// Running it again deletes nothing more, so an interrupted uninstall can simply repeat it.
  @discardableResult
  public func deleteItems(onlyReachableBy client: KeychainClient, others: [KeychainClient]) throws -> Int {
    try requireCurrentIdentities()
    let groups = Self.groups(onlyReachableBy: client, others: others)
    if groups.isEmpty { return 0 }
    return try database.inTransaction(.immediate) {
      try deleteItems(inGroups: groups)
    }
  }

  /// Deletes the items of `groups` inside the caller's transaction; returns how many went.
  func deleteItems(inGroups groups: [String]) throws -> Int {
    let placeholders = groups.indices.map { "?\($0 + 1)" }.joined(separator: ", ")
    try database.prepare("DELETE FROM items WHERE access_group IN (\(placeholders))")
      .execute(groups.map(SQLValue.text))
    return database.changes
  }
}
