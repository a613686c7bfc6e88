// Paths as raw bytes, handled with memchr, memmem and memcmp: the walks that must cost
// O(entries) whatever the depth see every byte of long paths (a member 10,000 levels deep has a
// 20 KB name), so they must touch each path a constant number of times with libc's vectorised
// scans, never once per component (O(depth²) for a chain) or with a Swift loop over bytes (and
// generic algorithms such as `split` or `elementsEqual` cost far more in a debug build, where
// the standard library's generics are not specialised).

import CSystem
import Glibc

/// The ranges of the `/`-separated components of `path`, empty ones included (so `a//b` has
/// three and `a/` two), found with memchr.
public func componentRanges(of path: [UInt8]) -> [Range<Int>] {
  var ranges: [Range<Int>] = []
  var start = 0
  while let end = nextSlash(in: path, from: start) {
    ranges.append(start..<end)
    start = end + 1
  }
  ranges.append(start..<path.count)
  return ranges
}

/// The index of the first `/` of `path` at or after `start` (memchr).
public func nextSlash(in path: [UInt8], from start: Int) -> Int? {
  guard start < path.count else { return nil }
  return path.withUnsafeBytes { raw -> Int? in
    guard let found = memchr(raw.baseAddress! + start, Int32(UInt8(ascii: "/")), raw.count - start) else {
      return nil
    }
    return raw.baseAddress!.distance(to: UnsafeRawPointer(found))
  }
}

/// Whether some component of `path` is empty, `.` or `..` (three memmem scans of the path
/// between slashes).
public func hasEmptyOrDotComponent(_ path: [UInt8]) -> Bool {
  var padded = [UInt8]()
  padded.reserveCapacity(path.count + 2)
  padded.append(UInt8(ascii: "/"))
  padded.append(contentsOf: path)
  padded.append(UInt8(ascii: "/"))
  return padded.withUnsafeBytes { raw in
    for needle in ["//", "/./", "/../"] {
      let found = needle.utf8CString.withUnsafeBufferPointer { pattern in
        appbox_memmem(raw.baseAddress!, raw.count, pattern.baseAddress!, pattern.count - 1)
      }
      if found != nil { return true }
    }
    return false
  }
}

/// Whether `a[0..<count]` equals `b[0..<count]` (memcmp; both must be that long).
@inlinable
public func prefixesEqual(_ a: [UInt8], _ b: [UInt8], count: Int) -> Bool {
  guard count > 0 else { return true }
  return a.withUnsafeBytes { x in
    b.withUnsafeBytes { y in memcmp(x.baseAddress!, y.baseAddress!, count) == 0 }
  }
}

/// How many leading components `path` shares with a path `previous` whose first components end
/// at `ends` (`ends[i]` is the index just past component `i`), counting only components of
/// `path` that are followed by a slash (its parents). A binary search of memcmps over the
/// prefix: O(length · log depth) bytes compared, never one comparison per level.
public func sharedParentComponents(of path: [UInt8], with previous: [UInt8], ends: [Int]) -> Int {
  let slash = UInt8(ascii: "/")
  func shares(_ count: Int) -> Bool {
    guard count > 0 else { return true }
    let end = ends[count - 1]
    return end < path.count && path[end] == slash && end <= previous.count
      && prefixesEqual(path, previous, count: end)
  }
  var low = 0  // shares(low) holds
  var high = ends.count  // shares(k) for k > high does not
  if shares(high) { return high }
  while high - low > 1 {
    let middle = (low + high) / 2
    if shares(middle) { low = middle } else { high = middle }
  }
  return low
}

/// Whether two byte sequences are equal (memcmp).
@inlinable
public func bytesEqual(_ a: ArraySlice<UInt8>, _ b: ArraySlice<UInt8>) -> Bool {
  guard a.count == b.count else { return false }
  return a.withUnsafeBytes { x in
    b.withUnsafeBytes { y in x.count == 0 || memcmp(x.baseAddress!, y.baseAddress!, x.count) == 0 }
  }
}

/// Whether two byte arrays are equal (memcmp).
@inlinable
public func bytesEqual(_ a: [UInt8], _ b: ArraySlice<UInt8>) -> Bool { bytesEqual(a[...], b) }

/// The index of the last `/` of `path`, if any (memrchr).
public func lastSlash(in path: [UInt8]) -> Int? {
  path.withUnsafeBytes { raw -> Int? in
    guard let base = raw.baseAddress, let found = appbox_memrchr(base, Int32(UInt8(ascii: "/")), raw.count)
    else {
      return nil
    }
    return base.distance(to: found)
  }
}
