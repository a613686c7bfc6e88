/*
 * Exit handlers, seen: with APPBOX_EXIT_HANDLER_LOG set, every handler a program registers to
 * run at exit (__cxa_atexit, which atexit(3) calls) is written there as the file of the shared
 * object whose code it is, and the symbol when it has one ("libcrypto.so.3 OPENSSL_cleanup").
 * A test asks whether appbox leaves OpenSSL's clean-up at exit registered: that handler frees
 * the state of threads that may still be ending as appbox exits (Sources/AppboxCrypto/
 * ExitCleanup.swift). Not part of appbox: built for the tests.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int __cxa_atexit(void (*handler)(void *), void *argument, void *object) {
  static int (*real_register)(void (*)(void *), void *, void *);
  if (real_register == NULL) {
    real_register = (int (*)(void (*)(void *), void *, void *))dlsym(RTLD_NEXT, "__cxa_atexit");
  }
  const char *log = getenv("APPBOX_EXIT_HANDLER_LOG");
  Dl_info info;
  if (log != NULL && dladdr((void *)handler, &info) != 0 && info.dli_fname != NULL) {
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      dprintf(fd, "%s %s\n", info.dli_fname, info.dli_sname != NULL ? info.dli_sname : "?");
      close(fd);
    }
  }
  return real_register(handler, argument, object);
}
