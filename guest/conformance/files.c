/* Conformance case: copying between descriptors and asking about memory. Every line it
 * prints is the same under Linux and under deja: sendfile from a file to a file, a pipe and a
 * socket, with and without an offset pointer; copy_file_range with its offsets and errors;
 * chown and fchown to the program's own ids; mincore's answers for mapped, unmapped and
 * unaligned ranges (not which pages are resident, which is the host's). It works in a fresh
 * directory under /tmp and prints nothing of its name. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "case.h"

static void contents(const char *path) {
    char buf[128] = {0};
    int fd = open(path, O_RDONLY);
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    printf("%s holds %zd: %s\n", path, n, buf);
}

/* A pipe's size: 64 KiB, what fills it (in whole pages, which Linux counts), what F_SETPIPE_SZ
 * makes of a size, and PIPE_BUF writes whole. */
static void pipe_size(void) {
    int p[2];
    pipe2(p, O_NONBLOCK);
    show("F_GETPIPE_SZ", fcntl(p[1], F_GETPIPE_SZ));
    show("F_GETPIPE_SZ of the read end", fcntl(p[0], F_GETPIPE_SZ));
    static char big[1 << 16];
    long total = 0, n;
    while ((n = write(p[1], big, 4096)) > 0)
        total += n;
    printf("4096-byte writes until EAGAIN: %ld bytes, then %s\n", total, strerrorname_np(errno));
    show("F_SETPIPE_SZ below what it holds", fcntl(p[1], F_SETPIPE_SZ, 4096));
    show("F_SETPIPE_SZ 100000", fcntl(p[1], F_SETPIPE_SZ, 100000));
    show("a write of 10 pages", write(p[1], big, 40960));
    show("a write of 7 pages, 6 fit", write(p[1], big, 28672));
    show("a 4096-byte write into a full pipe", write(p[1], big, 4096));
    char buf[8192];
    show("read 8192", read(p[0], buf, sizeof buf));
    show("now 4096 fit", write(p[1], big, 4096));
    show("and 100 more", write(p[1], big, 100));
    int f = open("/dev/null", O_RDONLY);
    show("F_GETPIPE_SZ of a file", fcntl(f, F_GETPIPE_SZ));
    close(f);
    close(p[0]);
    close(p[1]);
}

/* Capabilities as a program asks about them: none to keep, the header's version checked. */
static void capabilities(void) {
    show("prctl(PR_GET_KEEPCAPS)", prctl(PR_GET_KEEPCAPS, 0, 0, 0, 0));
    show("prctl(PR_SET_KEEPCAPS, 0)", prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0));
    show("prctl(PR_SET_KEEPCAPS, 2)", prctl(PR_SET_KEEPCAPS, 2, 0, 0, 0));
    show("capget(NULL, NULL)", syscall(SYS_capget, NULL, NULL));
    struct __user_cap_header_struct h = {0x12345, 0};
    show("capget of an unknown version, no data", syscall(SYS_capget, &h, NULL));
    printf("  the version it prefers: %#x\n", h.version);
    struct __user_cap_data_struct d[2];
    h.version = 0x12345;
    show("capget of an unknown version", syscall(SYS_capget, &h, d));
    h.version = _LINUX_CAPABILITY_VERSION_3;
    h.pid = 99999;
    show("capget of a process that does not exist", syscall(SYS_capget, &h, d));
}

/* close_range: closing a range, marking one close-on-exec, and its errors. */
static void close_ranges(void) {
    int fds[6];
    int null = open("/dev/null", O_RDONLY);
    for (int i = 0; i < 6; i++)
        fds[i] = dup2(null, 200 + i);
    close(null);
    printf("six fds from 200: %d\n", fds[0] == 200 && fds[5] == 205);
    show("close_range of the middle two", syscall(SYS_close_range, fds[2], fds[3], 0));
    show("  fcntl of the first of them", fcntl(fds[2], F_GETFD));
    show("  fcntl of the one after", fcntl(fds[4], F_GETFD));
    show("close_range CLOEXEC of the last two", syscall(SYS_close_range, fds[4], fds[5], 4));
    show("  its FD_CLOEXEC", fcntl(fds[5], F_GETFD));
    show("close_range with first after last", syscall(SYS_close_range, fds[1], fds[0], 0));
    show("close_range with an unknown flag", syscall(SYS_close_range, fds[0], fds[0], 1));
    show("close_range of a range with nothing open", syscall(SYS_close_range, fds[2], fds[3], 0));
    show("close_range UNSHARE of the first, one thread", syscall(SYS_close_range, fds[0], fds[0], 2));
    show("  fcntl of it", fcntl(fds[0], F_GETFD));
    show("close_range from the first to ~0U", syscall(SYS_close_range, fds[0], ~0U, 0));
    show("  fcntl of the first", fcntl(fds[0], F_GETFD));
    show("  fcntl of the last", fcntl(fds[5], F_GETFD));
}

