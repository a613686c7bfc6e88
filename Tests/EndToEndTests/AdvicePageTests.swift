import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// Issue 26: the advice page broke at 390 px (the path column wrapped every 3 characters, chart
/// labels shrank to about 4 px, suggested commands were clipped), and its directory table left
/// out `Library/Application Support`, which the chart shows.
struct AdvicePageTests {
  /// Notes whose database in Library/Application Support and big file in Documents change
  /// before every backup; returns the device and `advise --json --html`'s report and page.
  func advisedNotes() throws -> (Device, [String: Any], String) {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    let support = device.home + "/Library/Application Support"
    try FileManager.default.createDirectory(atPath: support, withIntermediateDirectories: true)
    let writer = ContentWriter(seed: 11)
    for round in 0..<4 {
      try writer.write(support + "/store.sqlite", size: 300_000)
      try writer.write(
        device.home + "/Documents/a-rather-long-file-name-for-a-narrow-screen.bin", size: 1_500_000)
      if round > 0 { try device.trustSnapshots() }
      _ = try device.backup()
    }
    try device.trustSnapshots()
    let page = device.dir.url("advice.html")
    let result = try device.run("--json", "advise", "com.example.notes", "--html", page)
    #expect(result.status == 0, "\(result.err)")
    let report = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [String: Any])
    return (device, report, try String(contentsOfFile: page, encoding: .utf8))
  }

  @Test func theDirectoryTableListsEveryDirectoryTheChartShows() throws {
    let (device, report, html) = try advisedNotes()
    let groups = try #require((report["chart"] as? [String: Any])?["groups"] as? [String])
    #expect(groups.contains("Library/Application Support"), "\(groups)")
    let directories = try #require(report["directories"] as? [[String: Any]]).compactMap {
      $0["path"] as? String
    }
    for group in groups where group != "other" && group != "home" {
      let path = group.hasSuffix(" (top level)") ? String(group.dropLast(" (top level)".count)) : group
      #expect(directories.contains(path), "the chart shows \(group); the table lists \(directories)")
    }
    let table = try #require(
      html.range(of: "<h2>Directories</h2>").flatMap { start in
        html[start.upperBound...].range(of: "</table>").map { String(html[start.upperBound..<$0.lowerBound]) }
      })
    #expect(table.contains("<code>Library/Application Support</code>"), "\(table)")
    // The text report lists it too.
    let text = try device.run("advise", "com.example.notes")
    let section = try #require(text.out.range(of: "Directories by bytes added per backup:"))
    #expect(text.out[section.upperBound...].contains("Library/Application Support"), "\(text.out)")
  }

  /// The rules that make the page work at 390 px: rows instead of a five-column table, a chart
  /// that keeps its labels readable (14 px at a 720 px minimum width of a 960 unit view box:
  /// 10.5 px on screen) and scrolls sideways, commands that wrap instead of being clipped.
  @Test func thePageHasANarrowLayout() throws {
    let (_, _, html) = try advisedNotes()
    let style = try #require(
      html.range(of: "<style>").flatMap { start in
        html.range(of: "</style>").map { String(html[start.upperBound..<$0.lowerBound]) }
      })
    let narrow = try #require(
      style.range(of: "@media (max-width:600px){").map { String(style[$0.upperBound...]) })
    for rule in [
      "table,tbody,tr,td{display:block}", "thead{display:none}", "td.path-cell{grid-column:1/-1}",
      "td code{word-break:normal;overflow-wrap:anywhere}", ".meter{display:none}", ".chart{min-width:720px}",
      ".chart .axis{font-size:14px}", "pre{white-space:pre-wrap;overflow-wrap:anywhere}",
      ".num::before{content:attr(data-label)",
    ] {
      #expect(narrow.contains(rule), "missing at 600 px and below: \(rule)")
    }
    #expect(style.contains(".chart-frame{overflow-x:auto}"))
    #expect(html.contains("<div class=\"chart-frame\"><svg class=\"chart\" viewBox=\"0 0 960 340\""))
    #expect(html.contains("<td class=\"path-cell\"><code>") && html.contains("data-label=\"Per backup\""))
  }

  /// The page as Chromium lays it out 390 px wide (make test-advice-page; APPBOX_TEST_CHROMIUM=1).
  /// Headless Chromium's window is at least 500 px wide, so the page is shown in a 390 px frame
  /// (`srcdoc`, so a script in it may write to the frame's parent); the script measures the
  /// layout and Chromium's dump of the parent's DOM carries the numbers out.
  @Test(.enabled(if: ProcessInfo.processInfo.environment["APPBOX_TEST_CHROMIUM"] == "1"))
  func chromiumLaysThePageOutAt390Pixels() throws {
    let (device, _, html) = try advisedNotes()
    let probe = """
      <script>
      const r = e => e.getBoundingClientRect();
      const codes = [...document.querySelectorAll('td.path-cell code')];
      const lineHeight = e => parseFloat(getComputedStyle(e).lineHeight) || 20;
      parent.document.body.setAttribute('data-layout', JSON.stringify({
        viewport: window.innerWidth,
        page: document.documentElement.scrollWidth,
        paths: [...document.querySelectorAll('td.path-cell')].map(e => r(e).width),
        lines: codes.map(e => Math.round(r(e).height / lineHeight(e))),
        labels: [...document.querySelectorAll('.chart text')].map(e => r(e).height),
        pres: [...document.querySelectorAll('pre')].map(e => e.scrollWidth - e.clientWidth),
      }));
      </script>
      """
    func attribute(_ text: String) -> String {
      text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "\"", with: "&quot;")
    }
    let framed = html.replacingOccurrences(of: "</body>", with: probe + "</body>")
    let copy = device.dir.url("probe.html")
    try """
    <!DOCTYPE html><html><body style="margin:0"><iframe style="width:390px;height:6000px;border:0" \
    srcdoc="\(attribute(framed))"></iframe></body></html>
    """.write(toFile: copy, atomically: false, encoding: .utf8)
    let chromium = try runProcess(
      "/usr/bin/chromium",
      [
        "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--force-device-scale-factor=1",
        "--window-size=800,3000", "--virtual-time-budget=3000", "--dump-dom", "file://" + copy,
      ])
    #expect(chromium.status == 0, "\(chromium.err)")
    let attribute = try #require(
      chromium.out.range(of: #"data-layout="[^"]*""#, options: .regularExpression).map {
        String(chromium.out[$0]).dropFirst("data-layout=\"".count).dropLast()
          .replacingOccurrences(of: "&quot;", with: "\"")
      }, "\(chromium.out.prefix(500))")
    let layout = try #require(try JSONSerialization.jsonObject(with: Data(attribute.utf8)) as? [String: Any])
    func numbers(_ key: String) -> [Double] { (layout[key] as? [NSNumber] ?? []).map(\.doubleValue) }
    #expect((layout["viewport"] as? NSNumber)?.doubleValue == 390, "\(layout)")
    #expect((layout["page"] as? NSNumber)?.doubleValue ?? 1000 <= 390, "the page scrolls sideways: \(layout)")
    let paths = numbers("paths")
    #expect(!paths.isEmpty && paths.allSatisfy { $0 >= 300 }, "path cells too narrow: \(paths)")
    let lines = numbers("lines")
    #expect(!lines.isEmpty && lines.allSatisfy { $0 <= 2 }, "paths wrap into many lines: \(lines)")
    let labels = numbers("labels")
    #expect(!labels.isEmpty && labels.allSatisfy { $0 >= 10 }, "chart labels too small: \(labels)")
    #expect(numbers("pres").allSatisfy { $0 <= 0 }, "clipped commands: \(layout)")
  }
}
