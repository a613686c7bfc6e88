// Reading a SecItem request: its shape, and every key and value of its query against what
// the operation takes. Everything an app sends is hostile input: unknown keys, values of the
// wrong type and attributes appbox cannot honour are refused with errSecParam, naming them.

import AppboxCore
import AppboxKeychain
import AppboxPlist
import AppboxSecItem
import Foundation

/// One decoded, checked request.
struct SecItemRequest {
  var operation: SecItemWire.Operation
  var query: SecItemQuery
  /// SecItemUpdate's attributes to update.
  var changes: KeychainChanges?

  /// The limits a request is decoded with: a request is a dozen keys.
  static let limits = PropertyListLimits(
    maxDepth: SecItemWire.maximumDepth, maxObjects: 10_000, maxBytes: SecItemWire.maximumRequestSize)

  init(decoding body: [UInt8]) throws {
    guard body.starts(with: Array("bplist00".utf8)) else {
      throw SecItemFailure.parameter("The request is not a binary property list (bplist00)")
    }
    let decoded: PropertyList
    do {
      decoded = try PropertyList.decode(Data(body), limits: Self.limits)
    } catch let error as PropertyListError {
      throw SecItemFailure.parameter("The request is not a valid property list: \(error.description)")
    }
    guard let top = decoded.dictionary.map(entries) else {
      throw SecItemFailure.parameter("The request is not a dictionary")
    }
    for key in top.keys where !["operation", "query", "attributesToUpdate"].contains(key) {
      throw SecItemFailure.parameter("Unknown key \(quoted(key)) in the request")
    }
    guard let name = top["operation"]?.string, let operation = SecItemWire.Operation(rawValue: name) else {
      throw SecItemFailure.parameter(
        "The request's operation must be one of "
          + SecItemWire.Operation.allCases.map(\.rawValue).joined(separator: ", "))
    }
    guard let query = top["query"]?.dictionary.map(entries) else {
      throw SecItemFailure.parameter("\(name) needs a query dictionary")
    }
    self.operation = operation
    self.query = try SecItemQuery(query, for: operation)
    switch (operation, top["attributesToUpdate"]) {
    case (.update, let attributes?):
      guard let attributes = attributes.dictionary.map(entries) else {
        throw SecItemFailure.parameter("SecItemUpdate's attributesToUpdate must be a dictionary")
      }
      changes = try Self.changes(attributes)
    case (.update, nil):
      throw SecItemFailure.parameter("SecItemUpdate needs attributesToUpdate")
    case (_, nil):
      changes = nil
    case (_, _?):
      throw SecItemFailure.parameter("attributesToUpdate belongs to SecItemUpdate only, not \(name)")
    }
  }

  /// What SecItemUpdate may change: the secret, the label and the comment.
  static func changes(_ attributes: [String: PropertyList]) throws -> KeychainChanges {
    var changes = KeychainChanges()
    for (key, value) in attributes.sorted(by: { $0.key < $1.key }) {
      switch key {
      case kSecValueData: changes.data = try SecItemQuery.data(value, key)
      case kSecAttrLabel: changes.label = try SecItemQuery.string(value, key)
      case kSecAttrComment: changes.comment = try SecItemQuery.string(value, key)
      case kSecClass, kSecAttrService, kSecAttrAccount, kSecAttrAccessGroup, kSecAttrAccessible:
        throw SecItemFailure.parameter(
          "SecItemUpdate cannot change \(key) here: appbox changes only kSecValueData, kSecAttrLabel and "
            + "kSecAttrComment; delete the item and add it anew")
      default:
        throw SecItemFailure.parameter("Unknown key \(quoted(key)) in SecItemUpdate's attributesToUpdate")
      }
    }
    return changes
  }
}

/// A query (or SecItemAdd's attributes), checked.
struct SecItemQuery {
  enum Limit: Equatable {
    case one
    case all
    case count(Int)
  }

