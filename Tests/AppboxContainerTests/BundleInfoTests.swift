import AppboxCore
import AppboxPlist
import AppboxTestSupport
import Foundation
import Testing

@testable import AppboxContainer

struct BundleInfoTests {
  @Test func versionsCompareNumerically() {
    func v(_ text: String) -> BundleVersion { BundleVersion(text)! }
    #expect(v("1.10") > v("1.9"))
    #expect(v("2") > v("1.999"))
    #expect(v("1.0") == v("1"))
    #expect(v("1.0.1") > v("1"))
    for bad in ["", "1.", ".1", "1..2", "1.a", "-1", "1.0beta", "١"] {
      #expect(BundleVersion(bad) == nil, "\(bad)")
    }
  }

  @Test func identifiersAreReverseDNS() {
    for good in ["com.example.notes", "a", "com.Example-Co.app2"] {
      #expect(BundleInfo.isValidIdentifier(good))
    }
    for bad in [
      "", ".com", "com.", "com..x", "com/x", "../x", "com x", "com.é", String(repeating: "a", count: 256),
    ] {
      #expect(!BundleInfo.isValidIdentifier(bad), "\(bad)")
    }
  }

  @Test func entitlementsMustBelongToTheTeam() throws {
    let info = PropertyList.dictionary([
      "CFBundleIdentifier": .string("com.example.notes"), "CFBundleVersion": .string("1.0"),
      "CFBundleExecutable": .string("Notes"),
    ]).xmlData()
    func entitlements(_ groups: [String], app: String = "TEAM1.com.example.notes") -> Data {
      PropertyList.dictionary([
        "com.apple.developer.team-identifier": .string("TEAM1"), "application-identifier": .string(app),
        "keychain-access-groups": .array(groups.map(PropertyList.string)),
      ]).xmlData()
    }
    let good = try BundleInfo(
      infoPlist: info, entitlements: entitlements(["TEAM1.shared"]), bundleName: "Notes", bundle: "Notes.app")
    #expect(good.entitlements?.keychainAccessGroups == ["TEAM1.shared"])
    #expect(throws: ContainerError.self) {
      try BundleInfo(
        infoPlist: info, entitlements: entitlements(["TEAM2.shared"]), bundleName: "Notes", bundle: "N.app")
    }
    #expect(throws: ContainerError.self) {
      try BundleInfo(
        infoPlist: info, entitlements: entitlements([], app: "TEAM1.com.other"), bundleName: "Notes",
        bundle: "N.app")
    }
  }

  @Test func symlinkChainsThatClimbOutAreRefused() {
    let refuse = { (message: String) in ContainerError(.invalidBundle, message) }
    let inside: [BundleItem] = [
      .directory(path: "A"), .symlink(path: "Current", target: "A"),
      .symlink(path: "A/up", target: "../Current"),
    ]
    #expect(throws: Never.self) { try BundleWalker.checkSymlinks(inside, refuse: refuse) }
    let outside: [BundleItem] = [
      .symlink(path: "self", target: "."), .symlink(path: "out", target: "self/../x"),
    ]
    #expect(throws: ContainerError.self) { try BundleWalker.checkSymlinks(outside, refuse: refuse) }
    let loop: [BundleItem] = [.symlink(path: "a", target: "b/x"), .symlink(path: "b", target: "a/y")]
    #expect(throws: ContainerError.self) { try BundleWalker.checkSymlinks(loop, refuse: refuse) }
  }
}
