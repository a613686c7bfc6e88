// Our archives through the real GNU tar (1.34 here) and GNU tar's archives through our reader.
// Names are compared as the bytes readdir(3) returns, never as Strings.

import AppboxArchive
import Foundation
import Testing

#if canImport(Glibc)
  import Glibc
#endif

private let tar = "/usr/bin/tar"
private let hdrcharsetWarning = "/usr/bin/tar: Ignoring unknown extended header keyword 'hdrcharset'"

private func isValidUTF8(_ bytes: [UInt8]) -> Bool { String(validating: bytes, as: UTF8.self) != nil }

@Suite struct GNUTarInteropTests {
  @Test(arguments: ArchiveCompression.allCases)
  func gnuTarListsAndExtractsOurArchive(compression: ArchiveCompression) throws {
    try withTemporaryDirectory { dir in
      // Names and link targets that are not UTF-8 have their own test below.
      let members = sampleMembers().filter {
        isValidUTF8($0.entry.path) && isValidUTF8($0.entry.linkTarget ?? [])
      }
      let archive = dir + "/backup" + compression.fileSuffix
      try writeArchive(members, to: archive, compression: compression)

      let listing = try runTool(tar, ["--quoting-style=literal", "-tvf", archive])
      #expect(listing.status == 0)
      #expect(listing.stderr == "")
      let lines = String(decoding: listing.stdout, as: UTF8.self).split(separator: "\n").map(String.init)
      #expect(lines.count == members.count)
      #expect(lines.contains { $0.hasPrefix("-rwsr-xr-x") && $0.hasSuffix(" Library/tool") })
      #expect(
        lines.contains { $0.hasPrefix("lrwxrwxrwx") && $0.hasSuffix(" Documents/escape -> ../../etc/passwd") }
      )
      #expect(
        lines.contains {
          $0.hasPrefix("hrw-r--r--") && $0.hasSuffix(" Documents/hard link to Documents/a.txt")
        })
      #expect(lines.contains { $0.contains(" mobile/staff ") && $0.hasSuffix(" Library/owned") })
      #expect(lines.contains { $0.hasSuffix(" Documents/naïve 日本.txt") })