  var itemClass: KeychainItemClass = .generic
  var service: String?
  var account: String?
  var accessGroup: String?
  var label: String?
  var comment: String?
  var accessibility: KeychainAccessibility?
  var data: [UInt8]?
  var returnsData = false
  var returnsAttributes = false
  var limit: Limit = .one

  /// The keys each operation takes besides kSecClass.
  static let matchingKeys: Set<String> = [
    kSecAttrService, kSecAttrAccount, kSecAttrAccessGroup, kSecAttrLabel, kSecAttrComment, kSecAttrAccessible,
  ]
  static func allowedKeys(_ operation: SecItemWire.Operation) -> Set<String> {
    switch operation {
    case .add: return matchingKeys.union([kSecValueData, kSecReturnData, kSecReturnAttributes])
    case .copyMatching: return matchingKeys.union([kSecReturnData, kSecReturnAttributes, kSecMatchLimit])
    case .update, .delete: return matchingKeys
    }
  }

  init(_ query: [String: PropertyList], for operation: SecItemWire.Operation) throws {
    let name = operation.rawValue
    guard let itemClass = query[kSecClass] else {
      throw SecItemFailure.parameter(
        "\(name) needs kSecClass (kSecClassGenericPassword or kSecClassInternetPassword)")
    }
    switch itemClass.string {
    case kSecClassGenericPassword: self.itemClass = .generic
    case kSecClassInternetPassword: self.itemClass = .internet
    default:
      throw SecItemFailure.parameter(
        "kSecClass must be kSecClassGenericPassword ('genp') or kSecClassInternetPassword ('inet')")
    }
    let allowed = Self.allowedKeys(operation)
    for (key, value) in query.sorted(by: { $0.key < $1.key }) where key != kSecClass {
      guard allowed.contains(key) else {
        let known = Self.allowedKeys(.add).union(Self.allowedKeys(.copyMatching)).contains(key)
        throw SecItemFailure.parameter(
          known ? "\(name) does not take \(key)" : "Unknown key \(quoted(key)) in \(name)'s query")
      }
      switch key {
      case kSecAttrService: service = try Self.string(value, key)
      case kSecAttrAccount: account = try Self.string(value, key)
      case kSecAttrAccessGroup: accessGroup = try Self.string(value, key)
      case kSecAttrLabel: label = try Self.string(value, key)
      case kSecAttrComment: comment = try Self.string(value, key)
      case kSecAttrAccessible: accessibility = try Self.accessibility(value)
      case kSecValueData: data = try Self.data(value, key)
      case kSecReturnData: returnsData = try Self.bool(value, key)
      case kSecReturnAttributes: returnsAttributes = try Self.bool(value, key)
      case kSecMatchLimit: limit = try Self.limit(value)
      default: break
      }
    }
    if operation == .add {
      guard service != nil, account != nil else {
        throw SecItemFailure.parameter("SecItemAdd needs kSecAttrService and kSecAttrAccount")
      }
      guard data != nil else { throw SecItemFailure.parameter("SecItemAdd needs kSecValueData") }
    }
  }

  /// The item SecItemAdd adds.
  func item() -> KeychainItem {
    KeychainItem(
      itemClass: itemClass, service: service ?? "", account: account ?? "", accessGroup: accessGroup,
      label: label,
      comment: comment, data: data, accessibility: accessibility ?? .whenUnlocked)
  }

  /// The keychain query matching this one's attributes.
  var keychainQuery: KeychainQuery {
    KeychainQuery(
      itemClass: itemClass, service: service, account: account, accessGroup: accessGroup, label: label,
      comment: comment, accessibility: accessibility)
  }

