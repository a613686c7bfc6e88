import AppboxCore
import AppboxCrypto
import Foundation
import Glibc

/// One entry of a bundle, as walked.
enum BundleItem: Sendable, Equatable {
  case file(path: String, digest: Digest, size: Int64)
  case directory(path: String)
  case symlink(path: String, target: String)

  var path: String {
    switch self {
    case .file(let path, _, _), .directory(let path), .symlink(let path, _): return path
    }
  }
}

/// Walks a bundle directory with descriptors (never following a symlink), hashing every
/// regular file and noting every file's and directory's mode, and optionally mirrors it
/// into a destination directory. The source is untrusted: FIFOs, devices, sockets, names
/// that are not UTF-8, and trees that are too deep or too large are refused. A copy has
/// normalized modes: directories 0755, files 0755 when the source had any execute bit and
/// 0644 otherwise (never setuid, setgid or sticky; readable by the app's own uid, which
/// reads its root-owned bundle as "others").
///
/// Invariant: with a destination, what is hashed and noted is exactly what was written
/// there, so the seal describes the copy even if the source changes meanwhile.
struct BundleWalker {
  var maxDepth = 64
  var maxEntries = 200_000
  /// How messages name the bundle ("Notes.app").
  var bundle: String

  private func refuse(_ message: String) -> ContainerError {
    ContainerError(.invalidBundle, "Invalid bundle '\(bundle)': \(message)")
  }

  /// Walks the tree below `source`; with `destination`, creates the same tree there.
  /// Items come out in a stable order (sorted by path within each directory).
  func walk(_ source: FileDescriptor, copyingTo destination: FileDescriptor? = nil) throws -> [BundleItem] {
    var modes = BundleModes()
    return try walk(source, copyingTo: destination, modes: &modes)
  }

  /// Like `walk(_:copyingTo:)`, also noting in `modes` the mode of every directory (the
  /// top one as ".") and regular file: the copy's, with a destination, else the source's.
  func walk(_ source: FileDescriptor, copyingTo destination: FileDescriptor?, modes: inout BundleModes) throws
    -> [BundleItem]
  {
    var items: [BundleItem] = []
    modes.entries["."] = destination == nil ? try source.status().permissions : BundleModes.directoryMode
    // Each frame: the source directory, its mirror, its path (""  for the top).
    var stack: [(source: FileDescriptor, mirror: FileDescriptor?, path: String, depth: Int)] = []
    stack.append((try source.duplicate(), try destination?.duplicate(), "", 0))
    defer {
      for frame in stack {
        frame.source.close()
        frame.mirror?.close()
      }
    }
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 256 * 1024, alignment: 16)
    defer { buffer.deallocate() }

