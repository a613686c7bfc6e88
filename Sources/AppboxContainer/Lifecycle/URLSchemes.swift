// URL schemes: which app a URL opens.
//
// A bundle claims schemes in its Info.plist, as the platform reads them:
//     CFBundleURLTypes = ( { CFBundleURLName = ...; CFBundleURLSchemes = ( notes, ... ); }, ... )
// Install records them (lowercased: schemes are case-insensitive, RFC 3986 §3.1) in the
// registry; entries that are not RFC 3986 schemes (ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ))
// are left out, as are malformed types. An app installed before schemes were recorded has
// NULL there, and its bundle's Info.plist is read when a URL is opened.
//
// The rule when two apps claim one scheme (the platform's is "the first installed wins";
// Apple documents no other): the app installed first, by the time of its install (an update,
// a reinstall after offloading and a revert keep that time; an uninstall and a new install
// do not), then by bundle identifier. An offloaded app keeps its claim: opening its URL
// exits 69 until it is installed again, as the platform offers to reinstall it.

import AppboxCore
import AppboxPlist
import Foundation
import Glibc

/// URL schemes: parsing them and reading the claims of bundles.
public enum URLScheme {
  /// The environment variable that carries the opened URL into the app (it is also the
  /// app's last argument).
  public static let environmentVariable = "APPBOX_OPEN_URL"

  /// Whether `text` is a scheme as RFC 3986 defines it.
  public static func isValid(_ text: String) -> Bool {
    guard let first = text.utf8.first, isLetter(first), text.utf8.count <= 64 else { return false }
    return text.utf8.allSatisfy {
      isLetter($0) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2B || $0 == 0x2D || $0 == 0x2E
    }
  }

  private static func isLetter(_ byte: UInt8) -> Bool { (byte | 0x20) >= 0x61 && (byte | 0x20) <= 0x7A }

  /// The scheme of `url`, lowercased, or nil when it has none ("notes://x", "mailto:a@b").
  public static func scheme(of url: String) -> String? {
    guard let colon = url.firstIndex(of: ":") else { return nil }
    let scheme = String(url[..<colon])
    return isValid(scheme) ? scheme.lowercased() : nil
  }

  /// The schemes an Info.plist claims, lowercased, in order, without repeats.
  static func claimed(by plist: PropertyList) -> [String] {
    var schemes: [String] = []
    for type in plist["CFBundleURLTypes"]?.array ?? [] {
      for value in type["CFBundleURLSchemes"]?.array ?? [] {
        guard let scheme = value.string, isValid(scheme) else { continue }
        let lowered = scheme.lowercased()
        if !schemes.contains(lowered) { schemes.append(lowered) }
      }
    }
    return schemes
  }
}

/// The apps that claim a URL's scheme, and the one that opens it.
public struct URLClaim: Sendable {
  public var scheme: String
  /// Every app that claims it, the one that opens it first.
  public var claimants: [AppRecord]
  public var winner: AppRecord { claimants[0] }
}

extension DeviceSession {
  /// Which app opens `url`: the first installed among those that claim its scheme (see the
  /// header). A URL without a scheme is `.invalidRequest` (64); an unclaimed scheme is
  /// `.appNotFound` (66).
  public func claim(of url: String) throws -> URLClaim {
    guard let scheme = URLScheme.scheme(of: url) else {
      throw ContainerError(
        .invalidRequest, "'\(url.prefix(200))' is not a URL: it has no scheme (such as notes:// or notes:)")
    }
    let claimants = try registry.apps().filter { app in
      (try? schemes(of: app))?.contains(scheme) ?? false
    }
    .sorted { ($0.installedAt, $0.bundleIdentifier) < ($1.installedAt, $1.bundleIdentifier) }
    guard !claimants.isEmpty else {
      throw ContainerError(
        .appNotFound, "No installed app claims the URL scheme '\(scheme)' (CFBundleURLTypes)")
    }
    return URLClaim(scheme: scheme, claimants: claimants)
  }

  /// The schemes `app` claims: the registry's, else (an install from before they were
  /// recorded) its bundle's Info.plist.
  func schemes(of app: AppRecord) throws -> [String] {
    if let recorded = app.urlSchemes { return recorded }
    guard !app.isOffloaded else { return [] }
    return try installedBundleInfo(of: app).urlSchemes
  }
}
