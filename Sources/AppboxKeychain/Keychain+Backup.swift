import AppboxCrypto
import AppboxStore
import Foundation

// The keychain's part of a backup: the items an app can see, as opaque bytes the backup
// engine stores as one archive member.
//
// Format (all integers big-endian):
//
//     "APPBOXKC" (8 bytes) · format version (1 byte) · key identifier (16 bytes)
//     · AES-256-GCM(export key, payload; associated data = the 25 header bytes)
//
//     version 2 (written now): items stay sealed as the keychain holds them, so a backup
//     never needs the device unlocked and never sees a secret:
//     payload = 2 · group count (u32) · groups (u32 length + UTF-8 each)
//               · secret count (u32) · (secret name, identifier: u32 length + bytes each)
//               · item count (u32) · items: class, service, account, group, accessibility
//               (u32 length + UTF-8 each), key version (1 byte), created, modified (i64 ms
//               since 1970), sealed value (u32 length + bytes)
//     payload version 4 (written instead of 2 when a row keeps the group it was sealed under,
//               Keychain+Identity.swift): as 2, with each item's sealed group (u32 length +
//               UTF-8, empty when it is the item's group) after its group
//     version 1 (still read): items opened, with label?, comment? (presence byte, then u32
//               length + UTF-8) and data (u32 length + bytes) in place of accessibility,
//               key version and sealed value; they restore as when-unlocked.
//
// The export key and the key identifier are both derived from the device key (HKDF with
// distinct info strings), so the export stays encrypted under the device key, and an
// import can tell "made on another device" (identifier differs: `.otherDevice`, nothing
// restored) from "corrupt or tampered" (identifier matches, authentication fails: `.corrupt`).
// So no item restores to another device from an export without a portable part. An item
// sealed under a class secret this device no longer has (a when-passcode-set item from
// before the passcode was cleared) is not restored: it could never be opened.
//
//     version 3 (written for an encrypted repository, which hands over a portable key):
//     "APPBOXKC" · 3 · key identifier (16 bytes)
//     · u32 length · AES-256-GCM(export key, version 2 payload; associated data = header)
//     · AES-256-GCM(portable key, portable payload; associated data = header · "portable")
//     portable payload = 3 · groups (as above) · item count (u32) · items: class, service,
//               account, group, accessibility (u32 length + UTF-8 each), created, modified
//               (i64 ms), data (u32 length + bytes), label?, comment?
//     On the device that made it, version 3 restores from its first part exactly as version
//     2 does. On another device with the same portable key (the repository's), the items
//     that are not this-device-only come back from the portable part, sealed anew under this
//     device's class keys; this-device-only items never enter the portable part, so they
//     never leave the device. Items whose class key is locked when the backup runs cannot be
//     opened and stay in the device part only. The portable part is sealed under a key
//     derived from the repository's master key, inside an archive that is itself sealed.
//
// Import replaces rather than merges: the groups the app could see at export time (that it
// is still entitled to) are emptied and refilled with the exported items, in one
// transaction, so a restore brings the keychain back to the snapshot, including deletions.
// A group shared with another app is restored as the exporting app saw it.

extension Keychain {
  static let exportMagic = Array("APPBOXKC".utf8)
  static let exportVersion: UInt8 = 2

  /// Every item the app can see, serialized and sealed under the device key (opaque bytes),
  /// or nil if it has none. Items stay sealed under their class keys: this works while the
  /// device is locked.
  public func exportItems(for client: KeychainClient, portableKey: [UInt8]? = nil) throws -> [UInt8]? {
    try requireCurrentIdentities()
    let rows = try rows(inGroups: client.accessGroups, opening: false)
    if rows.isEmpty { return nil }
    let keepsSealedGroups = rows.contains { $0.sealedGroup != nil }
    var payload = ByteWriter()
    payload.append(keepsSealedGroups ? Self.sealedGroupPayloadVersion : Self.exportVersion)
    payload.append(UInt32(client.accessGroups.count))
    for group in client.accessGroups { payload.append(group) }
    var secrets: [(String, [UInt8])] = []
    for secret in KeychainClassSecret.allCases {
      if let identifier = try recordedIdentifier(of: secret) { secrets.append((secret.rawValue, identifier)) }
    }
    payload.append(UInt32(secrets.count))
    for (name, identifier) in secrets {
      payload.append(name)
      payload.append(field: identifier)
    }
    payload.append(UInt32(rows.count))
    for row in rows {
      payload.append(row.itemClass.rawValue)
      payload.append(row.service)
      payload.append(row.account)
      payload.append(row.accessGroup)
      if keepsSealedGroups { payload.append(row.sealedGroup ?? "") }
      payload.append(row.accessibility.rawValue)
      payload.append(UInt8(truncatingIfNeeded: row.keyVersion))
      payload.append(row.created)
      payload.append(row.modified)
      payload.append(field: row.sealed)
    }
    guard let portableKey else {
      let header = Self.exportMagic + [Self.exportVersion] + key.identifier
      return header + (try AESGCM.seal(payload.bytes, key: key.exportKey, associatedData: header))
    }
    let header = Self.exportMagic + [Self.portableExportVersion] + key.identifier
    let devicePart = try AESGCM.seal(payload.bytes, key: key.exportKey, associatedData: header)
    var out = ByteWriter()
    out.append(raw: header)
    out.append(field: devicePart)
    out.append(
      raw: try AESGCM.seal(
        try portablePayload(client: client, rows: rows), key: portableKey,
        associatedData: header + Array("portable".utf8)))
    return out.bytes
  }