  /// One item as the query asked for it: its data, or its attributes (with its data when
  /// both were asked for).
  func result(for item: KeychainItem) -> PropertyList {
    guard returnsAttributes else { return .data(Data(item.data ?? [])) }
    var attributes: [String: PropertyList] = [
      kSecClass: .string(item.itemClass == .generic ? kSecClassGenericPassword : kSecClassInternetPassword),
      kSecAttrService: .string(item.service), kSecAttrAccount: .string(item.account),
      kSecAttrAccessible: .string(Self.code(of: item.accessibility)),
    ]
    if let group = item.accessGroup { attributes[kSecAttrAccessGroup] = .string(group) }
    if let label = item.label { attributes[kSecAttrLabel] = .string(label) }
    if let comment = item.comment { attributes[kSecAttrComment] = .string(comment) }
    if let created = item.created { attributes[kSecAttrCreationDate] = .date(created) }
    if let modified = item.modified { attributes[kSecAttrModificationDate] = .date(modified) }
    if returnsData, let data = item.data { attributes[kSecValueData] = .data(Data(data)) }
    return .dictionary(attributes)
  }

  // MARK: Values

  static let accessibilityCodes: [(String, KeychainAccessibility)] = [
    (kSecAttrAccessibleWhenUnlocked, .whenUnlocked), (kSecAttrAccessibleAfterFirstUnlock, .afterFirstUnlock),
    (kSecAttrAccessibleWhenPasscodeSetThisDeviceOnly, .whenPasscodeSetThisDeviceOnly),
    (kSecAttrAccessibleWhenUnlockedThisDeviceOnly, .whenUnlockedThisDeviceOnly),
    (kSecAttrAccessibleAfterFirstUnlockThisDeviceOnly, .afterFirstUnlockThisDeviceOnly),
  ]

  static func code(of accessibility: KeychainAccessibility) -> String {
    accessibilityCodes.first { $0.1 == accessibility }!.0
  }

  static func accessibility(_ value: PropertyList) throws -> KeychainAccessibility {
    guard let code = value.string, let match = accessibilityCodes.first(where: { $0.0 == code }) else {
      throw SecItemFailure.parameter(
        "kSecAttrAccessible must be one of " + accessibilityCodes.map { "'\($0.0)'" }.joined(separator: ", ")
          + " (kSecAttrAccessibleAlways is not supported)")
    }
    return match.1
  }

  static func string(_ value: PropertyList, _ key: String) throws -> String {
    guard let text = value.string else { throw SecItemFailure.parameter("\(key) must be a string") }
    return text
  }

  static func data(_ value: PropertyList, _ key: String) throws -> [UInt8] {
    guard let data = value.data else { throw SecItemFailure.parameter("\(key) must be data") }
    return Array(data)
  }

  static func bool(_ value: PropertyList, _ key: String) throws -> Bool {
    guard let flag = value.bool else { throw SecItemFailure.parameter("\(key) must be a boolean") }
    return flag
  }

  static func limit(_ value: PropertyList) throws -> Limit {
    switch (value.string, value.integer) {
    case (kSecMatchLimitOne?, _): return .one
    case (kSecMatchLimitAll?, _): return .all
    case (nil, let count?) where count >= 1: return count == 1 ? .one : .count(Int(clamping: count))
    default:
      throw SecItemFailure.parameter(
        "kSecMatchLimit must be kSecMatchLimitOne, kSecMatchLimitAll or a positive number")
    }
  }
}

/// A decoded dictionary's entries as a Swift dictionary. Keys Swift considers equal (NFC and NFD
/// spellings of one text, which a property list may hold as two keys) keep the first value
/// instead of trapping: none of the protocol's keys is affected (they are ASCII), and any other
/// key is refused as unknown anyway.
func entries<Entries: Sequence>(_ dictionary: Entries) -> [String: PropertyList]
where Entries.Element == (key: String, value: PropertyList) {
  Dictionary(dictionary.map { ($0.key, $0.value) }, uniquingKeysWith: { first, _ in first })
}

/// `text` for a one-line message: quoted, at most 60 characters, control characters escaped.
func quoted(_ text: String) -> String {
  var result = ""
  for scalar in text.unicodeScalars.prefix(60) {
    if scalar.value < 0x20 || scalar.value == 0x7F || (0x80..<0xA0).contains(scalar.value) {
      result += "\\u{\(String(scalar.value, radix: 16))}"
    } else {
      result.unicodeScalars.append(scalar)
    }
  }
  return "'" + result + (text.unicodeScalars.count > 60 ? "...'" : "'")
}
