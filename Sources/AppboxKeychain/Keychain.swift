import AppboxCore
import AppboxStore
import Foundation
import Glibc

/// A device's keychain: `keychain.db` and `device.key` in one private directory
/// (`<root>/Keychains`), with a SecItem-like API.
///
/// Every call names the app it acts for (`KeychainClient`): the app sees only items in its
/// access groups, and naming a group it is not entitled to is `.missingEntitlement`. Each
/// change is one IMMEDIATE transaction, so concurrent writers (other processes included)
/// queue on SQLite's busy timeout instead of failing or losing updates.
///
/// Like `Database`, a `Keychain` is not thread-safe: open one per thread or process.
public final class Keychain {
  /// The database's file name inside the keychain directory.
  public static let databaseName = "keychain.db"
  /// The largest secret an item may hold.
  public static let maximumDataByteCount = 1 << 20
  /// The largest service, account, access group, label or comment, in UTF-8 bytes.
  public static let maximumAttributeByteCount = 4096

  /// The keychain directory, as given.
  public let directory: String
  let database: Database
  let key: DeviceKey
  /// Class secrets read so far (see Accessibility.swift).
  var classSecrets: [KeychainClassSecret: [UInt8]] = [:]
  /// Set once the keychain is known to hold no rows from before access-group namespaces.
  var identitiesChecked = false
  /// What one app may keep (Keychain+Quota.swift).
  public var quota = KeychainQuota.standard

  static let migrations = [
    """
    CREATE TABLE items(
      id INTEGER PRIMARY KEY,
      class TEXT NOT NULL CHECK (class IN ('generic', 'internet')),
      service TEXT NOT NULL,
      account TEXT NOT NULL,
      access_group TEXT NOT NULL,
      created INTEGER NOT NULL,
      modified INTEGER NOT NULL,
      sealed BLOB NOT NULL,
      UNIQUE (class, service, account, access_group)
    );
    CREATE INDEX items_by_group ON items(access_group);
    """,
    // Accessibility classes: rows from before them were sealed under the device key alone
    // (key version 0) and count as when-unlocked.
    """
    ALTER TABLE items ADD COLUMN accessible TEXT NOT NULL DEFAULT 'when-unlocked';
    ALTER TABLE items ADD COLUMN key_version INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE class_secrets(name TEXT PRIMARY KEY, identifier BLOB NOT NULL);
    """,
    // Access-group namespaces (Keychain+Identity.swift): a teamless app's group moves from its
    // bare bundle identifier to "noteam:…" once the installed apps are known; until then the
    // keychain is marked legacy. `sealed_group`: the group a moved row was sealed under.
    """
    ALTER TABLE items ADD COLUMN sealed_group TEXT;
    CREATE TABLE settings(name TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);
    INSERT INTO settings(name, value) SELECT 'identities', 'legacy' WHERE EXISTS (SELECT 1 FROM items);
    """,
  ]

  /// Opens the keychain in `directory`, creating the directory (0700), the database (0600,
  /// WAL) and the device key (0600) on first use. The parent directory must exist.
  ///
  /// A missing key is created only while the store holds no item: items sealed under a lost
  /// key can never be read again, and a new key must not hide that.
  public init(directory: String) throws {
    self.directory = directory
    let handle = try KeychainDirectory.open(directory)
    defer { handle.close() }
    // Create the file ourselves so it starts 0600; SQLite gives its -wal and -shm the same mode.
    let databasePath = directory + "/" + Self.databaseName
    try handle.open(Self.databaseName, O_RDWR | O_CREAT | O_NOFOLLOW, mode: 0o600, displayPath: databasePath)
      .close()
    database = try Database(path: databasePath)
    try database.setJournalModeWAL()
    try database.migrate(Self.migrations)
    let keyPath = directory + "/" + DeviceKey.fileName
    if let key = try DeviceKey.load(in: handle, displayPath: keyPath) {
      self.key = key
    } else {
      let count = try database.scalar("SELECT count(*) FROM items")
      guard count == .integer(0) else {
        throw KeychainError(
          .corrupt, "The device key is missing but the keychain holds items that only it can decrypt",
          path: keyPath)
      }
      key = try DeviceKey.loadOrCreate(in: handle, displayPath: keyPath)
    }
    try preparePermanentClassSecrets()
  }

