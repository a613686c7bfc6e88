// An object store in memory, for the conformance suite (ObjectStoreConformanceTests) beside the
// real ones, and for tests that want a store without a disk or a network. It keeps the
// protocol's promises the simple way: one lock around a dictionary, so a put replaces an
// object whole and a reader sees the old bytes or the new ones; an upload stages its bytes
// privately and they become visible in one step at the commit.
//
// It lives in this test target, not in AppboxTestSupport: `ObjectStore` is internal to
// AppboxBackup, and AppboxTestSupport depends on AppboxCore only (the benchmark, built for
// release, links it). When the protocol is `package` in AppboxRepository, this file can move
// there with a dependency on that module.

import AppboxCore
import Foundation
import Synchronization

@testable import AppboxBackup
@testable import AppboxRepository

final class MemoryObjectStore: ObjectStore, Sendable {
  private struct State {
    var created = false
    var objects: [String: (bytes: [UInt8], modified: Date)] = [:]
  }

  private let state = Mutex(State())
  let location: String
  let isShared: Bool
  var now: Date { Date() }

  init(location: String = "memory:", isShared: Bool = false) {
    self.location = location
    self.isShared = isShared
  }

  func create() throws { state.withLock { $0.created = true } }
  func exists() throws -> Bool { state.withLock { $0.created } }

  func list(_ directory: String) throws -> [StoredObject] {
    let start = directory + "/"
    return state.withLock { state in
      state.objects.compactMap { name, object -> StoredObject? in
        guard name.hasPrefix(start) else { return nil }
        let rest = String(name.dropFirst(start.count))
        guard !rest.isEmpty, !rest.contains("/") else { return nil }
        return StoredObject(name: rest, size: Int64(object.bytes.count), modified: object.modified)
      }
    }.sorted { $0.name < $1.name }
  }

  func get(_ name: String) throws -> [UInt8]? { state.withLock { $0.objects[name]?.bytes } }

  func put(_ name: String, _ bytes: [UInt8]) throws {
    state.withLock { $0.objects[name] = (bytes, Date()) }
  }

  func delete(_ names: [String]) throws {
    state.withLock { state in
      for name in names { state.objects[name] = nil }
    }
  }

  func size(of name: String) throws -> Int64? {
    state.withLock { $0.objects[name].map { Int64($0.bytes.count) } }
  }

  func upload(_ name: String) throws -> ObjectUpload { MemoryUpload(store: self, name: name) }

  func reader(_ name: String, size: Int64) throws -> ObjectReader {
    guard let bytes = try get(name) else {
      throw BackupError(.notFound, "'\(location)\(name)' does not exist")
    }
    return MemoryReader(bytes)
  }

  /// Every object's name (for tests that look at the whole store).
  var names: [String] { state.withLock { $0.objects.keys.sorted() } }
}

/// An upload into a `MemoryObjectStore`: nothing visible before `commit`.
final class MemoryUpload: ObjectUpload {
  private let store: MemoryObjectStore
  private let name: String
  private var staged: [UInt8]? = []

  init(store: MemoryObjectStore, name: String) {
    self.store = store
    self.name = name
  }

  func write(_ bytes: UnsafeRawBufferPointer) throws {
    guard staged != nil else { throw BackupError(.invalidRequest, "the upload is closed") }
    staged!.append(contentsOf: bytes)
  }

  @discardableResult func commit(beforeVisible: () -> Void) throws -> Int64 {
    guard let bytes = staged else { throw BackupError(.invalidRequest, "the upload is closed") }
    staged = nil
    beforeVisible()
    try store.put(name, bytes)
    return Int64(bytes.count)
  }

  func abort() { staged = nil }
}
