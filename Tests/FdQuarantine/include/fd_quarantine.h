/* appbox-fd-quarantine: an LD_PRELOAD library for the tests, no API (see fd_quarantine.c). */
