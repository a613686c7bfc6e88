// Imports of archives nobody here wrote: damaged ones (refused, or imported with --lenient),
// empty ones, sparse ones (holes kept), disk bombs, whole-home tars, Xcode .xcappdata packages,
// and sources that change between the two passes.

import AppboxArchive
import AppboxContainer
import AppboxCore
import AppboxPlist
import AppboxTestSupport
import Foundation
import Glibc
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

/// Bytes allocated on disk for the file at `path`.
func allocatedBytes(_ path: String) throws -> Int64 {
  try FileDescriptor.open(path, O_RDONLY).closeAfter { try $0.status().allocatedBytes }
}

/// Makes `path` a file of `size` bytes holding `data` at `offset` and holes elsewhere.
func makeSparseFile(_ path: String, size: Int64, data: [UInt8], at offset: Int64) throws {
  let fd = try FileDescriptor.open(path, O_WRONLY | O_CREAT | O_TRUNC, mode: 0o644)
  try fd.closeAfter { fd in
    try fd.truncate(to: size)
    try data.withUnsafeBytes { try fd.writeAll($0, at: offset) }
  }
}

/// Observes an import and runs `action` once when the build pass starts.
final class BetweenPasses: EngineObserver, @unchecked Sendable {
  let action: () -> Void
  private var done = false
  init(_ action: @escaping () -> Void) { self.action = action }
  func engine(_ event: EngineEvent) {
    if case .stage("extract") = event, !done {
      done = true
      action()
    }
  }
}

struct ImportInputsTests {
  func prepared() throws -> (Fixture, [[UInt8]: CapturedEntry]) {
    let fixture = try Fixture()
    try fixture.write("Documents/keep.txt", "keep me")
    return (fixture, try captureTree(fixture.home))
  }

  func refusal(_ body: () throws -> Void) -> String? {
    do {
      try body()
      return nil
    } catch let error as BackupError where error.kind == .badData {
      return error.message
    } catch {
      return "unexpected: \(error)"
    }
  }

  /// libarchive's `test_read_format_tar_V_negative_size.tar`, in spirit: a GNU volume header
  /// with a negative base-256 size, which libarchive 3.6.2 reads as the end of an empty archive.
  @Test func anArchiveWithNoMembersIsRefusedUnlessEmptyIsAllowed() throws {
    let (fixture, before) = try prepared()
    var tar = RawTar()
    tar.header("volume", type: "V", size: 0)
    var block = Array(tar.bytes[0..<512])
    for index in 124..<136 { block[index] = 0xFF }
    for index in 148..<156 { block[index] = UInt8(ascii: " ") }
    let sum = String(block.reduce(0) { $0 + Int($1) }, radix: 8)
    for (index, byte) in (String(repeating: "0", count: 6 - sum.count) + sum).utf8.enumerated() {
      block[148 + index] = byte
    }
    block[154] = 0
    let damaged = fixture.dir.url("damaged.tar")
    FileManager.default.createFile(atPath: damaged, contents: Data(block))
    let message = refusal { _ = try fixture.session.importData(into: fixture.app, from: damaged) }
    #expect(message?.contains("no members") == true, "\(message ?? "imported")")
    expectSame(before, try captureTree(fixture.home))

    // An archive that really is empty, with --allow-empty: Documents and Library end up empty.
    let empty = fixture.dir.url("empty.tar")
    FileManager.default.createFile(atPath: empty, contents: Data(count: 1024))
    #expect(refusal { _ = try fixture.session.importData(into: fixture.app, from: empty) } != nil)
    _ = try fixture.session.importData(
      into: fixture.app, from: empty, options: ImportOptions(allowEmpty: true))
    #expect(fixture.names(in: "Documents").isEmpty)
    #expect(fixture.names(in: "Library") == ["Caches", "Preferences"])
  }

  /// Go's `pax-bad-hdr-file.tar` and kin: libarchive warns and reads around a malformed pax
  /// record. Refused; with --lenient imported, and the warning reported.
  @Test func anArchiveLibarchiveWarnsAboutIsRefusedUnlessLenient() throws {
    let (fixture, before) = try prepared()
    var tar = RawTar()
    tar.paxRaw(Array("30 path=Documents/elsewhere/x".utf8))
    tar.header("Documents/file.txt", size: 2)
    tar.data(Array("ok".utf8))
    tar.end()
    let archive = fixture.dir.url("bad-pax.tar")
    FileManager.default.createFile(atPath: archive, contents: Data(tar.bytes))
    let message = refusal { _ = try fixture.session.importData(into: fixture.app, from: archive) }
    #expect(
      message?.contains("damaged") == true && message?.contains("--lenient") == true, "\(message ?? "")")
    expectSame(before, try captureTree(fixture.home))

