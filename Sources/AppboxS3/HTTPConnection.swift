// HTTP over libcurl's easy interface: one handle per connection, reused for keep-alive.
// Requests carry their body in memory (objects and upload parts are at most a part size);
// responses can stream their body to a callback (object reads) or come back whole.

import CCurl
import Foundation

/// One request to send.
struct HTTPRequest {
  var method: String
  var url: String
  var headers: [(String, String)]
  /// The body; it must stay valid until `perform` returns.
  var body: UnsafeRawBufferPointer?
  /// Certificate authorities to trust (https), instead of the system's.
  var caFile: String?
}

/// What the server answered.
struct HTTPResponse {
  var status: Int
  /// Header names in lowercase; the last value wins.
  var headers: [String: String]
  /// The body, unless it was streamed to the caller (an error status's body always comes here).
  var body: [UInt8]
}

/// A request that did not get a complete answer: libcurl's code and message.
struct TransportFailure: Error {
  var code: UInt32
  var message: String
  /// Nothing was exchanged: the store could not be reached at all.
  var couldNotConnect: Bool
}

/// libcurl's global state, set up once per process (which loads libcurl: see CCurl's shim.h).
/// Uses `curl_global_init`.
private let curlReady: Bool = appbox_curl_global_init(Int(CURL_GLOBAL_DEFAULT)) == CURLE_OK

/// One connection (a libcurl easy handle). Not thread-safe: one request at a time.
final class HTTPConnection {
  private let handle: UnsafeMutableRawPointer

  /// Uses `curl_easy_init`.
  init() throws(TransportFailure) {
    guard curlReady, let handle = appbox_curl_easy_init() else {
      throw TransportFailure(
        code: 2, message: "libcurl (libcurl.so.4, Debian libcurl4) could not be loaded or initialised",
        couldNotConnect: true)
    }
    self.handle = handle
  }

  /// Uses `curl_easy_cleanup`.
  deinit { appbox_curl_easy_cleanup(handle) }

  /// How long to wait for a connection, and how long a transfer may stall (under one byte a
  /// second) before it is given up as a dropped connection.
  static let connectTimeoutMilliseconds = 5_000
  static let stallSeconds = 30

