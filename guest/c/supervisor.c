/* A supervisor and its worker: two processes of one program.
 *
 *   supervisor [fixed|buggy|retry-eio] [KILL_AFTER]
 *
 * pid 1 is the supervisor. It forks a worker, which re-executes this very binary
 * (execve("/proc/self/exe", {"supervisor", "worker", VARIANT, KILL_AFTER})), waits for it with
 * wait4, and starts it again when it dies of a signal or exits non-zero (at most MAX_RESTARTS
 * times; then it exits 5). It stops when the worker exits 0 (it exits 0), reports a corrupt
 * log (exit 3: it exits 3 too) or hits an I/O error (exit 4: it exits 4, a fail-stop: after a
 * failed write or fsync the page cache may show what the disk does not hold, and a new worker
 * would build on it; the node must restart, as PostgreSQL does on a failed fsync).
 *
 * The worker keeps a log of RECORDS numbered, fixed-size records in /data/log. When it starts
 * it recovers: it reads the log, checks that every record is whole and numbered in sequence
 * (a torn record, or one missing before a later one, prints "CORRUPT ..." and exits 3), and
 * appends the records after the last one until there are RECORDS.
 *
 *   fixed: creates the log and fsyncs /data, then appends each record with one write() and
 *          fsyncs it before the next. Whatever a crash keeps, the log is a whole prefix.
 *   buggy: appends each record in two write() calls (its number, then its body) and fsyncs
 *          only after every second record (and once at the end). A crash before one of those
 *          fsyncs may keep a later write and lose an earlier one: a torn record, or a hole.
 *   retry-eio: the fixed worker, but the supervisor restarts it after an I/O error too (exit 4
 *          like any other non-zero exit). After a failed fsync the new worker recovers a record
 *          from the page cache that never reached the disk, and writes the next one after it:
 *          a crash later leaves a hole (fsyncgate).
 *
 * The first worker the supervisor starts kills itself with SIGKILL right after making record
 * KILL_AFTER durable (default 2; 0: never), so a plain run shows a restart and a recovery.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define RECORDS 5
#define RECSZ 32
#define HALF 8 /* the buggy worker's first write: "rec 0001" */
#define MAX_RESTARTS 3
#define LOG "/data/log"

/* Unbuffered output (a buffer copied by fork would print twice) to fd 1, or 2 for `shout`. */
static void vsay(int fd, const char *fmt, va_list ap) {
    char buf[256];
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    if (n < 0) return;
    if (n > (int)sizeof buf - 1) n = sizeof buf - 1;
    ssize_t off = 0;
    while (off < n) {
        ssize_t w = write(fd, buf + off, n - off);
        if (w <= 0) return;
        off += w;
    }
}

static void say(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsay(1, fmt, ap);
    va_end(ap);
}

static void shout(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsay(2, fmt, ap);
    va_end(ap);
}

/* Record i (from 1): "rec 0001 payload-of-record-0001\n", exactly RECSZ bytes. */
static void record(int i, char out[RECSZ]) {
    char tmp[64];
    snprintf(tmp, sizeof tmp, "rec %04d payload-of-record-%04d", i, i);
    memset(out, '.', RECSZ);
    memcpy(out, tmp, strlen(tmp) < RECSZ - 1 ? strlen(tmp) : RECSZ - 1);
    out[RECSZ - 1] = '\n';
}

static int all_zero(const char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

static int write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Reads the log and returns how many whole records it holds in sequence, or -1 after printing
   CORRUPT. */
static int recover(void) {
    int fd = open(LOG, O_RDONLY);
    if (fd < 0) {
        if (errno == ENOENT) return 0;
        shout("worker: cannot open %s: %s\n", LOG, strerror(errno));
        exit(4);
    }
    static char buf[RECSZ * 64];
    size_t len = 0;
    for (;;) {
        ssize_t r = read(fd, buf + len, sizeof buf - len);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            shout("worker: read %s: %s\n", LOG, strerror(errno));
            exit(4);
        }
        if (r == 0 || len + (size_t)r == sizeof buf) {
            len += (size_t)r;
            break;
        }
        len += (size_t)r;
    }
    close(fd);
    size_t whole = len / RECSZ;
    for (size_t i = 0; i < whole; i++) {
        char want[RECSZ];
        record((int)i + 1, want);
        const char *got = buf + i * RECSZ;
        if (memcmp(got, want, RECSZ) == 0) continue;
        if (all_zero(got, RECSZ))
            shout("CORRUPT %s: record %zu is missing (zeros) before record %zu of %zu bytes\n", LOG, i + 1, i + 2, len);
        else {
            char shown[RECSZ];
            for (int j = 0; j < RECSZ - 1; j++) shown[j] = got[j] >= ' ' && got[j] <= '~' ? got[j] : '?';
            shown[RECSZ - 1] = 0;
            shout("CORRUPT %s: record %zu is torn or out of sequence: \"%s\"\n", LOG, i + 1, shown);
        }
        return -1;
    }
    if (len % RECSZ != 0) {
        shout("CORRUPT %s: record %zu is torn: the log ends %zu bytes into it\n", LOG, whole + 1, len % RECSZ);
        return -1;
    }
    return (int)whole;
}

