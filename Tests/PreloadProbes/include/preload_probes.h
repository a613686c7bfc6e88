/* appbox-preload-probes: LD_PRELOAD probes for the tests, no API (fd_quarantine.c,
 * exit_handlers.c). */
