// The dictionary of the property-list model. Swift's `String ==` compares by canonical
// equivalence, so a `[String: PropertyList]` would merge keys that differ only in Unicode
// normalization; property lists (and Foundation) keep them apart, and so does this type.

/// A property-list dictionary: keys are strings compared by their Unicode scalars (never by
/// canonical equivalence, as Swift's `String ==` does), so NFC and NFD spellings of a key are
/// two keys, as they are in Foundation and in the file.
public struct PropertyListDictionary: Equatable, Sendable, Sequence, ExpressibleByDictionaryLiteral {
  /// A key compared and hashed by its Unicode scalars. Two strings have the same scalars
  /// exactly when they have the same UTF-8 bytes (the encoding is one-to-one), so both are
  /// done on the bytes: a keyed archive of 100,000 records hashes millions of keys.
  public struct ScalarKey: Hashable, Sendable {
    public let string: String
    public init(_ string: String) { self.string = string }
    public static func == (a: ScalarKey, b: ScalarKey) -> Bool {
      a.string.utf8.elementsEqual(b.string.utf8)
    }
    public func hash(into hasher: inout Hasher) {
      var copy = string
      copy.withUTF8 { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
    }
  }

  private var storage: [ScalarKey: PropertyList]

  public init() { storage = [:] }

  /// The entries of a Swift dictionary (whose keys are already distinct).
  public init(_ entries: [String: PropertyList]) {
    storage = Dictionary(uniqueKeysWithValues: entries.map { (ScalarKey($0.key), $0.value) })
  }

  /// A repeated key keeps its last value.
  public init(dictionaryLiteral elements: (String, PropertyList)...) {
    storage = [:]
    for (key, value) in elements { storage[ScalarKey(key)] = value }
  }

  /// The value for exactly this key (same Unicode scalars).
  public subscript(key: String) -> PropertyList? {
    get { storage[ScalarKey(key)] }
    set { storage[ScalarKey(key)] = newValue }
  }

  public var count: Int { storage.count }
  public var isEmpty: Bool { storage.isEmpty }
  /// The keys, in no particular order.
  public var keys: [String] { storage.keys.map(\.string) }
  /// The keys in Unicode scalar order: how both writers lay them out.
  public var sortedKeys: [String] { keys.sorted(by: String.scalarOrder) }

  @discardableResult
  public mutating func removeValue(forKey key: String) -> PropertyList? {
    storage.removeValue(forKey: ScalarKey(key))
  }

  /// The values transformed, keyed by Swift strings: keys that differ only in normalization
  /// collapse there, so use this only where that cannot matter.
  public func mapValues<T>(_ transform: (PropertyList) throws -> T) rethrows -> [String: T] {
    var result: [String: T] = [:]
    for (key, value) in storage { result[key.string] = try transform(value) }
    return result
  }

  /// Like `mapValues`, leaving out the values `transform` maps to nil.
  public func compactMapValues<T>(_ transform: (PropertyList) throws -> T?) rethrows -> [String: T] {
    var result: [String: T] = [:]
    for (key, value) in storage { result[key.string] = try transform(value) }
    return result
  }

  public func makeIterator() -> AnyIterator<(key: String, value: PropertyList)> {
    var iterator = storage.makeIterator()
    return AnyIterator { iterator.next().map { (key: $0.key.string, value: $0.value) } }
  }
}
