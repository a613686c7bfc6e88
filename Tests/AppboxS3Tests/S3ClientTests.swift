import AppboxCore
import AppboxCrypto
import AppboxTestSupport
import Foundation
import Testing

@testable import AppboxS3

/// The client against the real store: the shared Swift cluster on loopback (s3api).
struct S3ClientTests {
  func client(_ cluster: SwiftCluster, secret: String? = nil, partSize: Int = 5 << 20) throws -> S3Client {
    try S3Client(
      S3Configuration(
        endpoint: cluster.endpoint,
        credentials: S3Credentials(accessKey: cluster.accessKey, secretKey: secret ?? cluster.secretKey),
        attempts: 3, partSize: partSize))
  }

  /// libcurl is loaded by the first S3 request, not by every appbox command: the executable
  /// does not need it, and a request loads it into the process.
  @Test func libcurlIsLoadedOnFirstUseNotAtStart() throws {
    let needed = try runProcess("/usr/bin/ldd", [productsDirectory + "/appbox"])
    #expect(needed.status == 0, "\(needed.err)")
    #expect(needed.out.contains("libsqlite3") && !needed.out.contains("libcurl"))
    let cluster = try SwiftCluster.shared()
    _ = try client(cluster).bucketExists(SwiftCluster.uniqueBucket())
    let maps = try runProcess("/bin/cat", ["/proc/\(getpid())/maps"])
    #expect(maps.out.contains("libcurl"))
  }

  @Test func objectsGoInComeOutListAndGo() throws {
    let cluster = try SwiftCluster.shared()
    let s3 = try client(cluster)
    let bucket = SwiftCluster.uniqueBucket()
    #expect(try s3.bucketExists(bucket) == false)
    try s3.createBucket(bucket)
    try s3.createBucket(bucket)  // again: ours already
    #expect(try s3.bucketExists(bucket))
    try s3.put(bucket, "dir/a b+c", Array("hello".utf8))
    try s3.put(bucket, "dir/empty", [])
    try s3.put(bucket, "other", Array("x".utf8))
    #expect(try s3.get(bucket, "dir/a b+c") == Array("hello".utf8))
    #expect(try s3.get(bucket, "dir/empty") == [])
    let listed = try s3.list(bucket, prefix: "dir/")
    #expect(listed.map(\.key) == ["dir/a b+c", "dir/empty"])
    #expect(listed.map(\.size) == [5, 0])
    #expect(abs(listed[0].lastModified.timeIntervalSince(s3.storeTime)) < 120)
    #expect(try s3.head(bucket, "dir/a b+c")?.size == 5)
    #expect(try s3.head(bucket, "missing") == nil)
    #expect(throws: S3Error.self) { try s3.get(bucket, "missing") }
    do {
      _ = try s3.get(bucket, "missing")
    } catch let error as S3Error {
      #expect(error.kind == .notFound && error.status == 404)
    }
    var part: [UInt8] = []
    try s3.read(bucket, "dir/a b+c", range: (1, 3)) { part += $0 }
    #expect(part == Array("ell".utf8))
    try s3.delete(bucket, keys: ["dir/a b+c", "dir/empty", "never-was"])
    try s3.delete(bucket, "other")
    try s3.delete(bucket, "other")
    #expect(try s3.list(bucket, prefix: "").isEmpty)
  }

  @Test func listingsPageThroughManyPages() throws {
    let cluster = try SwiftCluster.shared()
    let s3 = try client(cluster)
    let bucket = SwiftCluster.uniqueBucket()
    try s3.createBucket(bucket)
    let keys = (0..<23).map { String(format: "k/%05d", $0) }
    DispatchQueue.concurrentPerform(iterations: 4) { worker in
      for index in stride(from: worker, to: keys.count, by: 4) { try? s3.put(bucket, keys[index], [1]) }
    }
    #expect(try s3.list(bucket, prefix: "k/", pageSize: 5).map(\.key) == keys)
    #expect(try s3.list(bucket, prefix: "k/0001", pageSize: 1000).count == 10)
    try s3.delete(bucket, keys: keys)
    #expect(try s3.list(bucket, prefix: "k/").isEmpty)
  }