  static let portableExportVersion: UInt8 = 3
  static let sealedGroupPayloadVersion: UInt8 = 4

  /// The items that may leave the device (not this-device-only), opened, for the portable part.
  private func portablePayload(client: KeychainClient, rows: [Row]) throws -> [UInt8] {
    var payload = ByteWriter()
    payload.append(Self.portableExportVersion)
    payload.append(UInt32(client.accessGroups.count))
    for group in client.accessGroups { payload.append(group) }
    var items: [(Row, SealedSecret)] = []
    for row in rows where !row.accessibility.isThisDeviceOnly {
      let rowKey: [UInt8]
      do {
        rowKey = row.keyVersion == 0 ? key.itemKey : try itemKey(for: row.accessibility)
      } catch let error as KeychainError where error.kind == .unavailable {
        continue  // locked: this item stays device-bound in this snapshot
      }
      items.append(
        (
          row,
          try SealedSecret.open(
            row.sealed, key: rowKey, associatedData: row.associatedData,
            item: row.item(includingData: false).summary)
        ))
    }
    payload.append(UInt32(items.count))
    for (row, secret) in items {
      payload.append(row.itemClass.rawValue)
      payload.append(row.service)
      payload.append(row.account)
      payload.append(row.accessGroup)
      payload.append(row.accessibility.rawValue)
      payload.append(row.created)
      payload.append(row.modified)
      payload.append(field: secret.data)
      payload.append(optional: secret.label)
      payload.append(optional: secret.comment)
    }
    return payload.bytes
  }

  /// Restores items exported by `exportItems`; if the bytes were sealed under another
  /// device's key, restores nothing and returns .otherDevice(reason) — never throws for that
  /// case. Bytes that are not an export, or were altered, are `.corrupt` (bad data).
  /// Replaces the items of the exported groups the client is entitled to (see above).
  public func importItems(_ bytes: [UInt8], for client: KeychainClient, portableKey: [UInt8]? = nil) throws
    -> KeychainImportResult
  {
    try requireCurrentIdentities()
    var reader = ByteReader(bytes, what: "keychain export")
    guard bytes.count >= Self.exportMagic.count, try reader.raw(Self.exportMagic.count) == Self.exportMagic
    else {
      throw reader.corrupt("it is not a keychain export")
    }
    let version = try reader.uint8()
    guard (1...3).contains(version) else { throw reader.corrupt("format version \(version) is unknown") }
    let identifier = try reader.raw(key.identifier.count)
    let headerCount = Self.exportMagic.count + 1 + key.identifier.count
    let header = Array(bytes[..<headerCount])
    let devicePart = version == 3 ? try reader.field() : Array(bytes[headerCount...])
    guard identifier == key.identifier else {
      let reason =
        "the keychain items were backed up on another device (key \(Self.hex(identifier.prefix(4)))…, "
        + "this device's is \(Self.hex(key.identifier.prefix(4)))…); they can be restored only to that device"
      guard version == 3, let portableKey else { return .otherDevice(reason: reason) }
      let portable: [UInt8]
      do {
        portable = try AESGCM.open(
          Array(bytes[(headerCount + 4 + devicePart.count)...]), key: portableKey,
          associatedData: header + Array("portable".utf8))
      } catch let error as CryptoError where error.kind == .badData {
        throw reader.corrupt("its portable part: \(error.reason) (altered, or another repository's)")
      }
      return try importPortable(portable, for: client, deviceOnlyReason: reason)
    }
    let plaintext: [UInt8]
    do {
      plaintext = try AESGCM.open(devicePart, key: key.exportKey, associatedData: header)
    } catch let error as CryptoError where error.kind == .badData {
      throw reader.corrupt("\(error.reason) (it was altered after it was made)")
    }
    let (exportedGroups, items) =
      version == 1 ? try Self.parseOpenedPayload(plaintext) : try parseSealedPayload(plaintext)
    let restoring = exportedGroups.map { currentGroup($0, for: client) }.filter { client.isEntitled(to: $0) }
    // Version 1 items arrive opened and are sealed here, under their class key. Sealed ones
    // keep the group they were sealed under when an export's group is a legacy name.
    var sealedItems: [(item: KeychainItem, keyVersion: Int64, sealed: [UInt8], sealedGroup: String?)] = []
    for var entry in items {
      let exported = entry.item.accessGroup ?? ""
      let group = currentGroup(exported, for: client)
      guard restoring.contains(group) else { continue }
      entry.item.accessGroup = group
      switch entry.content {
      case .sealed(let keyVersion, let sealed, let sealedGroup):
        sealedItems.append(
          (entry.item, keyVersion, sealed, sealedGroup ?? (group == exported ? nil : exported)))
      case .opened(let data):
        let item = entry.item
        let sealed = try SealedSecret(data: data, label: item.label, comment: item.comment)
          .seal(
            key: try itemKey(for: item.accessibility),
            associatedData: SealedSecret.associatedData(
              itemClass: item.itemClass, service: item.service, account: item.account,
              accessGroup: item.accessGroup!))
        sealedItems.append((item, 1, sealed, nil))
      }
    }
    try database.inTransaction(.immediate) {
      if !restoring.isEmpty { _ = try deleteItems(inGroups: restoring) }
      for (item, keyVersion, sealed, sealedGroup) in sealedItems {
        try database.execute(
          """
          INSERT OR REPLACE INTO items(class, service, account, access_group, created, modified, sealed,
            accessible, key_version, sealed_group)
          VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
          """,
          .text(item.itemClass.rawValue), .text(item.service), .text(item.account), .text(item.accessGroup!),
          .integer(Self.milliseconds(item.created!)), .integer(Self.milliseconds(item.modified!)),
          .blob(sealed), .text(item.accessibility.rawValue), .integer(keyVersion),
          sealedGroup.map(SQLValue.text) ?? .null)
      }
    }
    return .restored(count: sealedItems.count)
  }

