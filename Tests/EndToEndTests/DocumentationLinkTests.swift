// Every link in README.md, docs/*.md and Benchmarks/README.md resolves: a relative link names a
// file or directory of the checkout, and a `#anchor` names a heading of the target (GitHub's
// anchors: the heading's text lowercased, punctuation dropped, spaces as hyphens, `-1`, `-2`
// for repeats). Links in fenced code blocks and code spans are text, not links; links to other
// sites (http, https, mailto) are not fetched.

import AppboxTestSupport
import Foundation
import Testing

/// A link that does not resolve: where it is, what it names, and why it fails.
struct BrokenLink: Equatable, CustomStringConvertible {
  var file: String
  var line: Int
  var target: String
  var problem: String
  var description: String { "\(file):\(line): (\(target)) \(problem)" }
}

/// The links and headings of Markdown files, and the check that links resolve.
enum MarkdownLinks {
  /// Links of `text` with their line numbers, outside fenced code and code spans.
  static func links(in text: String) -> [(line: Int, target: String)] {
    var found: [(Int, String)] = []
    for (start, paragraph) in paragraphs(of: text) {
      let plain = removingCodeSpans(paragraph)
      for (offset, line) in plain.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
        let line = String(line)
        for match in line.matches(of: /!?\[[^\]]*\]\(<?([^)\s>]*)>?(?:\s+"[^"]*")?\)/) {
          found.append((start + offset, String(match.output.1)))
        }
        if let match = line.wholeMatch(of: /\s{0,3}\[[^\]]+\]:\s+<?(\S+?)>?(?:\s+.*)?/) {
          found.append((start + offset, String(match.output.1)))
        }
      }
    }
    return found
  }

  /// The anchors of `text`'s headings (ATX headings outside fenced code).
  static func anchors(in text: String) -> Set<String> {
    var anchors = Set<String>()
    var seen: [String: Int] = [:]
    for (_, paragraph) in paragraphs(of: text) {
      for line in paragraph.split(separator: "\n") {
        guard let match = String(line).wholeMatch(of: /\s{0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*/) else { continue }
        let base = slug(String(match.output.1))
        let count = seen[base, default: 0]
        seen[base] = count + 1
        anchors.insert(count == 0 ? base : "\(base)-\(count)")
      }
    }
    return anchors
  }

  /// GitHub's anchor for a heading: its text (links as their text, no code or emphasis
  /// marks) lowercased, only letters, marks, numbers, `_`, `-` and spaces kept, spaces as `-`.
  static func slug(_ heading: String) -> String {
    let text = heading.replacing(/!?\[([^\]]*)\]\([^)]*\)/) { String($0.output.1) }
      .replacing(/[`*]/, with: "").lowercased()
    var result = ""
    for scalar in text.unicodeScalars {
      switch scalar.properties.generalCategory {
      case .uppercaseLetter, .lowercaseLetter, .titlecaseLetter, .modifierLetter, .otherLetter,
        .nonspacingMark, .spacingMark, .enclosingMark, .decimalNumber, .letterNumber, .otherNumber,
        .connectorPunctuation:
        result.unicodeScalars.append(scalar)
      default:
        if scalar == "-" { result += "-" } else if scalar == " " { result += "-" }
      }
    }
    return result
  }

  /// The text between fenced code blocks, cut into paragraphs (code spans do not cross them),
  /// each with the number of its first line.
  private static func paragraphs(of text: String) -> [(Int, String)] {
    var result: [(Int, String)] = []
    var current: [Substring] = []
    var start = 1
    var fence: Substring?
    func flush() {
      if !current.isEmpty { result.append((start, current.joined(separator: "\n"))) }
      current = []
    }
    for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
      let trimmed = line.drop { $0 == " " }
      if let open = fence {
        if trimmed.hasPrefix(open) && trimmed.drop(while: { $0 == open.first }).allSatisfy(\.isWhitespace) {
          fence = nil
        }
        continue
      }
      if let marker = trimmed.prefixMatch(of: /`{3,}|~{3,}/) {
        flush()
        fence = trimmed[marker.range]
        continue
      }
      if line.allSatisfy(\.isWhitespace) {
        flush()
        continue
      }
      if current.isEmpty { start = index + 1 }
      current.append(line)
    }
    flush()
    return result
  }

  /// `text` with each code span's content blanked (newlines kept, so line numbers hold).
  private static func removingCodeSpans(_ text: String) -> String {
    let characters = Array(text)
    var output = ""
    var index = 0
    while index < characters.count {
      guard characters[index] == "`" else {
        output.append(characters[index])
        index += 1
        continue
      }
      var run = 0
      while index + run < characters.count && characters[index + run] == "`" { run += 1 }
      // The closing run: the next run of exactly as many backticks.
      var search = index + run
      var close: Int?
      while search < characters.count {
        if characters[search] == "`" {
          var length = 0
          while search + length < characters.count && characters[search + length] == "`" { length += 1 }
          if length == run {
            close = search
            break
          }
          search += length
        } else {
          search += 1
        }
      }
      guard let close else {
        output += String(characters[index..<(index + run)])
        index += run
        continue
      }
      output += String(characters[(index + run)..<close].map { $0 == "\n" ? "\n" : " " })
      index = close + run
    }
    return output
  }

  /// The links of the Markdown file `relative` (a path in `root`) that do not resolve.
  static func brokenLinks(inFile relative: String, root: String) throws -> [BrokenLink] {
    let text = try String(contentsOfFile: root + "/" + relative, encoding: .utf8)
    let directory = relative.split(separator: "/").dropLast().joined(separator: "/")
    var broken: [BrokenLink] = []
    for (line, target) in links(in: text) {
      func fail(_ problem: String) {
        broken.append(BrokenLink(file: relative, line: line, target: target, problem: problem))
      }
      if target.isEmpty {
        fail("an empty link")
        continue
      }
      if target.contains(/^[A-Za-z][A-Za-z0-9+.-]*:/) {
        if !(target.hasPrefix("http://") || target.hasPrefix("https://") || target.hasPrefix("mailto:")) {
          fail("an unexpected scheme")
        }
        continue
      }
      let parts = target.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false)
      let pathPart = String(parts[0]).removingPercentEncoding ?? String(parts[0])
      let anchor = parts.count > 1 ? String(parts[1]) : nil
      if pathPart.hasPrefix("/") {
        fail("an absolute path (links must be relative to the file)")
        continue
      }
      guard let resolved = pathPart.isEmpty ? relative : normalized(directory + "/" + pathPart) else {
        fail("a path outside the checkout")
        continue
      }
      var isDirectory: ObjCBool = false
      guard FileManager.default.fileExists(atPath: root + "/" + resolved, isDirectory: &isDirectory) else {
        fail("no such file: \(resolved)")
        continue
      }
      guard let anchor else { continue }
      guard !isDirectory.boolValue, resolved.hasSuffix(".md") else {
        fail("an anchor into \(resolved), which is not a Markdown file")
        continue
      }
      let targetText = try String(contentsOfFile: root + "/" + resolved, encoding: .utf8)
      if !anchors(in: targetText).contains(anchor) {
        fail("no heading with anchor #\(anchor) in \(resolved)")
      }
    }
    return broken
  }

  /// `path` (relative to the checkout) without `.`, `..` and empty components; nil when it
  /// climbs out of the checkout. A trailing `/` is kept off: `docs/` is `docs`.
  static func normalized(_ path: String) -> String? {
    var components: [Substring] = []
    for component in path.split(separator: "/") where component != "." {
      if component == ".." {
        guard components.popLast() != nil else { return nil }
      } else {
        components.append(component)
      }
    }
    return components.isEmpty ? "." : components.joined(separator: "/")
  }

  /// README.md, Benchmarks/README.md and every Markdown file in docs/, relative to `root`.
  static func documentationFiles(root: String) throws -> [String] {
    let docs = try FileManager.default.contentsOfDirectory(atPath: root + "/docs")
      .filter { $0.hasSuffix(".md") }.sorted().map { "docs/" + $0 }
    return ["README.md", "Benchmarks/README.md"] + docs
  }
}