    let observer = RecordingObserver()
    let report = try fixture.session.importData(
      into: fixture.app, from: archive, options: ImportOptions(lenient: true), observer: observer)
    #expect(report.warnings.count == 1)
    #expect(observer.warnings.contains { $0.contains("malformed") })
    #expect(fixture.names(in: "Documents") == ["file.txt"])
  }

  /// Go's `nil-uid.tar` under Documents: an old GNU header whose `realsize` field (for sparse
  /// files only) is set; libarchive 3.6.2 reported 2,176 bytes for a 14-byte file.
  @Test func aMemberIsAsLongAsItsDataAsGNUTarAndTarfileRead() throws {
    let fixture = try Fixture()
    var tar = RawTar()
    tar.gnuHeader("Documents/P1050238.JPG.log", size: 14, realSize: 2176)
    tar.data(Array("44,44,POWERON\0".utf8))
    tar.end()
    let archive = fixture.dir.url("eyefi.tar")
    FileManager.default.createFile(atPath: archive, contents: Data(tar.bytes))
    _ = try fixture.session.importData(into: fixture.app, from: archive)
    let imported = try Data(contentsOf: URL(fileURLWithPath: fixture.path("Documents/P1050238.JPG.log")))
    let gnu = try runProcess("/usr/bin/tar", ["-xOf", archive])
    #expect(Array(imported) == gnu.stdout && imported.count == 14)
  }

  /// Go's `gnu-nil-sparse-hole.tar`, `pax-nil-sparse-hole.tar` and libarchive's
  /// `gtar_sparse_length`: sparse members that end in a hole, in every GNU tar sparse format.
  @Test(arguments: ["gnu", "posix-0.0", "posix-0.1", "posix-1.0"])
  func sparseMembersEndingInAHoleImportWithTheirHoles(_ format: String) throws {
    let fixture = try Fixture()
    let source = fixture.dir.url("src")
    try FileManager.default.createDirectory(atPath: source + "/Documents", withIntermediateDirectories: true)
    let data = [UInt8](repeating: 0x5A, count: 10_000)
    try makeSparseFile(source + "/Documents/tail.db", size: 8 << 20, data: data, at: 1 << 20)
    let archive = fixture.dir.url("sparse.tar")
    var arguments = ["--sparse", "-C", source, "-cf", archive, "Documents"]
    arguments.insert(
      contentsOf: format == "gnu"
        ? ["--format=gnu"] : ["--format=posix", "--sparse-version=\(format.dropFirst(6))"],
      at: 0)
    let made = try runProcess("/usr/bin/tar", arguments)
    #expect(made.status == 0, "\(made.err)")
    _ = try fixture.session.importData(into: fixture.app, from: archive)
    let imported = fixture.path("Documents/tail.db")
    #expect(try allocatedBytes(imported) < 1 << 20, "the holes were filled")
    var expected = Data(count: 8 << 20)
    expected.replaceSubrange((1 << 20)..<(1 << 20) + data.count, with: data)
    #expect(try Data(contentsOf: URL(fileURLWithPath: imported)) == expected)
  }

  /// A 10 KB archive declaring a 100 GiB sparse file: refused by the apparent-size cap (exit 65)
  /// before anything is written; with the cap raised, imported as holes that take no space.
  @Test func aDiskBombIsRefusedAndHolesStayHolesWhenAllowed() throws {
    let (fixture, before) = try prepared()
    let archive = fixture.dir.url("bomb.tar")
    let fd = try FileDescriptor.open(archive, O_WRONLY | O_CREAT | O_TRUNC)
    try fd.closeAfter { fd in
      let writer = try ArchiveWriter(fileDescriptor: fd.rawValue, compression: .none)
      var entry = ArchiveEntry.file(Array("Documents/bomb.img".utf8), size: 100 << 30)
      entry.sparseRegions = [ArchiveDataRegion(offset: 50 << 30, length: 4096)]
      try writer.writeHeader(entry)
      try writer.writeZeros(50 << 30)
      try writer.writeData([UInt8](repeating: 1, count: 4096))
      try writer.writeZeros((50 << 30) - 4096)
      try writer.finishEntry()
      try writer.finish()
    }
    #expect(try FileDescriptor.open(archive, O_RDONLY).closeAfter { try $0.status().size } < 20_000)
    let message = refusal { _ = try fixture.session.importData(into: fixture.app, from: archive) }
    #expect(message?.contains("--max-size") == true, "\(message ?? "imported")")
    expectSame(before, try captureTree(fixture.home))

    let limits = ImportLimits(maxBytes: 200 << 30)
    _ = try fixture.session.importData(
      into: fixture.app, from: archive, options: ImportOptions(limits: limits))
    let bomb = fixture.path("Documents/bomb.img")
    #expect(try FileManager.default.attributesOfItem(atPath: bomb)[.size] as? Int64 == 100 << 30)
    #expect(try allocatedBytes(bomb) < 1 << 20)
  }

  /// `tar -C HOME .`: `./` prefixes, the bundle, tmp and Library/Caches, all skipped with one
  /// warning line; a stray top-level file still refuses the archive.
  @Test func aWholeHomeTarImportsItsDataWithOneWarning() throws {
    let source = try Fixture()
    try populate(source)
    try FileManager.default.removeItem(atPath: source.path("Documents/pipe"))
    var expected = try source.captureData()
    expected[Array(Home.metadataFile.utf8)] = nil
    let archive = source.dir.url("home.tar")
    let made = try runProcess(
      "/usr/bin/tar", ["--format=pax", "--xattrs", "-C", source.home, "-cf", archive, "."])
    #expect(made.status == 0, "\(made.err)")

    let fixture = try Fixture()
    try fixture.write("tmp/mine", "tmp is left alone")
    let observer = RecordingObserver()
    let report = try fixture.session.importData(into: fixture.app, from: archive, observer: observer)
    var imported = try fixture.captureData()
    imported[Array(Home.metadataFile.utf8)] = nil
    expectSame(expected, imported)
    let skipped = observer.warnings.filter { $0.hasPrefix("skipped") }
    #expect(skipped.count == 1)
    for part in ["Notes.app", "tmp (1 member)", "Library/Caches (1 member)", Home.metadataFile] {
      #expect(skipped.first?.contains(part) == true, "\(skipped)")
    }
    #expect(report.skipped.map(\.path).contains("Notes.app"))
    #expect(fixture.names(in: "tmp") == ["mine"])
    #expect(fixture.names(in: "Library/Caches").isEmpty)
    #expect(try Seal.verify(bundleAt: fixture.path("Notes.app"), expectedDigest: fixture.app.seal).isValid)

    try source.write("stray.txt", "not a part of any home")
    let before = try captureTree(fixture.home)
    let stray = source.dir.url("stray.tar")
    _ = try runProcess("/usr/bin/tar", ["-C", source.home, "-cf", stray, "."])
    let message = refusal { _ = try fixture.session.importData(into: fixture.app, from: stray) }
    #expect(message?.contains("outside Documents and Library") == true, "\(message ?? "imported")")
    expectSame(before, try captureTree(fixture.home))
  }

  /// Export as an .xcappdata package and import it back, as a directory, as a tar of the
  /// package and as a tar of its contents: the same Documents and Library each time.
  @Test func anXcappdataRoundTripIsByteExact() throws {
    let fixture = try Fixture()
    try populate(fixture)
    let observer = RecordingObserver()
    let package = fixture.dir.url("Notes.xcappdata")
    let report = try fixture.session.exportAppData(of: fixture.app, to: package, observer: observer)
    #expect(report.skippedSpecialFiles == ["Documents/pipe"])
    #expect(observer.warnings.contains { $0.contains("Documents/pipe") })
    try FileManager.default.removeItem(atPath: fixture.path("Documents/pipe"))
    _ = try fixture.session.exportAppData(of: fixture.app, to: package)
    let expected = try fixture.captureData()
    #expect(
      try FileManager.default.contentsOfDirectory(atPath: package).sorted() == [
        "AppData", "AppDataInfo.plist",
      ])
    #expect(
      try FileManager.default.contentsOfDirectory(atPath: package + "/AppData").sorted() == [
        "Documents", "Library", "tmp",
      ])
    let info = try PropertyList.decode(Data(contentsOf: URL(fileURLWithPath: package + "/AppDataInfo.plist")))
    #expect(info["CFBundleIdentifier"]?.string == "com.example.notes")
    expectSame(
      try captureTree(fixture.home + "/Documents"), try captureTree(package + "/AppData/Documents"))

    let whole = fixture.dir.url("package.tar")
    let inside = fixture.dir.url("inside.tar")
    _ = try runProcess(
      "/usr/bin/tar", ["--format=pax", "--xattrs", "-C", fixture.dir.path, "-cf", whole, "Notes.xcappdata"])
    _ = try runProcess("/usr/bin/tar", ["--format=pax", "--xattrs", "-C", package, "-cf", inside, "."])
    for source in [package, whole, inside] {
      try fixture.write("Documents/a.txt", "changed")
      try fixture.write("Documents/stray", "goes away")
      let imported = try fixture.session.importData(into: fixture.app, from: source)
      #expect(imported.format == .xcappdata)
      #expect(imported.skipped.isEmpty, "\(imported.skipped)")
      expectSame(expected, try fixture.captureData())
    }

    // Replacing: a package is replaced whole; anything else is left alone.
    try fixture.write("Documents/new.txt", "new")
    _ = try fixture.session.exportAppData(of: fixture.app, to: package)
    #expect(FileManager.default.fileExists(atPath: package + "/AppData/Documents/new.txt"))
    let other = fixture.dir.url("NotAPackage")
    try FileManager.default.createDirectory(atPath: other, withIntermediateDirectories: false)
    FileManager.default.createFile(atPath: other + "/precious", contents: Data("mine".utf8))
    #expect(throws: BackupError.self) { _ = try fixture.session.exportAppData(of: fixture.app, to: other) }
    #expect(FileManager.default.fileExists(atPath: other + "/precious"))
  }

  /// Sparse files go out (tar and package) and come back with their holes.
  @Test func exportsAndImportsKeepHoles() throws {
    let fixture = try Fixture()
    let data = Array("the only data".utf8)
    try makeSparseFile(fixture.path("Documents/disk.img"), size: 256 << 20, data: data, at: 128 << 20)
    let archive = fixture.dir.url("sparse.tar")
    _ = try fixture.session.exportData(of: fixture.app, to: archive)
    #expect(try FileDescriptor.open(archive, O_RDONLY).closeAfter { try $0.status().size } < 100_000)
    let package = fixture.dir.url("sparse.xcappdata")
    _ = try fixture.session.exportAppData(of: fixture.app, to: package)
    #expect(try allocatedBytes(package + "/AppData/Documents/disk.img") < 1 << 20)
    for source in [archive, package] {
      try FileManager.default.removeItem(atPath: fixture.path("Documents/disk.img"))
      _ = try fixture.session.importData(into: fixture.app, from: source)
      let path = fixture.path("Documents/disk.img")
      #expect(try allocatedBytes(path) < 1 << 20)
      let fd = try FileDescriptor.open(path, O_RDONLY)
      try fd.closeAfter { fd in
        #expect(try fd.status().size == 256 << 20)
        var buffer = [UInt8](repeating: 0xEE, count: data.count)
        _ = try buffer.withUnsafeMutableBytes { try fd.read(into: $0, at: 128 << 20) }
        #expect(buffer == data)
      }
    }
  }

  /// An import reads its source twice; what the second pass reads must be what was checked.
  @Test func aSourceThatChangesBetweenThePassesIsRefused() throws {
    let (fixture, before) = try prepared()
    let package = fixture.dir.url("moving.xcappdata")
    try FileManager.default.createDirectory(
      atPath: package + "/AppData/Documents", withIntermediateDirectories: true)
    FileManager.default.createFile(atPath: package + "/AppData/Documents/a.txt", contents: Data("first".utf8))
    let swap = BetweenPasses {
      FileManager.default.createFile(
        atPath: package + "/AppData/Documents/a.txt", contents: Data("second!".utf8))
    }
    let message = refusal {
      _ = try fixture.session.importData(into: fixture.app, from: package, observer: swap)
    }
    #expect(message?.contains("reads differently") == true, "\(message ?? "imported")")
    expectSame(before, try captureTree(fixture.home))
  }

  /// A package is read through descriptors: a symlink is a member, never a way out.
  @Test func aPackageDirectoryIsReadWithoutFollowingLinks() throws {
    let fixture = try Fixture()
    let package = fixture.dir.url("links.xcappdata")
    try FileManager.default.createDirectory(
      atPath: package + "/AppData/Documents", withIntermediateDirectories: true)
    try FileManager.default.createSymbolicLink(
      atPath: package + "/AppData/Library", withDestinationPath: "/etc")
    let (_, before) = (fixture, try captureTree(fixture.home))
    let message = refusal { _ = try fixture.session.importData(into: fixture.app, from: package) }
    #expect(message?.contains("Library") == true, "\(message ?? "imported")")
    expectSame(before, try captureTree(fixture.home))

    try FileManager.default.removeItem(atPath: package + "/AppData/Library")
    try FileManager.default.createSymbolicLink(
      atPath: package + "/AppData/Documents/passwd", withDestinationPath: "/etc/passwd")
    _ = try fixture.session.importData(into: fixture.app, from: package)
    #expect(
      try FileManager.default.destinationOfSymbolicLink(atPath: fixture.path("Documents/passwd"))
        == "/etc/passwd")
  }
}