  /// Restores the portable part on a device other than the one that made the export: the
  /// items come opened and are sealed here under this device's class keys; an item whose class
  /// key is unavailable here (locked, or no passcode) is left out and counted.
  private func importPortable(_ plaintext: [UInt8], for client: KeychainClient, deviceOnlyReason: String)
    throws
    -> KeychainImportResult
  {
    var reader = ByteReader(plaintext, what: "keychain export")
    guard try reader.uint8() == Self.portableExportVersion else {
      throw reader.corrupt("unknown payload version")
    }
    var groups: [String] = []
    for _ in 0..<(try reader.uint32()) { groups.append(try reader.string()) }
    var items: [(KeychainItem, SealedSecret)] = []
    for _ in 0..<(try reader.uint32()) {
      let className = try reader.string()
      guard let itemClass = KeychainItemClass(rawValue: className) else {
        throw reader.corrupt("unknown item class '\(className)'")
      }
      let service = try reader.string()
      let account = try reader.string()
      let group = currentGroup(try reader.string(), for: client)
      let accessibilityName = try reader.string()
      guard let accessibility = KeychainAccessibility(rawValue: accessibilityName),
        !accessibility.isThisDeviceOnly
      else { throw reader.corrupt("an item of accessibility '\(accessibilityName)' cannot be portable") }
      let item = KeychainItem(
        itemClass: itemClass, service: service, account: account, accessGroup: group,
        created: try reader.date(), modified: try reader.date(), accessibility: accessibility)
      let secret = SealedSecret(
        data: try reader.field(), label: try reader.optionalString(), comment: try reader.optionalString())
      items.append((item, secret))
    }
    try reader.expectEnd()
    let restoring = groups.map { currentGroup($0, for: client) }.filter { client.isEntitled(to: $0) }
    var sealedItems: [(item: KeychainItem, sealed: [UInt8])] = []
    var unavailable = 0
    for (item, secret) in items where restoring.contains(item.accessGroup ?? "") {
      let classKey: [UInt8]
      do {
        classKey = try itemKey(for: item.accessibility)
      } catch let error as KeychainError where error.kind == .unavailable {
        unavailable += 1
        continue
      }
      sealedItems.append(
        (
          item,
          try secret.seal(
            key: classKey,
            associatedData: SealedSecret.associatedData(
              itemClass: item.itemClass, service: item.service, account: item.account,
              accessGroup: item.accessGroup!))
        ))
    }
    try database.inTransaction(.immediate) {
      if !restoring.isEmpty { _ = try deleteItems(inGroups: restoring) }
      for (item, sealed) in sealedItems {
        try database.execute(
          """
          INSERT OR REPLACE INTO items(class, service, account, access_group, created, modified, sealed,
            accessible, key_version)
          VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 1)
          """,
          .text(item.itemClass.rawValue), .text(item.service), .text(item.account), .text(item.accessGroup!),
          .integer(Self.milliseconds(item.created!)), .integer(Self.milliseconds(item.modified!)),
          .blob(sealed), .text(item.accessibility.rawValue))
      }
    }
    var notes: [String] = []
    notes.append("this-device-only items, if the snapshot had any, were not restored: \(deviceOnlyReason)")
    if unavailable > 0 {
      notes.append(
        "\(unavailable) items were not restored: their class keys are unavailable (locked device?)")
    }
    return .restoredFromElsewhere(count: sealedItems.count, notes: notes)
  }

