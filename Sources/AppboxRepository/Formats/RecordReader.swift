// Records read from bytes that arrive in pieces: a file, an object store's reader (sealed or
// not), an archive member. One window is refilled from the source; it grows only when one
// record does not fit, so what is held is the longest record met (each bounded by its own
// length limit, and by the bytes actually there), never the whole input.
//
// Records are parsed by the same `ByteReader` code that parses whole buffers: a parse that
// runs off the end of the window is tried again once more bytes are in (from the record's
// start), any other failure is final. Bytes the records consume can be hashed as they go (a
// manifest's trailing checksum), so nothing is read twice.

import AppboxCrypto
import Glibc

final class RecordReader {
  /// Fills the buffer's front with the next bytes; returns how many, 0 at the end.
  typealias Source = (UnsafeMutableRawBufferPointer) throws -> Int

  static let defaultWindow = 256 << 10

  private let source: Source
  private let initialWindow: Int
  private var window: UnsafeMutableRawBufferPointer
  /// The bytes read and not yet consumed are `window[start..<end]`.
  private var start = 0
  private var end = 0
  private var sourceEnded = false
  /// The bytes the source holds, when known (object and member sizes are).
  let size: Int64?
  /// Bytes consumed by records so far.
  private(set) var consumed: Int64 = 0
  /// Whether the last failed record ran into the end of the input (a truncation).
  private(set) var endedInsideRecord = false
  /// Consumed bytes are handed to it, when set.
  var hasher: SHA256Hasher?

  /// Records from `source`, which holds `size` bytes when known; `window` is the starting
  /// size of the window (tests make it tiny).
  init(size: Int64?, window: Int = RecordReader.defaultWindow, source: @escaping Source) {
    self.size = size
    self.source = source
    initialWindow = max(1, window)
    self.window = UnsafeMutableRawBufferPointer.allocate(byteCount: initialWindow, alignment: 16)
  }

  /// Records from `reader`'s bytes from `offset` on.
  convenience init(_ reader: ObjectReader, from offset: Int64 = 0, window: Int = RecordReader.defaultWindow) {
    var position = offset
    self.init(size: reader.size - offset, window: window) { buffer in
      let count = try reader.read(at: position, into: buffer)
      position += Int64(count)
      return count
    }
  }

  deinit { window.deallocate() }

  /// An upper bound for a count of records still to come (each takes at least one byte).
  var remaining: Int { size.map { Int(clamping: max(0, $0 - consumed)) } ?? Int.max }

  /// How many bytes the window holds now (it grows for a record longer than it).
  var windowSize: Int { window.count }

  /// The next record, parsed by `parse` from the bytes that follow, which it consumes.
  func record<T>(_ parse: (inout ByteReader) throws -> T) throws -> T {
    while true {
      var reader = ByteReader(UnsafeRawBufferPointer(rebasing: window[start..<end]))
      do {
        let value = try parse(&reader)
        consume(reader.position)
        return value
      } catch {
        guard reader.ranShort else { throw error }
        guard !sourceEnded else {
          endedInsideRecord = true
          throw error
        }
        try fill()
      }
    }
  }

  /// Whether every byte has been consumed (reading on to find out).
  func isAtEnd() throws -> Bool {
    if start == end && !sourceEnded { try fill() }
    return start == end
  }

  private func consume(_ count: Int) {
    guard count > 0 else { return }
    hasher?.update(UnsafeRawBufferPointer(rebasing: window[start..<(start + count)]))
    start += count
    consumed += Int64(count)
  }

  /// Moves what is left to the front, grows the window when one record fills it (and shrinks
  /// it back after), then reads until it is full or the source ends.
  private func fill() throws {
    let pending = end - start
    if pending == window.count {
      resize(to: window.count * 2)
    } else if window.count > 4 * initialWindow && pending <= initialWindow {
      resize(to: initialWindow)
    } else if start > 0 {
      if pending > 0 { memmove(window.baseAddress!, window.baseAddress! + start, pending) }
      start = 0
      end = pending
    }
    while end < window.count {
      let count = try source(UnsafeMutableRawBufferPointer(rebasing: window[end...]))
      guard count > 0 else {
        sourceEnded = true
        return
      }
      end += count
    }
  }

  private func resize(to count: Int) {
    let pending = end - start
    let resized = UnsafeMutableRawBufferPointer.allocate(byteCount: count, alignment: 16)
    if pending > 0 { resized.baseAddress!.copyMemory(from: window.baseAddress! + start, byteCount: pending) }
    window.deallocate()
    window = resized
    start = 0
    end = pending
  }
}
