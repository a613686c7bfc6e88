import AppboxCore