      try FileManager.default.createDirectory(atPath: dir + "/out", withIntermediateDirectories: false)
      let extract = try runTool(
        tar, ["--xattrs", "--xattrs-include=user.*", "-xpf", archive, "-C", dir + "/out"])
      #expect(extract.status == 0)
      #expect(extract.stderr == "")
      try checkExtracted(members, in: dir + "/out")
    }
  }

  @Test(arguments: ["C", "C.UTF-8"])
  func namesThatAreNotUTF8ExtractByteForByte(tarLocale: String) throws {
    try withTemporaryDirectory { dir in
      let raw: [UInt8] = [0x66, 0xFF, 0x66]
      let rawDirectory = b("Dir-") + [0xFE, 0x80]
      let members = [
        Member(entry: .file(raw, size: 3), data: b("raw")),
        Member(entry: .directory(rawDirectory)),
        Member(entry: .file(rawDirectory + b("/x"), size: 1), data: b("x")),
        Member(entry: .symlink(b("link"), target: raw)),
        Member(entry: .file(b("Documents-naïve 日本.txt"), size: 0)),
        Member(entry: .file(b("Café"), size: 0)),
      ]
      let archive = dir + "/a.tar"
      try writeArchive(members, to: archive)

      try FileManager.default.createDirectory(atPath: dir + "/out", withIntermediateDirectories: false)
      let extract = try runTool(tar, ["-xf", archive, "-C", dir + "/out"], locale: tarLocale)
      #expect(extract.status == 0)
      // GNU tar 1.34 does not know `hdrcharset` (the pax way to say "these bytes are not UTF-8"):
      // it warns once per such member, then uses the bytes as they are, which is what we want.
      let warnings = extract.stderr.split(separator: "\n").map(String.init)
      #expect(warnings == Array(repeating: hdrcharsetWarning, count: 4))
      #expect(
        try directoryNames(b(dir + "/out")) == [
          raw, rawDirectory, b("link"), b("Documents-naïve 日本.txt"), b("Café"),
        ])
      #expect(try directoryNames(join(dir + "/out", rawDirectory)) == [b("x")])
      #expect(try readFile(join(dir + "/out", raw)) == b("raw"))
      #expect(try readLink(join(dir + "/out", b("link"))) == raw)

      let quiet = try runTool(
        tar, ["--warning=no-unknown-keyword", "--quoting-style=literal", "-tf", archive], locale: tarLocale)
      #expect(quiet.status == 0)
      #expect(quiet.stderr == "")
      let expected = members.map { $0.entry.type == .directory ? $0.entry.path + b("/") : $0.entry.path }
      #expect(quiet.stdout == Array(expected.joined(separator: [0x0A])) + [0x0A])
    }
  }

  @Test func onlyNamesThatAreNotUTF8AreMarkedBinary() throws {
    // The UTF-8 locale is switched per call on this thread only, and switched back.
    let localeBefore = uselocale(nil)
    defer { #expect(uselocale(nil) == localeBefore) }
    try withTemporaryDirectory { dir in
      try writeArchive([Member(entry: .file(b("Documents/naïve 日本.txt"), size: 0))], to: dir + "/utf8.tar")
      try writeArchive([Member(entry: .file([0x66, 0xFF, 0x66], size: 0))], to: dir + "/raw.tar")
      let utf8 = try readFile(b(dir + "/utf8.tar"))
      let raw = try readFile(b(dir + "/raw.tar"))
      // The pax record is the UTF-8 name itself, even though this process runs in the C locale.
      #expect(utf8.firstRange(of: b(" path=Documents/naïve 日本.txt\n")) != nil)
      #expect(utf8.firstRange(of: b("hdrcharset")) == nil)
      #expect(raw.firstRange(of: b("hdrcharset=BINARY\n")) != nil)
      #expect(raw.firstRange(of: b(" path=") + [0x66, 0xFF, 0x66, 0x0A]) != nil)
    }
  }

  @Test(arguments: [("C", ""), ("C.UTF-8", ""), ("C.UTF-8", "--gzip"), ("C.UTF-8", "--zstd")])
  func weReadWhatGNUTarWrites(tarLocale: String, compressionFlag: String) throws {
    try withTemporaryDirectory { dir in
      let source = dir + "/home"
      let raw: [UInt8] = [0x66, 0xFF, 0x66]
      try FileManager.default.createDirectory(
        atPath: source + "/Documents", withIntermediateDirectories: true)
      let files: [[UInt8]: [UInt8]] = [
        b("Documents/a.txt"): b("lower"), b("Documents/A.txt"): b("UPPER"),
        b("Documents/naïve 日本.txt"): b("utf"), b("Documents/") + raw: b("raw"),
        b("Documents/big.bin"): patternBytes(count: 1_000_003, seed: 5),
      ]
      for (name, data) in files { try createFile(join(source, name), data, mode: 0o640) }
      try setExtendedAttribute(join(source, b("Documents/a.txt")), "user.binary", [0, 0xFF, 7])
      #expect(symlink("../../etc/passwd", source + "/Documents/escape") == 0)
      #expect(link(source + "/Documents/big.bin", source + "/Documents/big-link") == 0)
      try setModificationTime(
        join(source, b("Documents/A.txt")), seconds: 1_700_000_000, nanoseconds: 987_654_321)

      let archive = dir + "/gnu.tar"
      var arguments = [
        "--format=pax", "--xattrs", "--xattrs-include=user.*", "-cf", archive, "-C", source, ".",
      ]
      if !compressionFlag.isEmpty { arguments.insert(compressionFlag, at: 0) }
      let made = try runTool(tar, arguments, locale: tarLocale)
      try #require(made.status == 0, "tar: \(made.stderr)")

      let members = try readArchive(archive)
      let byPath = Dictionary(uniqueKeysWithValues: members.map { ($0.entry.path, $0) })
      #expect(
        Set(byPath.keys)
          == Set(files.keys).union([b("."), b("Documents"), b("Documents/escape"), b("Documents/big-link")]))
      for (name, data) in files where name != b("Documents/big.bin") {
        #expect(byPath[name]?.data == data, "\(String(decoding: name, as: UTF8.self))")
        #expect(byPath[name]?.entry.permissions == 0o640)
      }
      #expect(
        byPath[b("Documents/a.txt")]?.entry.extendedAttributes == [
          ArchiveExtendedAttribute(name: "user.binary", value: [0, 0xFF, 7])
        ])
      #expect(
        byPath[b("Documents/A.txt")]?.entry.modificationTime
          == ArchiveTimestamp(seconds: 1_700_000_000, nanoseconds: 987_654_321))
      #expect(byPath[b("Documents/escape")]?.entry.type == .symlink)
      #expect(byPath[b("Documents/escape")]?.entry.linkTarget == b("../../etc/passwd"))
      // GNU tar stores whichever of the two hard-linked names it meets first as the file.
      let pair = [b("Documents/big.bin"), b("Documents/big-link")].compactMap { byPath[$0] }
      let stored = try #require(pair.first { $0.entry.type == .regular })
      let linked = try #require(pair.first { $0.entry.type == .hardlink })
      #expect(stored.data == files[b("Documents/big.bin")])
      #expect(linked.entry.linkTarget == stored.entry.path)
    }
  }
}

/// Checks what GNU tar extracted against what we wrote: bytes, modes, mtimes, links, xattrs.
func checkExtracted(_ members: [Member], in root: String) throws {
  var inodes: [[UInt8]: ino_t] = [:]
  for member in members {
    let entry = member.entry
    let path = join(root, entry.path)
    let info = try lstatOf(path)
    inodes[entry.path] = info.st_ino
    let name = entry.displayPath
    switch entry.type {
    case .regular:
      #expect(info.st_mode & Glibc.S_IFMT == Glibc.S_IFREG, "\(name)")
      #expect(try readFile(path) == member.data, "\(name)")
    case .directory:
      #expect(info.st_mode & Glibc.S_IFMT == Glibc.S_IFDIR, "\(name)")
    case .symlink:
      #expect(try readLink(path) == entry.linkTarget, "\(name)")
    case .hardlink:
      #expect(inodes[entry.linkTarget ?? []] == info.st_ino, "\(name)")
    case .other(let bits):
      #expect(UInt32(info.st_mode & Glibc.S_IFMT) == bits, "\(name)")
    }
    if entry.type != .symlink && entry.type != .hardlink {
      #expect(UInt32(info.st_mode) & 0o7777 == entry.permissions, "\(name)")
      #expect(Int64(info.st_mtim.tv_sec) == entry.modificationTime.seconds, "\(name)")
      #expect(Int32(info.st_mtim.tv_nsec) == entry.modificationTime.nanoseconds, "\(name)")
    }
    if geteuid() == 0 && entry.type == .regular {
      #expect(info.st_uid == entry.uid, "\(name)")
    }
    for attribute in entry.extendedAttributes {
      #expect(getExtendedAttribute(path, attribute.name) == attribute.value, "\(name) \(attribute.name)")
    }
  }
}
