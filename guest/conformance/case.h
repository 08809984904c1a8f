/* Shared by the conformance cases: how each prints a call's result, the same way natively and
 * under deja. */
#ifndef DEJA_CONFORMANCE_CASE_H
#define DEJA_CONFORMANCE_CASE_H

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* `what: N` for a result, `what: ENAME` for a failure (errno's name, not its text). */
static void show(const char *what, long r) {
    if (r < 0)
        printf("%s: %s\n", what, strerrorname_np(errno));
    else
        printf("%s: %ld\n", what, r);
}

/* `what: N "bytes"` for a read of up to 128 bytes, `what: ENAME` for a failure. */
static inline void show_read(const char *what, int fd) {
    char b[128];
    ssize_t n = read(fd, b, sizeof b);
    if (n < 0)
        show(what, n);
    else
        printf("%s: %zd \"%.*s\"\n", what, n, (int)n, b);
}

#endif