  /// A key bound to this device, for wrapping the file protection class keys: derived from
  /// the device key (HKDF, its own purpose), so a copied root plus a passcode is not enough
  /// without `device.key`.
  public var deviceKeybagKey: [UInt8] { key.keybagKey }

  /// Makes sure the keychain in `directory` exists with its device key (device creation).
  public static func prepare(directory: String) throws {
    _ = try Keychain(directory: directory)
  }

  // MARK: SecItem

  /// Adds `item` for `client` (SecItemAdd) and returns its stored attributes. The item goes
  /// to `item.accessGroup`, which the client must be entitled to, or else to the client's
  /// first group. An item with the same class, service, account and group is `.duplicateItem`.
  @discardableResult
  public func add(_ item: KeychainItem, for client: KeychainClient) throws -> KeychainItem {
    try Self.checkIdentity(service: item.service, account: item.account)
    try Self.checkDescription(label: item.label, comment: item.comment)
    guard let data = item.data else {
      throw KeychainError(.invalidParameter, "An item needs data to be added")
    }
    try Self.checkData(data)
    try requireCurrentIdentities()
    let group = try accessGroup(item.accessGroup, for: client)
    var stored = item
    stored.accessGroup = group
    stored.data = nil
    let now = Self.now()
    stored.created = now
    stored.modified = now
    let associatedData = SealedSecret.associatedData(
      itemClass: item.itemClass, service: item.service, account: item.account, accessGroup: group)
    let sealed = try SealedSecret(data: data, label: item.label, comment: item.comment)
      .seal(key: try itemKey(for: item.accessibility), associatedData: associatedData)
    try database.inTransaction(.immediate) {
      let existing = try database.scalar(
        "SELECT 1 FROM items WHERE class = ?1 AND service = ?2 AND account = ?3 AND access_group = ?4",
        .text(item.itemClass.rawValue), .text(item.service), .text(item.account), .text(group))
      if existing != nil {
        throw KeychainError(.duplicateItem, "The keychain already holds a \(stored.summary)")
      }
      try checkQuota(
        for: client, adding: 1,
        bytes: Int64(sealed.count + item.service.utf8.count + item.account.utf8.count), doing: "add")
      try database.execute(
        """
        INSERT INTO items(class, service, account, access_group, created, modified, sealed, accessible,
          key_version)
        VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6, ?7, 1)
        """,
        .text(item.itemClass.rawValue), .text(item.service), .text(item.account), .text(group),
        .integer(Self.milliseconds(now)), .blob(sealed), .text(item.accessibility.rawValue))
    }
    return stored
  }

  /// The items matching `query` that `client` can see (SecItemCopyMatching), in the order of
  /// the client's access groups, then by service, account and class; only the first with
  /// `limit: .one`. With `returnsData` they carry their secret. No match is `.itemNotFound`.
  public func find(_ query: KeychainQuery, for client: KeychainClient) throws -> [KeychainItem] {
    let matches = try rows(matching: query, for: client, opening: true)
    guard !matches.isEmpty else { throw notFound(query, client) }
    let selected = query.limit == .one ? Array(matches.prefix(1)) : matches
    return selected.map { $0.item(includingData: query.returnsData) }
  }

  /// Every item `client` can see, attributes only (never data); empty when there is none.
  /// Labels and comments are sealed with the secret: items of a class that is unavailable
  /// right now (a locked device) are listed without them.
  public func items(for client: KeychainClient) throws -> [KeychainItem] {
    try rows(matching: KeychainQuery(), for: client, opening: true, skippingUnavailable: true).map {
      $0.item(includingData: false)
    }
  }