  /// An exported item's secret: still sealed (version 2) or opened (version 1).
  private enum ExportedContent {
    /// `sealedGroup`: the group it was sealed under, when not its own (payload version 4).
    case sealed(keyVersion: Int64, sealed: [UInt8], sealedGroup: String?)
    case opened(data: [UInt8])
  }

  private typealias ExportedItem = (item: KeychainItem, content: ExportedContent)

  /// Parses a version 2 payload, leaving out items sealed under a class secret this keychain
  /// does not have (or no longer has).
  private func parseSealedPayload(_ plaintext: [UInt8]) throws -> (groups: [String], items: [ExportedItem]) {
    var reader = ByteReader(plaintext, what: "keychain export")
    let payloadVersion = try reader.uint8()
    guard payloadVersion == 2 || payloadVersion == Self.sealedGroupPayloadVersion else {
      throw reader.corrupt("unknown payload version")
    }
    var groups: [String] = []
    for _ in 0..<(try reader.uint32()) { groups.append(try reader.string()) }
    var exportedSecrets: [String: [UInt8]] = [:]
    for _ in 0..<(try reader.uint32()) { exportedSecrets[try reader.string()] = try reader.field() }
    var items: [ExportedItem] = []
    for _ in 0..<(try reader.uint32()) {
      let className = try reader.string()
      guard let itemClass = KeychainItemClass(rawValue: className) else {
        throw reader.corrupt("unknown item class '\(className)'")
      }
      let service = try reader.string()
      let account = try reader.string()
      let group = try reader.string()
      let sealedGroup = payloadVersion == Self.sealedGroupPayloadVersion ? try reader.string() : ""
      let accessibilityName = try reader.string()
      guard let accessibility = KeychainAccessibility(rawValue: accessibilityName) else {
        throw reader.corrupt("unknown accessibility '\(accessibilityName)'")
      }
      let keyVersion = Int64(try reader.uint8())
      guard keyVersion <= 1 else { throw reader.corrupt("unknown key version \(keyVersion)") }
      let item = KeychainItem(
        itemClass: itemClass, service: service, account: account, accessGroup: group,
        created: try reader.date(), modified: try reader.date(), accessibility: accessibility)
      let sealed = try reader.field()
      if keyVersion == 1 {
        let secret = accessibility.classSecret
        guard let current = try recordedIdentifier(of: secret), exportedSecrets[secret.rawValue] == current
        else { continue }
      }
      items.append(
        (
          item,
          .sealed(
            keyVersion: keyVersion, sealed: sealed, sealedGroup: sealedGroup.isEmpty ? nil : sealedGroup)
        ))
    }
    try reader.expectEnd()
    return (groups, items)
  }

  /// Parses a version 1 payload (items opened); they restore as when-unlocked.
  private static func parseOpenedPayload(_ plaintext: [UInt8]) throws -> (
    groups: [String], items: [ExportedItem]
  ) {
    var reader = ByteReader(plaintext, what: "keychain export")
    guard try reader.uint8() == 1 else { throw reader.corrupt("unknown payload version") }
    var groups: [String] = []
    for _ in 0..<(try reader.uint32()) { groups.append(try reader.string()) }
    var items: [ExportedItem] = []
    for _ in 0..<(try reader.uint32()) {
      let className = try reader.string()
      guard let itemClass = KeychainItemClass(rawValue: className) else {
        throw reader.corrupt("unknown item class '\(className)'")
      }
      let item = KeychainItem(
        itemClass: itemClass, service: try reader.string(), account: try reader.string(),
        accessGroup: try reader.string(), label: try reader.optionalString(),
        comment: try reader.optionalString(),
        created: try reader.date(), modified: try reader.date())
      items.append((item, .opened(data: try reader.field())))
    }
    try reader.expectEnd()
    return (groups, items)
  }

  private static func hex(_ bytes: some Sequence<UInt8>) -> String {
    bytes.map { String(format: "%02x", $0) }.joined()
  }
}