  /// Sends `request` and waits for the whole answer. With `receive`, a successful (2xx)
  /// response's body goes to it chunk by chunk instead of into `body`; `receive` returns
  /// false to stop the transfer early (then `perform` returns normally).
  /// Uses `curl_easy_reset`, `curl_easy_setopt` (through the shim) and `curl_easy_perform`.
  func perform(_ request: HTTPRequest, receive: ((UnsafeRawBufferPointer) -> Bool)? = nil)
    throws(TransportFailure) -> HTTPResponse
  {
    appbox_curl_easy_reset(handle)
    let state = TransferState(receive: receive)
    let context = Unmanaged.passUnretained(state).toOpaque()
    var headerList: UnsafeMutablePointer<curl_slist>?
    defer { appbox_curl_slist_free_all(headerList) }
    // No "Expect: 100-continue" round trip before a body; no Accept header of curl's own.
    for (name, value) in request.headers + [("Expect", ""), ("Accept", "")] {
      let line = value.isEmpty ? "\(name):" : "\(name): \(value)"
      headerList = appbox_curl_slist_append(headerList, line)
    }
    var status = CURLE_OK
    func set(_ code: CURLcode) { if status == CURLE_OK { status = code } }
    set(appbox_curl_set_string(handle, CURLOPT_URL, request.url))
    set(appbox_curl_set_long(handle, CURLOPT_NOSIGNAL, 1))
    set(appbox_curl_set_long(handle, CURLOPT_CONNECTTIMEOUT_MS, Self.connectTimeoutMilliseconds))
    set(appbox_curl_set_long(handle, CURLOPT_LOW_SPEED_LIMIT, 1))
    set(appbox_curl_set_long(handle, CURLOPT_LOW_SPEED_TIME, Self.stallSeconds))
    set(appbox_curl_set_long(handle, CURLOPT_TCP_KEEPALIVE, 1))
    if let caFile = request.caFile { set(appbox_curl_set_string(handle, CURLOPT_CAINFO, caFile)) }
    set(appbox_curl_set_pointer(handle, CURLOPT_HTTPHEADER, UnsafeMutableRawPointer(headerList)))
    set(appbox_curl_set_callback(handle, CURLOPT_HEADERFUNCTION, headerCallback))
    set(appbox_curl_set_pointer(handle, CURLOPT_HEADERDATA, context))
    set(appbox_curl_set_callback(handle, CURLOPT_WRITEFUNCTION, writeCallback))
    set(appbox_curl_set_pointer(handle, CURLOPT_WRITEDATA, context))
    switch request.method {
    case "GET": set(appbox_curl_set_long(handle, CURLOPT_HTTPGET, 1))
    case "HEAD": set(appbox_curl_set_long(handle, CURLOPT_NOBODY, 1))
    default: set(appbox_curl_set_string(handle, CURLOPT_CUSTOMREQUEST, request.method))
    }
    if request.method != "GET" && request.method != "HEAD" {
      // The POST machinery sends an in-memory body for any method (CUSTOMREQUEST names it).
      let body = request.body ?? UnsafeRawBufferPointer(start: nil, count: 0)
      set(appbox_curl_set_offset(handle, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body.count)))
      set(
        appbox_curl_set_pointer(
          handle, CURLOPT_POSTFIELDS, UnsafeMutableRawPointer(mutating: body.baseAddress) ?? state.emptyBody))
    }
    guard status == CURLE_OK else {
      throw TransportFailure(code: status.rawValue, message: Self.describe(status), couldNotConnect: false)
    }
    let result = appbox_curl_easy_perform(handle)
    if result != CURLE_OK && !(result == CURLE_WRITE_ERROR && state.stoppedByReceiver) {
      let connectFailures: [CURLcode] = [
        CURLE_COULDNT_CONNECT, CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY,
      ]
      let timedOutConnecting = result == CURLE_OPERATION_TIMEDOUT && state.status == 0
      throw TransportFailure(
        code: result.rawValue, message: Self.describe(result),
        couldNotConnect: connectFailures.contains(result) || timedOutConnecting)
    }
    var code = 0
    _ = appbox_curl_get_long(handle, CURLINFO_RESPONSE_CODE, &code)
    return HTTPResponse(status: code, headers: state.headers, body: state.body)
  }

  static func describe(_ code: CURLcode) -> String {
    String(cString: appbox_curl_easy_strerror(code))
  }
}

/// What the callbacks of one transfer see.
private final class TransferState {
  let receive: ((UnsafeRawBufferPointer) -> Bool)?
  var status = 0
  var headers: [String: String] = [:]
  var body: [UInt8] = []
  var stoppedByReceiver = false
  /// A valid pointer for an empty body (libcurl wants one).
  let emptyBody = UnsafeMutableRawPointer.allocate(byteCount: 1, alignment: 1)

  init(receive: ((UnsafeRawBufferPointer) -> Bool)?) { self.receive = receive }
  deinit { emptyBody.deallocate() }
}

/// Collects the status line and headers; a new status line (after `100 Continue`, or a
/// redirect) starts over.
private let headerCallback: appbox_curl_data_callback = { data, size, count, context in
  let state = Unmanaged<TransferState>.fromOpaque(context!).takeUnretainedValue()
  let length = size * count
  guard let data else { return length }
  let line = String(decoding: UnsafeRawBufferPointer(start: data, count: length), as: UTF8.self)
    .trimmingCharacters(in: .whitespacesAndNewlines)
  if line.hasPrefix("HTTP/") {
    state.headers = [:]
    let parts = line.split(separator: " ")
    state.status = parts.count > 1 ? Int(parts[1]) ?? 0 : 0
  } else if let colon = line.firstIndex(of: ":") {
    let name = line[..<colon].lowercased()
    state.headers[name] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
  }
  return length
}

/// Streams a successful body to the receiver, collects any other.
private let writeCallback: appbox_curl_data_callback = { data, size, count, context in
  let state = Unmanaged<TransferState>.fromOpaque(context!).takeUnretainedValue()
  let length = size * count
  let bytes = UnsafeRawBufferPointer(start: data, count: length)
  if let receive = state.receive, (200..<300).contains(state.status) {
    if !receive(bytes) {
      state.stoppedByReceiver = true
      return 0
    }
  } else {
    state.body.append(contentsOf: bytes)
  }
  return length
}
