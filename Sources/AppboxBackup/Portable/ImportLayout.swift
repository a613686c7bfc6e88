// Where an imported member belongs in the home, for the three layouts import accepts:
//
// - appbox's own export, or any tar of Documents and Library: `Documents/...`, `Library/...`.
// - a whole home (`tar -C HOME .`): the same plus `./`, the bundle `<Name>.app/`, `tmp/`,
//   `Library/Caches/` and the container metadata file, which import never replaces: they are
//   skipped and counted, for one warning line.
// - an Xcode app-data package (`.xcappdata`, as `simctl` and Xcode's "Download Container"
//   make): `AppDataInfo.plist` and `AppData/{Documents,Library,tmp}`, as a directory or a tar
//   of one, with or without the `<Name>.xcappdata/` folder around it. `AppData/` is read as a
//   home; `AppDataInfo.plist` and `AppData/SystemData` are the package's own and skipped.
//
// The first member decides the layout; every later member must fit it. Anything else at the
// top (`etc/`, `.appbox/`, a stray file) is refused as before: skipping is only for the parts
// of a home that import leaves alone. Paths are raw bytes, already normalised by the reader
// (no leading `./`, no trailing `/`); `..` and absolute paths reach the validator unchanged.

import AppboxContainer
import AppboxRepository

struct ImportLayout {
  enum Kind: Equatable {
    case undecided
    /// Paths are home-relative.
    case home
    /// An xcappdata package; members start with `prefix` (`Name.xcappdata/`, or nothing).
    case package(prefix: [UInt8])
  }

  /// What to do with one member.
  enum Placement: Equatable {
    /// Import it at this home-relative path.
    case home([UInt8])
    /// Part of a home that import does not replace: skip it and count it under `group`.
    case skipped(group: String)
    /// Part of the container format itself (`.`, the package folder, `AppDataInfo.plist`).
    case ignored
    /// Not a place in a home: refuse the archive.
    case outside
  }

  private(set) var kind = Kind.undecided

  private static let slash = UInt8(ascii: "/")
  private static let packageSuffix = Array(".xcappdata".utf8)
  private static let appData = Array("AppData".utf8)
  private static let appDataInfo = Array("AppDataInfo.plist".utf8)

  /// Places `path`, deciding the layout on the first member that is not `.`. The empty top
  /// directory of a skipped part (every package has `AppData/tmp`) is ignored, not counted.
  mutating func place(_ path: [UInt8], isDirectory: Bool = false) -> Placement {
    let placement = placeMember(path)
    if case .skipped(let group) = placement, isDirectory, path.ends(with: Array(group.utf8)) {
      let rest = path.dropLast(group.utf8.count)
      if rest.isEmpty || rest.last == Self.slash { return .ignored }
    }
    return placement
  }

  private mutating func placeMember(_ path: [UInt8]) -> Placement {
    if path == [UInt8(ascii: ".")] { return .ignored }
    // Only the first four components decide; the rest (a deep path's thousands) stays one
    // piece, so placing a member costs its length once.
    let components = path.split(separator: Self.slash, maxSplits: 4, omittingEmptySubsequences: false)
    if kind == .undecided {
      let first = components[0]
      if first.count > Self.packageSuffix.count && first.ends(with: Self.packageSuffix) {
        kind = .package(prefix: Array(first))
      } else if first.elementsEqual(Self.appData) || first.elementsEqual(Self.appDataInfo) {
        kind = .package(prefix: [])
      } else {
        kind = .home
      }
    }
    switch kind {
    case .undecided, .home:
      return Self.placeInHome(components[...], of: path)
    case .package(let prefix):
      var rest = components[...]
      if !prefix.isEmpty {
        guard rest.first?.elementsEqual(prefix) == true else { return .outside }
        rest = rest.dropFirst()
        if rest.isEmpty { return .ignored }
      }
      if rest.count == 1 && rest.first!.elementsEqual(Self.appDataInfo) { return .ignored }
      guard rest.first?.elementsEqual(Self.appData) == true else { return .outside }
      rest = rest.dropFirst()
      if rest.isEmpty { return .ignored }
      // The components after AppData, split again so that the home's first ones are whole.
      let start = rest.first!.startIndex
      let home = path[start...].split(separator: Self.slash, maxSplits: 2, omittingEmptySubsequences: false)
      if home[0].elementsEqual("SystemData".utf8) { return .skipped(group: "AppData/SystemData") }
      return Self.placeInHome(home[...], of: path)
    }
  }

  /// Places home-relative components (the first two whole, the last one the rest of `path`).
  private static func placeInHome(_ components: ArraySlice<ArraySlice<UInt8>>, of path: [UInt8]) -> Placement
  {
    let first = components.first!
    let whole = Array(path[first.startIndex...])
    if first.elementsEqual("Documents".utf8) { return .home(whole) }
    if first.elementsEqual("Library".utf8) {
      if components.count >= 2 && components[components.startIndex + 1].elementsEqual("Caches".utf8) {
        return .skipped(group: "Library/Caches")
      }
      return .home(whole)
    }
    if first.elementsEqual("tmp".utf8) { return .skipped(group: "tmp") }
    if first.elementsEqual(Home.metadataFile.utf8) { return .skipped(group: Home.metadataFile) }
    if first.count > 4 && first.ends(with: Array(".app".utf8)) {
      return .skipped(group: String(decoding: first, as: UTF8.self))
    }
    return .outside
  }
}

extension Collection where Element == UInt8 {
  fileprivate func ends(with suffix: [UInt8]) -> Bool {
    count >= suffix.count && dropFirst(count - suffix.count).elementsEqual(suffix)
  }
}

/// Members skipped by group, in the order the groups were first met.
struct SkippedMembers: Sendable {
  private(set) var groups: [(name: String, count: Int)] = []

  mutating func add(_ group: String) {
    if let index = groups.firstIndex(where: { $0.name == group }) {
      groups[index].count += 1
    } else {
      groups.append((group, 1))
    }
  }

  var isEmpty: Bool { groups.isEmpty }

  /// "Notes.app (12 members), tmp (1 member)".
  var summary: String {
    groups.map { "\($0.name) (\($0.count) member\($0.count == 1 ? "" : "s"))" }.joined(separator: ", ")
  }
}
