import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

/// The scan walks with descriptors only: depth is limited neither by PATH_MAX nor by the
/// number of descriptors a process may open.
struct ScannerTests {
  /// Makes `levels` nested directories named `name` under `start` (a path relative to the
  /// temp directory), with a file at the bottom; returns the temp directory.
  func chain(levels: Int, name: String, in dir: TemporaryDirectory) throws {
    var current = try FileDescriptor.open(dir.url("Documents"), O_RDONLY | O_DIRECTORY)
    for _ in 0..<levels {
      try current.makeDirectory(name, mode: 0o755)
      let next = try current.open(name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
      current.close()
      current = next
    }
    let file = try current.open("bottom.txt", O_WRONLY | O_CREAT | O_EXCL, mode: 0o644)
    try file.closeAfter { try $0.writeAll(Array("bottom".utf8)) }
    current.close()
  }

  func scan(
    _ dir: TemporaryDirectory, descriptorBudget: Int = 256, workers: Int = AppboxBackup.Scanner.defaultWorkers
  ) throws -> (AppboxBackup.Scanner, [ScannedDirectory]) {
    let home = try OwnedFileDescriptor.open(dir.path, O_RDONLY | O_DIRECTORY)
    let scanner = AppboxBackup.Scanner(
      home: home.borrowed, rules: ScanRules(bundleDirectoryName: "Notes.app", includeBundle: false),
      catalogPath: nil, previousRoot: nil, trustedBefore: 0, observer: SilentObserver(),
      descriptorBudget: descriptorBudget, workers: workers)
    var directories: [ScannedDirectory] = []
    while let directory = try scanner.next() {
      directory.handle = nil  // as the reader does once it has read the directory's files
      directories.append(directory)
    }
    scanner.finish()
    return (scanner, directories)
  }

  /// The consumer scans the next directory itself when no worker has taken it: with no
  /// worker (the consumer alone), one or two, the same directories come in the same
  /// depth-first order with the same entries, each directory once.
  @Test func theSameDirectoriesComeInTheSameOrderWhoeverScansThem() throws {
    let dir = TemporaryDirectory("scan-order")
    try generateData(home: dir.path, shape: HomeShape(files: 1500, bytes: 3_000_000, seed: 5))
    func listing(_ workers: Int) throws -> [String] {
      let (scanner, directories) = try scan(dir, workers: workers)
      #expect(scanner.unreadableCount == 0)
      return directories.map { directory in
        String(decoding: directory.path, as: UTF8.self) + ": "
          + directory.entries.map { String(decoding: directory.name(of: $0), as: UTF8.self) }.joined(separator: " ")
      }
    }
    let alone = try listing(0)
    #expect(alone.count > 50)
    #expect(Set(alone).count == alone.count)
    // Depth-first pre-order, names in byte order: the order of the paths' component lists.
    let paths = alone.map { $0.prefix { $0 != ":" }.split(separator: "/").map { Array($0.utf8) } }
    let preOrder = paths.sorted { $0.lexicographicallyPrecedes($1) { $0.lexicographicallyPrecedes($1) } }
    #expect(paths == preOrder)
    for workers in [1, 2] {
      #expect(try listing(workers) == alone, "workers \(workers)")
    }
  }

  /// A comb: at every level a leaf `a` (listed after its sibling's whole subtree, so its
  /// job holds the parent's descriptor all that time) and `b`, which goes on. With a budget
  /// of 8 descriptors, deeper jobs open their directories by path instead: the scan still
  /// sees everything, the same as with descriptors to spare.
  @Test func pastTheDescriptorBudgetDirectoriesOpenByPath() throws {
    let dir = TemporaryDirectory("comb")
    try dir.makeDirectory("Documents")
    var current = try FileDescriptor.open(dir.url("Documents"), O_RDONLY | O_DIRECTORY)
    for level in 0..<300 {
      try current.makeDirectory("a", mode: 0o755)
      let leaf = try current.open("a", O_RDONLY | O_DIRECTORY)
      let file = try leaf.open("f\(level)", O_WRONLY | O_CREAT | O_EXCL, mode: 0o644)
      file.close()
      leaf.close()
      try current.makeDirectory("b", mode: 0o755)
      let next = try current.open("b", O_RDONLY | O_DIRECTORY)
      current.close()
      current = next
    }
    current.close()
    for budget in [8, 1024] {
      let (scanner, directories) = try scan(dir, descriptorBudget: budget)
      #expect(scanner.unreadableCount == 0)
      #expect(directories.count == 2 + 600)
      let files = directories.reduce(0) { $0 + $1.entries.filter { $0.type == .file }.count }
      #expect(files == 300, "budget \(budget)")
    }
  }

  @Test func aTwentyThousandLevelChainIsScannedWhole() throws {
    // In memory where there is a tmpfs: removing a 20,000-level chain from a journaled disk
    // takes the better part of a minute (rm -rf as well), making it takes a second.
    let dir = TemporaryDirectory("chain", base: access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp")
    try dir.makeDirectory("Documents")
    try chain(levels: 20_000, name: "d", in: dir)
    let (scanner, directories) = try scan(dir)
    #expect(directories.count == 20_002)  // the home, Documents and the chain
    #expect(scanner.unreadableCount == 0)
    let deepest = try #require(directories.max { $0.pathLength < $1.pathLength })
    #expect(deepest.pathLength == "Documents".utf8.count + 20_000 * 2)
    #expect(deepest.entries.map { deepest.name(of: $0) } == [Array("bottom.txt".utf8)])
    #expect(deepest.path.count == deepest.pathLength)
    // Depth-first order: each directory comes right after its parent.
    #expect(zip(directories.dropFirst(), directories).allSatisfy { $0.parent === $1 })
  }

  /// Beyond 64 KiB of path, entries are left out and reported (a tar member repeats its
  /// whole path: unbounded depth would let an app grow an archive quadratically).
  @Test func entriesDeeperThanTheLongestStoredPathAreReportedUnreadable() throws {
    let dir = TemporaryDirectory("deep-names")
    try dir.makeDirectory("Documents")
    let name = String(repeating: "n", count: 255)
    try chain(levels: 260, name: name, in: dir)  // 260 * 256 bytes: past 65,536
    let (scanner, directories) = try scan(dir)
    #expect(scanner.unreadableCount == 1)
    let entry = try #require(scanner.unreadable.first)
    #expect(entry.reason == "its path is longer than 65536 bytes")
    #expect(entry.path.count > ScanRules.maximumPathLength)
    #expect(directories.allSatisfy { $0.pathLength <= ScanRules.maximumPathLength })
    #expect(directories.count == 2 + 255)  // the levels whose paths fit
  }
}

struct BackupFailureMessageTests {
  /// A failure that is not the app's doing names the operation and the path, in
  /// SystemError's words (it used to read "cannot read link it").
  @Test func failuresNameTheOperationAndThePath() {
    let error = backupFailure(SystemError("read link", path: nil, errno: .ioError), path: "Documents/x")
    #expect(error.description == "Unable to read link 'Documents/x': input/output error")
    #expect(error.kind == .io)
  }
}

struct RepositoryCreationTests {
  /// The error names the errno of the mkdir that failed (it used to read errno after a
  /// Foundation call, whatever it held by then).
  @Test func aRepositoryUnderAFileFailsWithNotADirectory() throws {
    let dir = TemporaryDirectory("repo-under-file")
    try dir.write("file", "x")
    do {
      _ = try Repository(path: dir.url("file/repository"))
      Issue.record("made a repository under a file")
    } catch let error as SystemError {
      #expect(error.errno == .notDirectory)
      #expect(
        error.description == "Unable to create directory '\(dir.url("file/repository"))': not a directory")
    }
  }
}
