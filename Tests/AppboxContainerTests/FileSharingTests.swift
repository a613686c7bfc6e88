import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

@testable import AppboxContainer

struct FileSharingTests {
  @Test func specialFilesTheAppPlantedAreRefusedWithoutBlocking() throws {
    let device = try TestDevice()
    let documents = device.home.path(of: .documents)
    #expect(mkfifo(documents + "/pipe", 0o644) == 0)
    let shared = try device.session().sharedDocuments(of: device.app)
    // A FIFO opened for reading would block until a writer came; it is refused at once.
    #expect(throws: ContainerError(.invalidRequest, "Cannot pull 'Documents/pipe': it is not a regular file"))
    {
      _ = try shared.pull("pipe")
    }
    let entries = try shared.list()
    #expect(entries.map(\.name) == ["pipe"] && entries.first?.type == .fifo)
    // Pushing over it replaces the FIFO itself.
    let source = TemporaryDirectory("share-source")
    let path = try source.write("pipe", "data")
    #expect(try shared.push(from: path, to: nil) == FileTransfer(path: "Documents/pipe", bytes: 4))
    #expect(try shared.pull("pipe") == Array("data".utf8))
  }

  @Test func optingOutDeniesEverything() throws {
    let device = try TestDevice("Journal-1.0/Journal.app")
    do {
      _ = try device.session().sharedDocuments(of: device.app)
      Issue.record("Journal does not opt in, yet its Documents were shared")
    } catch let error as ContainerError {
      #expect(error.code == .denied && error.kind == .denied)
    }
  }

  @Test func pushingToAFolderNeedsANameFromStdin() throws {
    let device = try TestDevice()
    let shared = try device.session().sharedDocuments(of: device.app)
    #expect(throws: ContainerError.self) { _ = try shared.push(from: "-", to: nil) }
    try FileManager.default.createDirectory(
      atPath: device.home.path(of: .documents) + "/Folder", withIntermediateDirectories: false)
    #expect(throws: ContainerError.self) { _ = try shared.push(from: "-", to: "Folder") }
    let source = TemporaryDirectory("share-source")
    let file = try source.write("file.txt", "x")
    #expect(throws: ContainerError(.fileNotFound, "No folder 'Documents/Missing' in com.example.notes")) {
      _ = try shared.push(from: file, to: "Missing/")
    }
    #expect(try shared.list("Folder").isEmpty)
  }
}
