import AppboxCrypto
import Testing

@testable import AppboxS3

/// AWS's published examples: the Signature Version 4 test suite (`get-vanilla` and friends,
/// service "service", 2015-08-30) and the S3 documentation's examples of header-based
/// signing (examplebucket, 2013-05-24).
struct SigV4Tests {
  let suite = SigV4Signer(
    accessKey: "AKIDEXAMPLE", secretKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", region: "us-east-1",
    service: "service")
  let s3 = SigV4Signer(
    accessKey: "AKIAIOSFODNN7EXAMPLE", secretKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    region: "us-east-1")
  let suiteHeaders = [("Host", "example.amazonaws.com"), ("X-Amz-Date", "20150830T123600Z")]

  @Test func getVanilla() throws {
    let signed = try suite.sign(
      method: "GET", path: "/", query: [], headers: suiteHeaders, payloadHash: SigV4Signer.emptyPayloadHash,
      timestamp: "20150830T123600Z")
    #expect(
      signed.canonicalRequest
        == "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n"
        + SigV4Signer.emptyPayloadHash)
    #expect(signed.signature == "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31")
    #expect(
      signed.authorization
        == "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
        + "SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
    )
  }

  @Test func getVanillaQueryOrderKeyCase() throws {
    let signed = try suite.sign(
      method: "GET", path: "/", query: [("Param2", "value2"), ("Param1", "value1")], headers: suiteHeaders,
      payloadHash: SigV4Signer.emptyPayloadHash, timestamp: "20150830T123600Z")
    #expect(signed.signature == "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500")
  }

  @Test func postVanillaAndUTF8Path() throws {
    let post = try suite.sign(
      method: "POST", path: "/", query: [], headers: suiteHeaders, payloadHash: SigV4Signer.emptyPayloadHash,
      timestamp: "20150830T123600Z")
    #expect(post.signature == "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b")
    let utf8 = try suite.sign(
      method: "GET", path: SigV4Signer.encode("/ሴ", keepSlash: true), query: [], headers: suiteHeaders,
      payloadHash: SigV4Signer.emptyPayloadHash, timestamp: "20150830T123600Z")
    #expect(utf8.canonicalRequest.hasPrefix("GET\n/%E1%88%B4\n"))
    #expect(utf8.signature == "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85")
  }

  @Test func s3GetObjectWithRange() throws {
    let signed = try s3.sign(
      method: "GET", path: "/test.txt", query: [],
      headers: [
        ("Host", "examplebucket.s3.amazonaws.com"), ("Range", "bytes=0-9"),
        ("x-amz-content-sha256", SigV4Signer.emptyPayloadHash), ("x-amz-date", "20130524T000000Z"),
      ], payloadHash: SigV4Signer.emptyPayloadHash, timestamp: "20130524T000000Z")
    #expect(
      signed.stringToSign
        == "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
        + "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972")
    #expect(signed.signature == "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
  }

  @Test func s3PutObjectWithAnEncodedKeyAndABody() throws {
    let body = Array("Welcome to Amazon S3.".utf8)
    let hash = SHA256.hash(body).hex
    #expect(hash == "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072")
    let signed = try s3.sign(
      method: "PUT", path: "/" + SigV4Signer.encode("test$file.text", keepSlash: true), query: [],
      headers: [
        ("Host", "examplebucket.s3.amazonaws.com"), ("Date", "Fri, 24 May 2013 00:00:00 GMT"),
        ("x-amz-content-sha256", hash), ("x-amz-date", "20130524T000000Z"),
        ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
      ], payloadHash: hash, timestamp: "20130524T000000Z")
    #expect(signed.canonicalRequest.hasPrefix("PUT\n/test%24file.text\n\n"))
    #expect(signed.signedHeaders == "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class")
    #expect(signed.signature == "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd")
  }

  @Test func s3ListObjectsWithAQuery() throws {
    let signed = try s3.sign(
      method: "GET", path: "/", query: [("max-keys", "2"), ("prefix", "J")],
      headers: [
        ("Host", "examplebucket.s3.amazonaws.com"), ("x-amz-content-sha256", SigV4Signer.emptyPayloadHash),
        ("x-amz-date", "20130524T000000Z"),
      ], payloadHash: SigV4Signer.emptyPayloadHash, timestamp: "20130524T000000Z")
    #expect(signed.signature == "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7")
  }

  @Test func encodingKeepsUnreservedBytesAndSlashesOfKeys() {
    #expect(SigV4Signer.encode("a b+c/d~e", keepSlash: true) == "a%20b%2Bc/d~e")
    #expect(SigV4Signer.encode("a/b=", keepSlash: false) == "a%2Fb%3D")
    #expect(SigV4Signer.encode("ключ", keepSlash: false) == "%D0%BA%D0%BB%D1%8E%D1%87")
    #expect(SigV4Signer.trimmed("  a   b  ") == "a b")
  }

  @Test func hmacMatchesRFC4231() throws {
    let one = try HMACSHA256.authenticationCode(
      for: Array("Hi There".utf8), key: [UInt8](repeating: 0x0b, count: 20))
    #expect(SigV4Signer.hex(one) == "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7")
    let two = try HMACSHA256.authenticationCode(
      for: Array("what do ya want for nothing?".utf8), key: Array("Jefe".utf8))
    #expect(SigV4Signer.hex(two) == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
    #expect(SigV4Signer.hex(try MD5.hash([])) == "d41d8cd98f00b204e9800998ecf8427e")
  }

  @Test func xmlScannerReadsListingsAndErrors() {
    let listing = XMLElement.parse(
      Array(
        """
        <?xml version="1.0" encoding="UTF-8"?>
        <ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name>
        <IsTruncated>true</IsTruncated><NextContinuationToken>a&amp;b</NextContinuationToken>
        <Contents><Key>x/&lt;1&gt;</Key><LastModified>2026-11-30T20:48:24.250Z</LastModified><Size>12</Size></Contents>
        <Contents><Key>y</Key><Size>0</Size></Contents><Empty/></ListBucketResult>
        """.utf8))
    #expect(listing?.name == "ListBucketResult")
    #expect(listing?.value("NextContinuationToken") == "a&b")
    #expect(listing?.all("Contents").map { $0.value("Key") } == ["x/<1>", "y"])
    let time = S3Client.parseISODate("2026-11-30T20:48:24.250Z")?.timeIntervalSince1970
    #expect(time == 1_796_071_704.25)
    #expect(S3Client.parseHTTPDate("Mon, 30 Nov 2026 20:48:24 GMT")?.timeIntervalSince1970 == 1_796_071_704)
    #expect(XMLElement.parse(Array("<Error><Code>NoSuchKey</Code>".utf8))?.value("Code") == "NoSuchKey")
    #expect(XMLElement.parse(Array("no xml <".utf8)) == nil)
  }
}
