import AppboxCore
import AppboxPlist
import AppboxTestSupport
import Foundation
import Testing

@testable import AppboxContainer

struct TreeMeasureTests {
  @Test func substringSearch() {
    func has(_ haystack: String, _ needle: String) -> Bool {
      Array(haystack.utf8).withUnsafeBytes { h in
        Array(needle.utf8).withUnsafeBytes { n in TreeMeasure.Search.contains(h, n) }
      }
    }
    #expect(has("abc/root/home/x", "/root/home"))
    #expect(has("/root/home", "/root/home"))
    #expect(!has("/root/hom", "/root/home"))
    #expect(!has("//root/hXme/root/homX", "/root/home"))
    #expect(has("//root/hXme/root/home", "/root/home"))
    #expect(!has("", "a"))
  }

  @Test func surveyCountsAndFindsStalePathsInUTF8AndUTF16() throws {
    let dir = TemporaryDirectory("survey")
    let old = "/var/old/ApplicationRoot/ABC"
    try dir.write("Documents/notes.txt", "see \(old)/Documents/db")
    try dir.write("Documents/photo.bin", "\(old)")  // not a text file: not searched
    try dir.write("Documents/clean.json", "{}")
    let plist = PropertyList.dictionary(["path": .string(old + "/é")]).binaryData()  // stored as UTF-16
    try dir.write("Library/Preferences/com.example.plist", bytes: Array(plist))
    try dir.write("Library/Caches/cache.txt", old)  // Caches are not searched, but counted
    // The path the app saw in its jail counts as much as the host path.
    try dir.write("Documents/jail.conf", "home=/var/mobile/Applications/ABC/Documents")
    let survey = StalePathScanner.survey(home: dir.path, oldHomes: [old, "/var/mobile/Applications/ABC"])
    #expect(
      survey.stale == ["Library/Preferences/com.example.plist", "Documents/jail.conf", "Documents/notes.txt"])
    #expect(survey.files == 6)
  }
}