  @Test func largeObjectsStreamUpInPartsAndDownFromAnyOffset() throws {
    let cluster = try SwiftCluster.shared()
    let s3 = try client(cluster)
    let bucket = SwiftCluster.uniqueBucket()
    try s3.createBucket(bucket)
    var data = [UInt8](repeating: 0, count: 12 << 20 + 12345)
    try SecureRandom.fill(UnsafeMutableRawBufferPointer(start: &data, count: data.count))
    let upload = S3StreamingUpload(client: s3, bucket: bucket, key: "big")
    try data.withUnsafeBytes { bytes in
      var offset = 0
      while offset < bytes.count {
        let end = min(bytes.count, offset + 300_000)
        try upload.write(UnsafeRawBufferPointer(rebasing: bytes[offset..<end]))
        offset = end
      }
    }
    #expect(try s3.list(bucket, prefix: "big").isEmpty)  // nothing visible before finish
    #expect(try upload.finish() == Int64(data.count))
    #expect(try s3.head(bucket, "big")?.size == Int64(data.count))
    #expect(SHA256.hash(try s3.get(bucket, "big")) == SHA256.hash(data))
    let stream = S3ObjectStream(client: s3, bucket: bucket, key: "big", offset: 7_000_001, capacity: 1 << 20)
    var received: [UInt8] = []
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 70_000, alignment: 1)
    defer { buffer.deallocate() }
    while true {
      let count = try stream.read(into: buffer)
      if count == 0 { break }
      received += buffer[0..<count]
    }
    #expect(received == Array(data[7_000_001...]))
    // A stream closed early stops its download.
    let early = S3ObjectStream(client: s3, bucket: bucket, key: "big", offset: 0, capacity: 1 << 20)
    #expect(try early.read(into: buffer) > 0)
    early.close()
  }

  @Test func anAbortedUploadLeavesNothing() throws {
    let cluster = try SwiftCluster.shared()
    let s3 = try client(cluster)
    let bucket = SwiftCluster.uniqueBucket()
    try s3.createBucket(bucket)
    let upload = S3StreamingUpload(client: s3, bucket: bucket, key: "half")
    let chunk = [UInt8](repeating: 7, count: 6 << 20)
    try chunk.withUnsafeBytes { try upload.write($0) }
    try chunk.withUnsafeBytes { try upload.write($0) }
    upload.abort()
    #expect(try s3.list(bucket, prefix: "").isEmpty)
    #expect(try s3.listMultipartUploads(bucket, prefix: "").isEmpty)
  }

  @Test func wrongCredentialsAreDeniedAndAStoppedStoreIsUnavailable() throws {
    let cluster = try SwiftCluster.shared()
    let wrong = try client(cluster, secret: "not-the-secret")
    do {
      _ = try wrong.list("any-bucket", prefix: "")
      Issue.record("a wrong secret was accepted")
    } catch let error as S3Error {
      #expect(error.kind == .denied, "\(error)")
      #expect(error.description.contains("signature"))
    }
    let nowhere = try S3Client(
      S3Configuration(
        endpoint: "http://127.0.0.1:1", credentials: S3Credentials(accessKey: "a", secretKey: "b"),
        attempts: 2))
    do {
      _ = try nowhere.list("b", prefix: "")
      Issue.record("an unreachable store answered")
    } catch let error as S3Error {
      #expect(error.kind == .unavailable, "\(error)")
      #expect(error.description.contains("cannot be reached"))
    }
    #expect(throws: S3Error.self) {
      try S3Client(
        S3Configuration(endpoint: "ftp://x", credentials: S3Credentials(accessKey: "", secretKey: "")))
    }
  }
}