  /// Applies `changes` to every item matching `query` that `client` can see (SecItemUpdate),
  /// re-sealing each under a fresh nonce, and returns how many changed. No match is
  /// `.itemNotFound`; no change at all is `.invalidParameter`.
  @discardableResult
  public func update(_ query: KeychainQuery, changes: KeychainChanges, for client: KeychainClient) throws
    -> Int
  {
    guard !changes.isEmpty else {
      throw KeychainError(.invalidParameter, "Nothing to update: give new data, a label or a comment")
    }
    if let data = changes.data { try Self.checkData(data) }
    try Self.checkDescription(label: changes.label, comment: changes.comment)
    return try database.inTransaction(.immediate) {
      let matches = try rows(matching: query, for: client, opening: true)
      guard !matches.isEmpty else { throw notFound(query, client) }
      let now = Self.milliseconds(Self.now())
      var resealed: [(id: Int64, sealed: [UInt8])] = []
      var growth: Int64 = 0
      for row in matches {
        var secret = row.secret!
        if let data = changes.data { secret.data = data }
        if let label = changes.label { secret.label = label }
        if let comment = changes.comment { secret.comment = comment }
        // Sealed again, so bound to the group the row is in now (a migrated row may not be).
        let sealed = try secret.seal(
          key: try itemKey(for: row.accessibility), associatedData: row.currentAssociatedData)
        resealed.append((row.id, sealed))
        growth += Int64(sealed.count - row.sealed.count)
      }
      if growth > 0 { try checkQuota(for: client, adding: 0, bytes: growth, doing: "update") }
      for (id, sealed) in resealed {
        try database.execute(
          "UPDATE items SET sealed = ?1, modified = ?2, key_version = 1, sealed_group = NULL WHERE id = ?3",
          .blob(sealed), .integer(now), .integer(id))
      }
      return matches.count
    }
  }

  /// Deletes every item matching `query` that `client` can see (SecItemDelete) and returns
  /// how many went. No match is `.itemNotFound`.
  @discardableResult
  public func delete(_ query: KeychainQuery, for client: KeychainClient) throws -> Int {
    try database.inTransaction(.immediate) {
      // Label and comment are sealed: only a query on them needs to open rows. Otherwise a
      // row that no longer decrypts can still be deleted.
      let opening = query.label != nil || query.comment != nil
      let matches = try rows(matching: query, for: client, opening: opening)
      guard !matches.isEmpty else { throw notFound(query, client) }
      for row in matches {
        try database.execute("DELETE FROM items WHERE id = ?1", .integer(row.id))
      }
      return matches.count
    }
  }

  // MARK: Matching

  /// The group `requested` after checking the entitlement, or the client's first group.
  func accessGroup(_ requested: String?, for client: KeychainClient) throws -> String {
    if let requested {
      try Self.checkAttribute(requested, name: "access group")
      guard client.isEntitled(to: requested) else { throw missingEntitlement(requested, client) }
      return requested
    }
    guard let first = client.accessGroups.first else {
      throw KeychainError(.missingEntitlement, "\(client.name) has no keychain access group")
    }
    return first
  }

  func missingEntitlement(_ group: String, _ client: KeychainClient) -> KeychainError {
    KeychainError(
      .missingEntitlement,
      "\(client.name) is not entitled to keychain access group '\(group)' (its groups: "
        + "\(client.accessGroups.joined(separator: ", ")))")
  }

  private func notFound(_ query: KeychainQuery, _ client: KeychainClient) -> KeychainError {
    var parts: [String] = []
    if let itemClass = query.itemClass { parts.append(itemClass.displayName) }
    if let service = query.service { parts.append("service '\(service)'") }
    if let account = query.account { parts.append("account '\(account)'") }
    if let label = query.label { parts.append("label '\(label)'") }
    if let comment = query.comment { parts.append("comment '\(comment)'") }
    if let accessibility = query.accessibility { parts.append("accessibility \(accessibility.rawValue)") }
    let groups = query.accessGroup.map { "group '\($0)'" } ?? "the groups of \(client.name)"
    let what = parts.isEmpty ? "No keychain item" : "No keychain item with " + parts.joined(separator: ", ")
    return KeychainError(.itemNotFound, "\(what) in \(groups)")
  }

