import AppboxCLI

AppboxCLI.main()
