/* libseccomp, for the confinement helper (appbox-sandbox, plain C) only. */
#include <seccomp.h>