  /// The rows `query` selects among the groups `client` may search, sorted for results. With
  /// `opening`, each row's sealed value is decrypted (needed for label, comment and data).
  func rows(
    matching query: KeychainQuery, for client: KeychainClient, opening: Bool,
    skippingUnavailable: Bool = false
  ) throws -> [Row] {
    for (value, name) in [(query.service, "service"), (query.account, "account")] {
      if let value { try Self.checkAttribute(value, name: name) }
    }
    try requireCurrentIdentities()
    let groups = try query.accessGroup.map { [try accessGroup($0, for: client)] } ?? client.accessGroups
    return try rows(
      inGroups: groups, query: query, opening: opening, skippingUnavailable: skippingUnavailable)
  }

  /// The rows in `groups` (in that order of preference) that match `query`'s attributes.
  /// With `skippingUnavailable`, rows whose class key is unavailable (a locked device) stay
  /// unopened instead of failing the whole call.
  func rows(
    inGroups groups: [String], query: KeychainQuery = KeychainQuery(), opening: Bool,
    skippingUnavailable: Bool = false
  ) throws -> [Row] {
    if groups.isEmpty { return [] }
    var values = groups.map(SQLValue.text)
    var sql = """
      SELECT \(Row.columns)
      FROM items
      WHERE access_group IN (\(groups.indices.map { "?\($0 + 1)" }.joined(separator: ", ")))
      """
    for (column, value) in [
      ("class", query.itemClass?.rawValue), ("service", query.service), ("account", query.account),
      ("accessible", query.accessibility?.rawValue),
    ] {
      if let value {
        values.append(.text(value))
        sql += " AND \(column) = ?\(values.count)"
      }
    }
    let statement = try database.prepare(sql)
    try statement.bind(values)
    var result = try statement.rows { statement in
      try Row(statement, path: database.path)
    }
    if opening {
      for index in result.indices {
        let rowKey: [UInt8]
        do {
          rowKey = result[index].keyVersion == 0 ? key.itemKey : try itemKey(for: result[index].accessibility)
        } catch let error as KeychainError where skippingUnavailable && error.kind == .unavailable {
          continue
        }
        result[index].secret = try SealedSecret.open(
          result[index].sealed, key: rowKey, associatedData: result[index].associatedData,
          item: result[index].item(includingData: false).summary)
      }
      result.removeAll { row in
        (query.label.map { $0 != row.secret?.label } ?? false)
          || (query.comment.map { $0 != row.secret?.comment } ?? false)
      }
    }
    let rank = Dictionary(groups.enumerated().map { ($1, $0) }, uniquingKeysWith: { first, _ in first })
    return result.sorted {
      (rank[$0.accessGroup] ?? 0, $0.service, $0.account, $0.itemClass.rawValue)
        < (rank[$1.accessGroup] ?? 0, $1.service, $1.account, $1.itemClass.rawValue)
    }
  }

  // MARK: Checks and time

  static func checkIdentity(service: String, account: String) throws {
    try checkAttribute(service, name: "service")
    try checkAttribute(account, name: "account")
  }

  static func checkAttribute(_ value: String, name: String, allowEmpty: Bool = false) throws {
    if value.isEmpty && !allowEmpty {
      throw KeychainError(.invalidParameter, "The keychain item's \(name) must not be empty")
    }
    guard value.utf8.count <= maximumAttributeByteCount, !value.utf8.contains(0) else {
      throw KeychainError(
        .invalidParameter,
        "The keychain item's \(name) must be at most \(maximumAttributeByteCount) bytes without NUL")
    }
  }

  static func checkDescription(label: String?, comment: String?) throws {
    if let label { try checkAttribute(label, name: "label", allowEmpty: true) }
    if let comment { try checkAttribute(comment, name: "comment", allowEmpty: true) }
  }

  static func checkData(_ data: [UInt8]) throws {
    guard data.count <= maximumDataByteCount else {
      throw KeychainError(
        .invalidParameter,
        "The keychain item's data is \(data.count) bytes; the most an item holds is \(maximumDataByteCount)")
    }
  }

  /// Now, to the millisecond the database keeps.
  static func now() -> Date { date(milliseconds: milliseconds(Date())) }

  static func milliseconds(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1000).rounded()) }

  static func date(milliseconds: Int64) -> Date { Date(timeIntervalSince1970: Double(milliseconds) / 1000) }
}
