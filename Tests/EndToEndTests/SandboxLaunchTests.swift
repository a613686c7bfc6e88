import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// `appbox launch`: the seal check, the bundle's executable confined, tmp purged when the
/// app is not running, and the running lock that uninstall respects.
struct SandboxLaunchTests {
  /// A copy of Notes 1.0 whose executable records its arguments and what tmp held when
  /// it started; keeps its temp directory alive while the test uses it.
  struct ScriptedBundle {
    let dir = TemporaryDirectory("scripted")
    var path: String { dir.url("Notes.app") }

    init() throws {
      try copyTree(fixturePath("bundles/Notes-1.0/Notes.app"), to: dir.url("Notes.app"))
      let script = """
        #!/bin/sh
        printf '%s\\n' "$@" > "$HOME/Documents/args.txt"
        ls -A "$TMPDIR" > "$HOME/Documents/tmp-at-launch.txt"
        echo launched
        """
      try dir.write("Notes.app/Notes", script, mode: 0o755)
    }
  }

  @Test func launchRunsTheBundleExecutableConfinedWithItsArguments() throws {
    let device = Device()
    let bundle = try ScriptedBundle()
    let home = device.home(try device.install(path: bundle.path))
    let result = try device.run("launch", "com.example.notes", "--", "a b", "c")
    #expect(result.status == 0, "\(result.err)")
    #expect(result.out == "launched\n")
    #expect(contents(home + "/Documents/args.txt") == Array("a b\nc\n".utf8))

    let notes = Device()
    let notesHome = notes.home(try notes.install("Notes-1.0/Notes.app"))
    let first = try notes.run("launch", "com.example.notes")
    #expect(first.status == 0 && first.out == "Notes 1.0: 1 note(s) in Documents/Notes\n", "\(first.err)")
    #expect(try notes.run("launch", "com.example.notes").out == "Notes 1.0: 2 note(s) in Documents/Notes\n")
    #expect(try FileManager.default.contentsOfDirectory(atPath: notesHome + "/Documents/Notes").count == 2)
  }

  @Test func aTamperedBundleIsRefusedAndDoesNotRun() throws {
    let device = Device()
    let home = device.home(try device.install("Notes-1.0/Notes.app"))
    try Data("#!/bin/sh\necho evil > \"$HOME/Documents/evil\"\n".utf8)
      .write(to: URL(fileURLWithPath: home + "/Notes.app/Notes"))
    let modified = try device.run("launch", "com.example.notes")
    #expect(modified.status == 65)
    #expect(
      modified.err.hasPrefix("Error: Refusing to launch com.example.notes: its bundle's seal is broken"))
    #expect(modified.err.contains("'Notes' was modified"))
    #expect(modified.err.split(separator: "\n").count == 1)
    #expect(modified.out.isEmpty)
    #expect(!exists(home + "/Documents/evil"))
    #expect(!exists(home + "/Documents/Notes"))

    let other = Device()
    let otherHome = other.home(try other.install("Notes-1.0/Notes.app"))
    try Data("x".utf8).write(to: URL(fileURLWithPath: otherHome + "/Notes.app/Extra.txt"))
    let added = try other.run("launch", "com.example.notes")
    #expect(added.status == 65)
    #expect(added.err.contains("'Extra.txt' was added after sealing"))
  }

  @Test func tmpIsPurgedBetweenLaunchesButNotWhileTheAppRuns() throws {
    let device = Device()
    let bundle = try ScriptedBundle()
    let id = try device.install(path: bundle.path)
    let home = device.home(id)
    let lockPath = device.root + "/.appbox/running/\(id).lock"
    func tmpAtLaunch() -> String {
      String(decoding: contents(home + "/Documents/tmp-at-launch.txt") ?? [], as: UTF8.self)
    }

    // Not running: launch empties tmp (files, folders, read-only folders) first.
    try device.dir.write("root/ApplicationRoot/\(id)/tmp/old.txt", "old")
    try device.dir.write("root/ApplicationRoot/\(id)/tmp/folder/deep/x", "x")
    #expect(chmod(home + "/tmp/folder", 0o500) == 0)
    #expect(try device.run("launch", "com.example.notes").status == 0)
    #expect(tmpAtLaunch() == "")
    #expect(try FileManager.default.contentsOfDirectory(atPath: home + "/tmp").isEmpty)

    // A long-running confined process keeps the app running.
    let background = try device.start(
      "run", "com.example.notes", "--", "/bin/sh", "-c",
      "echo keep > tmp/keep.txt; touch Documents/up; while [ ! -e Documents/stop ]; do sleep 0.02; done")
    #expect(eventually { exists(home + "/Documents/up") })
    #expect(try device.run("launch", "com.example.notes").status == 0)
    #expect(tmpAtLaunch() == "keep.txt\n")
    #expect(contents(home + "/tmp/keep.txt") == Array("keep\n".utf8))
    let busy = try device.run("uninstall", "com.example.notes")
    #expect(busy.status == 75)
    #expect(busy.err.contains("com.example.notes is running"))
    #expect(busy.err.split(separator: "\n").count == 1)
    #expect(exists(home + "/Documents/up"))

    // Killing the appbox that started it ends the app too: its jail dies with appbox.
    kill(background.processIdentifier, SIGKILL)
    #expect(eventually { !background.isRunning })
    #expect(eventually { (try? FileLock.attempt(lockPath)) != nil })

    // Once the app is gone, the next launch purges tmp again, and uninstall proceeds.
    #expect(try device.run("launch", "com.example.notes").status == 0)
    #expect(tmpAtLaunch() == "")
    #expect(!exists(home + "/tmp/keep.txt"))
    let uninstall = try device.run("uninstall", "com.example.notes")
    #expect(uninstall.status == 0, "\(uninstall.err)")
    #expect(!exists(home))
    #expect(!exists(lockPath))
  }

  @Test func runNeverPurgesTmp() throws {
    let device = Device()
    let home = device.home(try device.install("Notes-1.0/Notes.app"))
    try Data("kept".utf8).write(to: URL(fileURLWithPath: home + "/tmp/kept.txt"))
    let result = try device.sh("com.example.notes", "cat tmp/kept.txt")
    #expect(result.out == "kept")
    #expect(contents(home + "/tmp/kept.txt") == Array("kept".utf8))
  }
}