struct DocumentationLinkTests {
  @Test func everyLinkInTheDocumentationResolves() throws {
    let files = try MarkdownLinks.documentationFiles(root: repositoryRoot)
    let broken = try files.flatMap { try MarkdownLinks.brokenLinks(inFile: $0, root: repositoryRoot) }
    #expect(broken.isEmpty, "\(broken.map(\.description).joined(separator: "\n"))")
  }

  /// The README links to the manual's index and the benchmarks, and the index lists every
  /// page of docs/.
  @Test func theIndexesLinkEveryPage() throws {
    let readme = try String(contentsOfFile: repositoryRoot + "/README.md", encoding: .utf8)
    let readmeTargets = Set(MarkdownLinks.links(in: readme).map(\.target))
    #expect(readmeTargets.contains("docs/README.md"))
    #expect(readmeTargets.contains("Benchmarks/README.md"))
    let index = try String(contentsOfFile: repositoryRoot + "/docs/README.md", encoding: .utf8)
    let indexed = Set(MarkdownLinks.links(in: index).map { $0.target.split(separator: "#")[0] })
    let pages = try MarkdownLinks.documentationFiles(root: repositoryRoot)
      .filter { $0.hasPrefix("docs/") && $0 != "docs/README.md" }.map { String($0.dropFirst(5)) }
    #expect(pages.count >= 10)
    for page in pages { #expect(indexed.contains(Substring(page)), "docs/README.md does not link \(page)") }
    let lines = readme.split(separator: "\n", omittingEmptySubsequences: false).count
    #expect(lines <= 250, "README.md has \(lines) lines: it is the front door; the manual goes in docs/")
  }

  /// The checker itself, on a tree made for it: it finds exactly the broken links.
  @Test func theCheckerFindsMissingFilesAndAnchors() throws {
    let tree = TemporaryDirectory("doclinks")
    try tree.write(
      "docs/a.md",
      """
      # Page A

      ## Locks and `--wait`

      [good file](b.md), [good anchor](b.md#threads-and-pipelines), [self](#locks-and---wait),
      [repeat](b.md#setup-1), [up](../README.md), [directory](../docs/), [site](https://example.com/x),
      [missing file](c.md), [missing anchor](b.md#nothing-here), [wrong case](#Locks-and---wait).
      A code span is text: `[not a link](nowhere.md)`, and so is a fence:

      ```sh
      echo "[not a link](nowhere.md)"
      ```

      [ref]: b.md#setup
      [bad ref]: gone.md
      """)
    try tree.write("docs/b.md", "# B\n\n## Setup\n\n## Threads and pipelines\n\n## Setup\n")
    try tree.write("README.md", "# R\n")
    let broken = try MarkdownLinks.brokenLinks(inFile: "docs/a.md", root: tree.path)
    #expect(
      broken.map(\.target) == ["c.md", "b.md#nothing-here", "#Locks-and---wait", "gone.md"],
      "\(broken)")
    #expect(broken.first?.line == 7)
    #expect(
      MarkdownLinks.slug("Fleet: one repository for many devices, on S3")
        == "fleet-one-repository-for-many-devices-on-s3")
    #expect(MarkdownLinks.slug("Concurrency and `--wait`") == "concurrency-and---wait")
  }
}