static int worker(int buggy, int kill_after) {
    int have = recover();
    if (have < 0) return 3;
    say("worker %d: recovered %d records\n", (int)getpid(), have);
    int fd = open(LOG, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) {
        shout("worker: open %s: %s\n", LOG, strerror(errno));
        return 4;
    }
    if (have == 0 && !buggy) {
        /* The log's name is durable only once its directory is synced. */
        int dir = open("/data", O_RDONLY | O_DIRECTORY);
        if (dir < 0 || fsync(dir) != 0) {
            shout("worker: fsync /data: %s\n", strerror(errno));
            return 4;
        }
        close(dir);
    }
    for (int i = have + 1; i <= RECORDS; i++) {
        char rec[RECSZ];
        record(i, rec);
        if (buggy) {
            if (write_all(fd, rec, HALF) != 0 || write_all(fd, rec + HALF, RECSZ - HALF) != 0) goto io;
            if (i % 2 == 0 && fsync(fd) != 0) goto io;
        } else {
            if (write_all(fd, rec, RECSZ) != 0 || fsync(fd) != 0) goto io;
        }
        say("worker %d: wrote record %d\n", (int)getpid(), i);
        if (i == kill_after) {
            if (buggy && fsync(fd) != 0) goto io;
            say("worker %d: killing itself after record %d\n", (int)getpid(), i);
            kill(getpid(), SIGKILL);
        }
    }
    if (buggy && fsync(fd) != 0) goto io;
    close(fd);
    say("worker %d: log complete with %d records\n", (int)getpid(), RECORDS);
    return 0;
io:
    shout("worker: writing %s: %s\n", LOG, strerror(errno));
    return 4;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "worker") == 0) {
        int buggy = argc >= 3 && strcmp(argv[2], "buggy") == 0;
        int kill_after = argc >= 4 ? atoi(argv[3]) : 0;
        return worker(buggy, kill_after);
    }
    const char *variant = argc >= 2 ? argv[1] : "fixed";
    if (strcmp(variant, "fixed") != 0 && strcmp(variant, "buggy") != 0 && strcmp(variant, "retry-eio") != 0) {
        say("usage: supervisor [fixed|buggy|retry-eio] [KILL_AFTER]\n");
        return 2;
    }
    int restart_on_eio = strcmp(variant, "retry-eio") == 0;
    const char *kill_after = argc >= 3 ? argv[2] : "2";
    say("supervisor %d: starting the %s worker\n", (int)getpid(), variant);
    for (int attempt = 0;; attempt++) {
        pid_t pid = fork();
        if (pid < 0) {
            say("supervisor: fork: %s\n", strerror(errno));
            return 2;
        }
        if (pid == 0) {
            /* Only the first worker kills itself. */
            char *args[] = {"supervisor", "worker", (char *)variant, attempt == 0 ? (char *)kill_after : "0", NULL};
            char *env[] = {"PATH=/", NULL};
            execve("/proc/self/exe", args, env);
            say("supervisor: execve /proc/self/exe: %s\n", strerror(errno));
            _exit(127);
        }
        int status = 0;
        struct rusage ru;
        pid_t got;
        do {
            got = wait4(pid, &status, 0, &ru);
        } while (got < 0 && errno == EINTR);
        if (got != pid) {
            say("supervisor: wait4(%d) = %d: %s\n", (int)pid, (int)got, strerror(errno));
            return 2;
        }
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
            say("supervisor: worker %d exited 0\n", (int)pid);
            return 0;
        }
        if (WIFEXITED(status) && WEXITSTATUS(status) == 3) {
            say("supervisor: worker %d reported a corrupt log (exit 3)\n", (int)pid);
            return 3;
        }
        if (WIFEXITED(status) && WEXITSTATUS(status) == 4 && !restart_on_eio) {
            /* After a failed write or fsync the page cache may show what the disk does not
               hold: a new worker would build on it. Stop everything and let the node restart
               (a fail-stop, as PostgreSQL does on a failed fsync). */
            say("supervisor: worker %d hit an I/O error (exit 4): stopping\n", (int)pid);
            return 4;
        }
        if (WIFSIGNALED(status))
            say("supervisor: worker %d killed by signal %d, ", (int)pid, WTERMSIG(status));
        else
            say("supervisor: worker %d exited %d, ", (int)pid, WEXITSTATUS(status));
        if (attempt == MAX_RESTARTS) {
            say("giving up after %d restarts\n", MAX_RESTARTS);
            return 5;
        }
        say("restarting\n");
    }
}
