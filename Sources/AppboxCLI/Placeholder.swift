public enum AppboxCLI {
  public static func main() {}
}
