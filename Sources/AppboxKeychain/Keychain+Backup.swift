import AppboxCrypto
import Foundation

// The keychain's part of a backup: the items an app can see, as opaque bytes the backup
// engine stores as one archive member.
//
// Format (all integers big-endian):
//
//     "APPBOXKC" (8 bytes) · format version (1 byte, = 1) · key identifier (16 bytes)
//     · AES-256-GCM(export key, payload; associated data = the 25 header bytes)
//
//     payload = version 1 · group count (u32) · groups (u32 length + UTF-8 each)
//               · item count (u32) · items: class, service, account, group (u32 length +
//               UTF-8 each), label?, comment? (presence byte, then u32 length + UTF-8),
//               created, modified (i64 ms since 1970), data (u32 length + bytes)
//
// The export key and the key identifier are both derived from the device key (HKDF with
// distinct info strings), so the export stays encrypted under the device key, and an
// import can tell "made on another device" (identifier differs: `.otherDevice`, nothing
// restored) from "corrupt or tampered" (identifier matches, authentication fails: `.corrupt`).
//
// Import replaces rather than merges: the groups the app could see at export time (that it
// is still entitled to) are emptied and refilled with the exported items, in one
// transaction, so a restore brings the keychain back to the snapshot, including deletions.
// A group shared with another app is restored as the exporting app saw it.

extension Keychain {
  static let exportMagic = Array("APPBOXKC".utf8)
  static let exportVersion: UInt8 = 1

  /// Every item the app can see, serialized and sealed under the device key (opaque bytes),
  /// or nil if it has none.
  public func exportItems(for client: KeychainClient) throws -> [UInt8]? {
    let rows = try rows(inGroups: client.accessGroups, opening: true)
    if rows.isEmpty { return nil }
    var payload = ByteWriter()
    payload.append(Self.exportVersion)
    payload.append(UInt32(client.accessGroups.count))
    for group in client.accessGroups { payload.append(group) }
    payload.append(UInt32(rows.count))
    for row in rows {
      let secret = row.secret!
      payload.append(row.itemClass.rawValue)
      payload.append(row.service)
      payload.append(row.account)
      payload.append(row.accessGroup)
      payload.append(optional: secret.label)
      payload.append(optional: secret.comment)
      payload.append(row.created)
      payload.append(row.modified)
      payload.append(field: secret.data)
    }
    let header = Self.exportMagic + [Self.exportVersion] + key.identifier
    return header + (try AESGCM.seal(payload.bytes, key: key.exportKey, associatedData: header))
  }

  /// Restores items exported by `exportItems`; if the bytes were sealed under another
  /// device's key, restores nothing and returns .otherDevice(reason) — never throws for that
  /// case. Bytes that are not an export, or were altered, are `.corrupt` (bad data).
  /// Replaces the items of the exported groups the client is entitled to (see above).
  public func importItems(_ bytes: [UInt8], for client: KeychainClient) throws -> KeychainImportResult {
    var reader = ByteReader(bytes, what: "keychain export")
    guard bytes.count >= Self.exportMagic.count, try reader.raw(Self.exportMagic.count) == Self.exportMagic
    else {
      throw reader.corrupt("it is not a keychain export")
    }
    let version = try reader.uint8()
    guard version == Self.exportVersion else { throw reader.corrupt("format version \(version) is unknown") }
    let identifier = try reader.raw(key.identifier.count)
    guard identifier == key.identifier else {
      return .otherDevice(
        reason:
          "the keychain items were backed up on another device (key \(Self.hex(identifier.prefix(4)))…, "
          + "this device's is \(Self.hex(key.identifier.prefix(4)))…); they can be restored only to that device"
      )
    }
    let headerCount = Self.exportMagic.count + 1 + key.identifier.count
    let plaintext: [UInt8]
    do {
      plaintext = try AESGCM.open(
        Array(bytes[headerCount...]), key: key.exportKey, associatedData: Array(bytes[..<headerCount]))
    } catch let error as CryptoError where error.kind == .badData {
      throw reader.corrupt("\(error.reason) (it was altered after it was made)")
    }
    let (groups, items) = try Self.parsePayload(plaintext)
    let restoring = groups.filter { client.isEntitled(to: $0) }
    let restored = items.filter { restoring.contains($0.item.accessGroup ?? "") }
    try database.inTransaction(.immediate) {
      if !restoring.isEmpty { _ = try deleteItems(inGroups: restoring) }
      for (item, data) in restored {
        let group = item.accessGroup!
        let sealed = try SealedSecret(data: data, label: item.label, comment: item.comment)
          .seal(
            key: key.itemKey,
            associatedData: SealedSecret.associatedData(
              itemClass: item.itemClass, service: item.service, account: item.account, accessGroup: group))
        try database.execute(
          """
          INSERT OR REPLACE INTO items(class, service, account, access_group, created, modified, sealed)
          VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
          """,
          .text(item.itemClass.rawValue), .text(item.service), .text(item.account), .text(group),
          .integer(Self.milliseconds(item.created!)), .integer(Self.milliseconds(item.modified!)),
          .blob(sealed))
      }
    }
    return .restored(count: restored.count)
  }

  private static func parsePayload(_ plaintext: [UInt8]) throws -> (
    groups: [String], items: [(item: KeychainItem, data: [UInt8])]
  ) {
    var reader = ByteReader(plaintext, what: "keychain export")
    guard try reader.uint8() == exportVersion else { throw reader.corrupt("unknown payload version") }
    var groups: [String] = []
    for _ in 0..<(try reader.uint32()) { groups.append(try reader.string()) }
    var items: [(item: KeychainItem, data: [UInt8])] = []
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
      items.append((item, try reader.field()))
    }
    try reader.expectEnd()
    return (groups, items)
  }

  private static func hex(_ bytes: some Sequence<UInt8>) -> String {
    bytes.map { String(format: "%02x", $0) }.joined()
  }
}
