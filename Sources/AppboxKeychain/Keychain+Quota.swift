// What one app may keep in the keychain: at most `quota.items` items and `quota.bytes` bytes
// in the groups it can reach (its own and those it shares), counted as stored: the sealed
// value (secret, label, comment, nonce and tag) plus service and account. `add` and an
// `update` that grows a value check it inside their transaction, so two writers cannot pass
// it together; beyond it they fail as `.quotaExceeded` (exit 73, errSecDiskFull through the
// broker) and nothing is written. An item in a shared group counts for every app that can
// reach it: apps of a team share its bound as they share its items. A restore puts back what
// an export held without checking (its items were within the bound when it was made, and an
// export is sealed under this device's key). Deleting frees what the item took.

import AppboxStore

/// How much one app may keep in the keychain.
public struct KeychainQuota: Sendable, Equatable {
  public var items: Int
  public var bytes: Int64

  public init(items: Int, bytes: Int64) {
    self.items = items
    self.bytes = bytes
  }

  /// 1,000 items and 16 MiB: sixteen items of the largest size, or a thousand of a few KiB.
  public static let standard = KeychainQuota(items: 1000, bytes: 16 << 20)
}

/// How much of its quota an app uses.
public struct KeychainUsage: Sendable, Equatable {
  public var items: Int
  public var bytes: Int64
  public var quota: KeychainQuota
}

extension Keychain {
  /// What the items `client` can reach take, and its quota.
  public func usage(for client: KeychainClient) throws -> KeychainUsage {
    try requireCurrentIdentities()
    let (items, bytes) = try stored(inGroups: client.accessGroups)
    return KeychainUsage(items: items, bytes: bytes, quota: quota)
  }

  /// Items and bytes stored in `groups`.
  private func stored(inGroups groups: [String]) throws -> (Int, Int64) {
    if groups.isEmpty { return (0, 0) }
    let statement = try database.prepare(
      """
      SELECT count(*), coalesce(sum(length(sealed) + length(CAST(service AS BLOB))
        + length(CAST(account AS BLOB))), 0)
      FROM items WHERE access_group IN (\(groups.indices.map { "?\($0 + 1)" }.joined(separator: ", ")))
      """)
    try statement.bind(groups.map(SQLValue.text))
    let row = try statement.rows { (Int($0.int64(0)), $0.int64(1)) }
    return row.first ?? (0, 0)
  }

  /// Refuses (`.quotaExceeded`) when `items` more items and `bytes` more bytes would take
  /// `client` over its quota. Call it inside the writing transaction.
  func checkQuota(for client: KeychainClient, adding items: Int, bytes: Int64, doing what: String) throws {
    let (count, size) = try stored(inGroups: client.accessGroups)
    if count + items > quota.items {
      throw KeychainError(
        .quotaExceeded,
        "Cannot \(what) the keychain item: \(client.name) may keep \(quota.items) items and has \(count); "
          + "delete some first")
    }
    if size + bytes > quota.bytes {
      throw KeychainError(
        .quotaExceeded,
        "Cannot \(what) the keychain item: \(client.name) may keep \(quota.bytes) bytes of items, uses "
          + "\(size), and this needs \(bytes) more; delete some first")
    }
  }
}