    while let frame = stack.popLast() {
      defer {
        frame.source.close()
        frame.mirror?.close()
      }
      let entries = try frame.source.entries().sorted { $0.name.lexicographicallyPrecedes($1.name) }
      var subdirectories: [(source: FileDescriptor, mirror: FileDescriptor?, path: String, depth: Int)] = []
      for entry in entries {
        guard let name = String(validating: entry.name, as: UTF8.self) else {
          throw refuse("a file name under '\(frame.path.isEmpty ? "." : frame.path)' is not valid UTF-8")
        }
        let path = frame.path.isEmpty ? name : frame.path + "/" + name
        if items.count >= maxEntries { throw refuse("more than \(maxEntries) files") }
        let status = try frame.source.status(of: name)
        switch status.type {
        case .regular:
          let (digest, size, mode) = try copyFile(
            name, path: path, from: frame.source, to: frame.mirror, buffer: buffer)
          items.append(.file(path: path, digest: digest, size: size))
          modes.entries[path] = mode
        case .directory:
          if frame.depth + 1 > maxDepth { throw refuse("directories nested deeper than \(maxDepth) levels") }
          let child = try frame.source.open(name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, displayPath: path)
          var mirror: FileDescriptor?
          if let parentMirror = frame.mirror {
            do {
              try parentMirror.makeDirectory(name, mode: BundleModes.directoryMode)
              mirror = try parentMirror.open(name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, displayPath: path)
              try mirror?.setPermissions(BundleModes.directoryMode)  // whatever the umask
            } catch {
              mirror?.close()
              child.close()
              throw error
            }
          }
          items.append(.directory(path: path))
          modes.entries[path] = frame.mirror == nil ? status.permissions : BundleModes.directoryMode
          subdirectories.append((child, mirror, path, frame.depth + 1))
        case .symlink:
          let targetBytes = try frame.source.readLink(name)
          guard let target = String(validating: targetBytes, as: UTF8.self) else {
            throw refuse("symbolic link '\(path)' has a target that is not valid UTF-8")
          }
          try frame.mirror?.makeSymlink(name, target: target)
          items.append(.symlink(path: path, target: target))
        case .fifo: throw refuse("'\(path)' is a FIFO; bundles hold only files, directories and symlinks")
        case .characterDevice, .blockDevice: throw refuse("'\(path)' is a device file")
        case .socket: throw refuse("'\(path)' is a socket")
        case .unknown: throw refuse("'\(path)' has an unknown file type")
        }
      }
      // Depth-first, in name order: push in reverse so the first name pops first.
      stack.append(contentsOf: subdirectories.reversed())
    }
    try BundleWalker.checkSymlinks(items, refuse: refuse)
    return items
  }

  /// Copies (or only reads) one regular file, hashing what is read; returns its digest,
  /// size and mode (the copy's, normalized, or the source's). Uses `openat(2)` with
  /// `O_NOFOLLOW`, and checks that what was opened is the file that was listed. A file with
  /// holes is read region by region (SEEK_DATA/SEEK_HOLE) and its copy keeps the holes; the
  /// digest covers the whole content, holes as zeros.
  private func copyFile(
    _ name: String, path: String, from source: FileDescriptor, to mirror: FileDescriptor?,
    buffer: UnsafeMutableRawBufferPointer
  ) throws -> (Digest, Int64, mode_t) {
    let input = try source.open(name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK, displayPath: path)
    defer { input.close() }
    let status = try input.status()
    guard status.type == .regular else { throw refuse("'\(path)' changed type while being read") }
    let output = try mirror?.open(
      name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode: 0o600, displayPath: path)
    defer { output?.close() }
    let hasher = SHA256Hasher()
    let regions = status.mayBeSparse ? try input.dataRegions(size: status.size) : nil
    var position: Int64 = 0
    copying: for region in regions ?? [0..<Int64.max] {
      if region.lowerBound > position {
        hashZeros(region.lowerBound - position, into: hasher)
        position = region.lowerBound
      }
      while position < region.upperBound {
        let wanted = Int(min(Int64(buffer.count), region.upperBound - position))
        let n = try input.read(
          into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<wanted]), at: position)
        if n == 0 { break copying }
        let chunk = UnsafeRawBufferPointer(rebasing: buffer[0..<n])
        hasher.update(chunk)
        try output?.writeAll(chunk, at: position)
        position += Int64(n)
      }
    }
    if regions != nil && position < status.size {
      hashZeros(status.size - position, into: hasher)
      position = status.size
    }
    var mode = status.permissions
    if let output {
      try output.truncate(to: position)
      mode = BundleModes.fileMode(executable: status.permissions & 0o111 != 0)
      try output.setPermissions(mode)
      try output.setTimes(access: status.modificationTime, modification: status.modificationTime)
    }
    return (hasher.finalize(), position, mode)
  }

  private func hashZeros(_ count: Int64, into hasher: SHA256Hasher) {
    let zeros = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
    defer { zeros.deallocate() }
    zeros.initializeMemory(as: UInt8.self, repeating: 0)
    var left = count
    while left > 0 {
      let n = Int(min(left, Int64(zeros.count)))
      hasher.update(UnsafeRawBufferPointer(rebasing: zeros[0..<n]))
      left -= Int64(n)
    }
  }

  /// Refuses symlinks that resolve outside the bundle: absolute targets, or relative ones
  /// that climb above the top, also through other symlinks of the bundle (resolved the
  /// way the kernel would, over the walked tree).
  static func checkSymlinks(_ items: [BundleItem], refuse: (String) -> ContainerError) throws {
    var links: [String: String] = [:]
    for case .symlink(let path, let target) in items { links[path] = target }
    for (path, target) in links.sorted(by: { $0.key < $1.key }) {
      let directory = path.split(separator: "/").dropLast().map(String.init)
      guard resolve(target, from: directory, links: links, budget: 40) != nil else {
        throw refuse("symbolic link '\(path)' points outside the bundle ('\(target)')")
      }
    }
  }

  /// Where `target`, read in `directory`, leads (as path components below the top), or
  /// nil when it leaves the bundle or loops.
  private static func resolve(
    _ target: String, from directory: [String], links: [String: String], budget: Int
  )
    -> [String]?
  {
    if target.hasPrefix("/") || budget <= 0 { return nil }
    var current = directory
    for part in target.split(separator: "/").map(String.init) {
      switch part {
      case ".": continue
      case "..":
        if current.isEmpty { return nil }
        current.removeLast()
      default:
        current.append(part)
        if let next = links[current.joined(separator: "/")] {
          current.removeLast()
          guard let resolved = resolve(next, from: current, links: links, budget: budget - 1) else {
            return nil
          }
          current = resolved
        }
      }
    }
    return current
  }
}
