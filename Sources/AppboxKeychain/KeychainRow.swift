import AppboxStore
import Foundation

/// One row of `items`, with its secret once opened.
struct Row {
  /// The columns `init` reads, in its order.
  static let columns =
    "id, class, service, account, access_group, created, modified, sealed, accessible, key_version, sealed_group"

  var id: Int64
  var itemClass: KeychainItemClass
  var service: String
  var account: String
  var accessGroup: String
  var created: Date
  var modified: Date
  var sealed: [UInt8]
  var accessibility: KeychainAccessibility
  /// 0: sealed under the device key alone (before accessibility classes); 1: under the class key.
  var keyVersion: Int64
  /// The group the value was sealed under when it is not `accessGroup` (a row the identity
  /// migration moved, not sealed again since; Keychain+Identity.swift).
  var sealedGroup: String?
  var secret: SealedSecret?

  /// Reads the columns `Row.columns`.
  init(_ row: Statement, path: String) throws {
    guard let itemClass = KeychainItemClass(rawValue: row.text(1) ?? "") else {
      throw KeychainError(
        .corrupt, "The keychain has an item of unknown class '\(row.text(1) ?? "")'", path: path)
    }
    guard let accessibility = KeychainAccessibility(rawValue: row.text(8) ?? "") else {
      throw KeychainError(
        .corrupt, "The keychain has an item of unknown accessibility '\(row.text(8) ?? "")'", path: path)
    }
    self.accessibility = accessibility
    keyVersion = row.int64(9)
    id = row.int64(0)
    self.itemClass = itemClass
    service = row.text(2) ?? ""
    account = row.text(3) ?? ""
    accessGroup = row.text(4) ?? ""
    created = Keychain.date(milliseconds: row.int64(5))
    modified = Keychain.date(milliseconds: row.int64(6))
    sealed = row.blob(7)
    sealedGroup = row.isNull(10) ? nil : row.text(10)
  }

  /// What the stored value was sealed with (its group then).
  var associatedData: [UInt8] {
    SealedSecret.associatedData(
      itemClass: itemClass, service: service, account: account, accessGroup: sealedGroup ?? accessGroup)
  }

  /// What a value sealed now is bound to (the group the row is in).
  var currentAssociatedData: [UInt8] {
    SealedSecret.associatedData(
      itemClass: itemClass, service: service, account: account, accessGroup: accessGroup)
  }

  func item(includingData: Bool) -> KeychainItem {
    KeychainItem(
      itemClass: itemClass, service: service, account: account, accessGroup: accessGroup,
      label: secret?.label,
      comment: secret?.comment, data: includingData ? secret?.data : nil, created: created,
      modified: modified,
      accessibility: accessibility)
  }
}
