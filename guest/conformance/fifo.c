/* Conformance case: FIFOs and mknod. Every line it prints is the same under Linux and under
 * deja: mkfifo and mknod of a FIFO, a regular file and a socket's name (and the types it
 * refuses whoever runs it), what stat and getdents say of them, opens that do not wait
 * (O_NONBLOCK for reading, ENXIO for writing, O_RDWR), opens that wait for the other side in
 * two threads, the pipe every opener shares and the fresh one after the last closes, end of
 * file, hang-ups, EPIPE with SIGPIPE, and a FIFO's other names. It works in a fresh
 * directory under /tmp and prints nothing of its name. No device is made: root may. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include "case.h"

static const char *events(int fd) {
    static char b[64];
    struct pollfd p = {fd, POLLIN | POLLOUT, 0};
    poll(&p, 1, 0);
    b[0] = 0;
    if (p.revents & POLLIN) strcat(b, "IN ");
    if (p.revents & POLLOUT) strcat(b, "OUT ");
    if (p.revents & POLLERR) strcat(b, "ERR ");
    if (p.revents & POLLHUP) strcat(b, "HUP ");
    if (!b[0]) strcat(b, "none ");
    b[strlen(b) - 1] = 0;
    return b;
}

static const char *type_of(mode_t m) {
    if (S_ISFIFO(m)) return "FIFO";
    if (S_ISREG(m)) return "regular";
    if (S_ISSOCK(m)) return "socket";
    if (S_ISDIR(m)) return "directory";
    return "other";
}

static void show_stat(const char *path) {
    struct stat st;
    if (stat(path, &st) < 0) {
        printf("stat %s: %s\n", path, strerrorname_np(errno));
        return;
    }
    printf("stat %s: %s, mode %04o, size %lld, links %lu\n", path, type_of(st.st_mode), st.st_mode & 07777,
           (long long)st.st_size, (unsigned long)st.st_nlink);
}

static volatile int pipes;
static void on_pipe(int sig) {
    (void)sig;
    pipes++;
}

/* A reader thread: opens the FIFO for reading (waiting for a writer) and reads to the end. */
static char got[128];
static void *reader(void *arg) {
    int fd = open((const char *)arg, O_RDONLY);
    size_t n = 0;
    ssize_t r;
    while (fd >= 0 && n < sizeof got - 1 && (r = read(fd, got + n, sizeof got - 1 - n)) > 0)
        n += r;
    got[n] = 0;
    if (fd >= 0)
        close(fd);
    return NULL;
}

/* A writer thread: opens the FIFO for writing (waiting for a reader), writes and closes. */
static void *writer(void *arg) {
    int fd = open((const char *)arg, O_WRONLY);
    if (fd >= 0) {
        write(fd, "from the writer thread", 22);
        close(fd);
    }
    return NULL;
}

static void nodes(void) {
    show("mkfifo", mkfifo("f", 0666));
    show_stat("f");
    show("mkfifo again", mkfifo("f", 0600));
    show("mknod of a FIFO", mknod("g", S_IFIFO | 0640, 0));
    show_stat("g");
    show("mknod of a regular file", mknod("r", S_IFREG | 0600, 0));
    show_stat("r");
    show("mknod with no type", mknod("r0", 0644, 0));
    show_stat("r0");
    int fd = open("r0", O_RDONLY);
    show_read("read it", fd);
    close(fd);
    show("mknod of a socket", mknod("s", S_IFSOCK | 0600, 0));
    show_stat("s");
    int c = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    strcpy(a.sun_path, "s");
    show("connect to it", connect(c, (struct sockaddr *)&a, sizeof a));
    close(c);
    show("open the socket's name", open("s", O_RDONLY));
    show("mknod of a directory", mknod("d", S_IFDIR | 0700, 0));
    show("mknod of no type there is", mknod("x", 0170000 | 0600, 0));
    show("mknod over an existing name", mknod("r", S_IFIFO | 0600, 0));
    show("mknod in a missing directory", mknod("nowhere/x", S_IFIFO | 0600, 0));
    show("mknod of a name ending with /", mknod("x/", S_IFIFO | 0600, 0));
    show("mknodat from a directory fd", mknodat(AT_FDCWD, "h", S_IFIFO | 0600, 0));
    show("connect to a FIFO", (c = socket(AF_UNIX, SOCK_STREAM, 0), strcpy(a.sun_path, "f"),
                                connect(c, (struct sockaddr *)&a, sizeof a)));
    close(c);
    DIR *d = opendir(".");
    struct dirent *e;
    int fifos = 0, regular = 0, sockets = 0;
    while ((e = readdir(d))) {
        fifos += e->d_type == DT_FIFO;
        regular += e->d_type == DT_REG;
        sockets += e->d_type == DT_SOCK;
    }
    closedir(d);
    printf("getdents: %d FIFOs, %d regular, %d sockets\n", fifos, regular, sockets);
    unlink("g");
    unlink("h");
    unlink("r");
    unlink("r0");
    unlink("s");
}