/* Signal-driven I/O's settings: O_ASYNC by fcntl and FIOASYNC, the owner by F_SETOWN and
 * F_SETOWN_EX, the signal by F_SETSIG, and their errors. SIGIO and SIGUSR1 are ignored: data that arrives
 * while they are set is signalled on Linux, not under deja (its summary says so). */
static void async_io(void) {
    signal(SIGIO, SIG_IGN);
    signal(SIGUSR1, SIG_IGN);
    int sv[2];
    socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    printf("O_ASYNC at first: %d\n", (fcntl(sv[0], F_GETFL) & O_ASYNC) != 0);
    show("F_SETFL O_ASYNC", fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_ASYNC));
    printf("  O_ASYNC now: %d\n", (fcntl(sv[0], F_GETFL) & O_ASYNC) != 0);
    int off = 0, on = 1;
    show("FIOASYNC off", ioctl(sv[0], FIOASYNC, &off));
    printf("  O_ASYNC now: %d\n", (fcntl(sv[0], F_GETFL) & O_ASYNC) != 0);
    show("FIOASYNC on", ioctl(sv[0], FIOASYNC, &on));
    printf("  O_ASYNC now: %d\n", (fcntl(sv[0], F_GETFL) & O_ASYNC) != 0);
    show("F_GETOWN at first", fcntl(sv[0], F_GETOWN));
    show("F_SETOWN ourselves", fcntl(sv[0], F_SETOWN, getpid()));
    printf("  F_GETOWN is our pid: %d\n", fcntl(sv[0], F_GETOWN) == getpid());
    show("F_SETOWN our group", fcntl(sv[0], F_SETOWN, -getpgrp()));
    printf("  F_GETOWN is minus our group: %d\n", fcntl(sv[0], F_GETOWN) == -getpgrp());
    show("F_SETOWN a pid that does not exist", fcntl(sv[0], F_SETOWN, 999999));
    struct f_owner_ex ex = {F_OWNER_TID, getpid()};
    show("F_SETOWN_EX our thread", fcntl(sv[0], F_SETOWN_EX, &ex));
    struct f_owner_ex back = {0, 0};
    show("F_GETOWN_EX", fcntl(sv[0], F_GETOWN_EX, &back));
    printf("  type %d, our tid %d\n", back.type, back.pid == getpid());
    ex.type = 7;
    show("F_SETOWN_EX of an unknown type", fcntl(sv[0], F_SETOWN_EX, &ex));
    show("F_GETSIG at first", fcntl(sv[0], F_GETSIG));
    show("F_SETSIG SIGUSR1", fcntl(sv[0], F_SETSIG, SIGUSR1));
    show("F_GETSIG", fcntl(sv[0], F_GETSIG));
    show("F_SETSIG 65", fcntl(sv[0], F_SETSIG, 65));
    int dup_fd = dup(sv[0]);
    printf("a dup shares them: O_ASYNC %d, F_GETSIG %d\n", (fcntl(dup_fd, F_GETFL) & O_ASYNC) != 0,
           fcntl(dup_fd, F_GETSIG));
    show("write while they are set", write(sv[1], "x", 1));
    show("F_SETOWN none", fcntl(sv[0], F_SETOWN, 0));
    show("  F_GETOWN", fcntl(sv[0], F_GETOWN));
    close(dup_fd);
    close(sv[0]);
    close(sv[1]);
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    char base[] = "/tmp/conf-files-XXXXXX";
    if (!mkdtemp(base) || chdir(base) < 0) {
        perror("mkdtemp");
        return 2;
    }
    int src = open("src", O_CREAT | O_RDWR, 0644);
    write(src, "abcdefghijklmnopqrstuvwxyz", 26);
    lseek(src, 0, SEEK_SET);

    int dst = open("dst", O_CREAT | O_RDWR | O_TRUNC, 0644);
    show("sendfile 10 at the offset", sendfile(dst, src, NULL, 10));
    printf("source offset now %ld\n", (long)lseek(src, 0, SEEK_CUR));
    off_t at = 20;
    show("sendfile 10 from position 20", sendfile(dst, src, &at, 10));
    printf("position now %ld, source offset still %ld\n", (long)at, (long)lseek(src, 0, SEEK_CUR));
    show("sendfile at the end", sendfile(dst, src, &at, 10));
    contents("dst");
    int p[2];
    pipe(p);
    show("sendfile to a pipe", sendfile(p[1], src, NULL, 5));
    char buf[64];
    ssize_t n = read(p[0], buf, sizeof buf);
    printf("the pipe gave %.*s\n", (int)n, buf);
    show("sendfile from a pipe", sendfile(dst, p[0], NULL, 5));
    int sv[2];
    socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    show("sendfile to a socket", sendfile(sv[0], src, NULL, 4));
    n = read(sv[1], buf, sizeof buf);
    printf("the socket gave %.*s\n", (int)n, buf);
    int app = open("app", O_CREAT | O_WRONLY | O_APPEND, 0644);
    show("sendfile to an O_APPEND file", sendfile(app, src, NULL, 4));
    show("sendfile from a write-only file", sendfile(dst, app, NULL, 4));
    at = -1;
    show("sendfile from a negative position", sendfile(dst, src, &at, 4));

    int cp = open("copy", O_CREAT | O_RDWR | O_TRUNC, 0644);
    lseek(src, 0, SEEK_SET);
    show("copy_file_range 5", copy_file_range(src, NULL, cp, NULL, 5, 0));
    printf("offsets now %ld and %ld\n", (long)lseek(src, 0, SEEK_CUR), (long)lseek(cp, 0, SEEK_CUR));
    loff_t in = 23, out = 10;
    show("copy_file_range from 23 to 10", copy_file_range(src, &in, cp, &out, 10, 0));
    printf("positions now %ld and %ld, offsets still %ld and %ld\n", (long)in, (long)out,
           (long)lseek(src, 0, SEEK_CUR), (long)lseek(cp, 0, SEEK_CUR));
    contents("copy");
    in = 0;
    out = 2;
    show("overlapping within one file", copy_file_range(src, &in, src, &out, 5, 0));
    show("flags", copy_file_range(src, NULL, cp, NULL, 5, 1));
    show("to an O_APPEND file", copy_file_range(src, NULL, app, NULL, 5, 0));
    show("from a pipe", copy_file_range(p[0], NULL, cp, NULL, 5, 0));
    int dir = open(".", O_RDONLY | O_DIRECTORY);
    show("from a directory", copy_file_range(dir, NULL, cp, NULL, 5, 0));

    show("chown to our own ids", chown("src", getuid(), getgid()));
    show("fchown unchanged (-1)", fchown(src, -1, -1));
    show("lchown", lchown("src", -1, getgid()));
    show("fchownat AT_EMPTY_PATH", fchownat(src, "", getuid(), -1, AT_EMPTY_PATH));
    show("chown a missing file", chown("missing", getuid(), getgid()));
    show("fchownat bad flags", fchownat(AT_FDCWD, "src", -1, -1, 0x8000));

    long page = sysconf(_SC_PAGESIZE);
    char *m = mmap(NULL, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    unsigned char vec[4];
    show("mincore of a mapping", mincore(m, 4 * page, vec));
    show("mincore of a partial last page", mincore(m, 3 * page + 1, vec));
    show("mincore unaligned", mincore(m + 1, page, vec));
    munmap(m + 2 * page, page);
    show("mincore over a hole", mincore(m, 4 * page, vec));
    show("mincore into a bad vector", mincore(m, page, (unsigned char *)8));

    close(src);
    close(dst);
    close(cp);
    close(app);
    close(dir);
    unlink("src");
    unlink("dst");
    unlink("copy");
    unlink("app");
    chdir("/");
    show("rmdir base", rmdir(base));
    capabilities();
    pipe_size();
    close_ranges();
    async_io();
    return 0;
}