static void without_waiting(void) {
    show("open for writing, no reader, O_NONBLOCK", open("f", O_WRONLY | O_NONBLOCK));
    int r = open("f", O_RDONLY | O_NONBLOCK);
    printf("open for reading, O_NONBLOCK: %s\n", r >= 0 ? "ok" : strerrorname_np(errno));
    show_read("read, no writer yet", r);
    printf("poll, no writer yet: %s\n", events(r));
    int w = open("f", O_WRONLY | O_NONBLOCK);
    printf("open for writing, a reader there: %s\n", w >= 0 ? "ok" : strerrorname_np(errno));
    show_read("read, a writer that wrote nothing", r);
    printf("poll of the reader: %s\n", events(r));
    printf("poll of the writer: %s\n", events(w));
    show("write", write(w, "hello", 5));
    printf("poll of the reader: %s\n", events(r));
    struct stat a, b;
    fstat(r, &a);
    stat("f", &b);
    printf("fstat: %s, the FIFO's inode %d\n", type_of(a.st_mode), a.st_ino == b.st_ino);
    show("lseek", lseek(r, 0, SEEK_SET));
    show("close the writer", close(w));
    printf("poll of the reader: %s\n", events(r));
    show_read("read", r);
    show_read("read at the end", r);
    printf("poll of the reader: %s\n", events(r));

    /* Two readers meet a writer on one pipe. */
    int r2 = open("f", O_RDONLY | O_NONBLOCK);
    w = open("f", O_WRONLY);
    printf("open for writing with readers there: %s\n", w >= 0 ? "ok" : strerrorname_np(errno));
    write(w, "ab", 2);
    char one = 0;
    ssize_t n = read(r2, &one, 1);
    printf("the second reader reads %zd: %c\n", n, one);
    n = read(r, &one, 1);
    printf("the first reader reads %zd: %c\n", n, one);

    /* The readers gone: a write is EPIPE, with SIGPIPE. */
    signal(SIGPIPE, on_pipe);
    close(r);
    close(r2);
    printf("poll of the writer, no reader: %s\n", events(w));
    show("write with no reader", write(w, "x", 1));
    printf("SIGPIPE handled: %d\n", pipes);
    close(w);

    /* O_RDWR never waits, and is both sides. */
    int rw = open("f", O_RDWR);
    printf("open for reading and writing: %s\n", rw >= 0 ? "ok" : strerrorname_np(errno));
    printf("poll: %s\n", events(rw));
    show("write", write(rw, "left behind", 11));
    show("close", close(rw));
    rw = open("f", O_RDWR | O_NONBLOCK);
    show_read("read after every opener closed: a new pipe", rw);
    close(rw);
}

static void waiting(void) {
    pthread_t t;
    pthread_create(&t, NULL, reader, "f");
    int w = open("f", O_WRONLY);
    printf("open for writing, a thread reading: %s\n", w >= 0 ? "ok" : strerrorname_np(errno));
    write(w, "to the reader thread", 20);
    close(w);
    pthread_join(t, NULL);
    printf("the reader thread read \"%s\"\n", got);

    pthread_create(&t, NULL, writer, "f");
    int r = open("f", O_RDONLY);
    printf("open for reading, a thread writing: %s\n", r >= 0 ? "ok" : strerrorname_np(errno));
    char b[64] = {0};
    size_t n = 0;
    ssize_t k;
    while ((k = read(r, b + n, sizeof b - 1 - n)) > 0)
        n += k;
    close(r);
    pthread_join(t, NULL);
    printf("read \"%s\"\n", b);
}

static void names(void) {
    show("link", link("f", "f2"));
    show_stat("f");
    int r = open("f2", O_RDONLY | O_NONBLOCK);
    int w = open("f", O_WRONLY | O_NONBLOCK);
    printf("a reader by one name, a writer by the other: %s\n", w >= 0 ? "ok" : strerrorname_np(errno));
    write(w, "same", 4);
    show_read("read", r);
    show("rename", rename("f2", "f3"));
    show("unlink both names", unlink("f") | unlink("f3"));
    show_stat("f");
    show("write after unlink", write(w, "still", 5));
    show_read("read", r);
    close(r);
    close(w);
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    umask(022);
    char base[] = "/tmp/conf-fifo-XXXXXX";
    if (!mkdtemp(base) || chdir(base) < 0) {
        perror("mkdtemp");
        return 1;
    }
    nodes();
    without_waiting();
    waiting();
    names();
    chdir("/");
    show("rmdir base", rmdir(base));
    return 0;
}
