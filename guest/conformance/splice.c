/* Conformance case: splice, tee and vmsplice. Every line it prints is the same under Linux and
 * under deja: bytes from a TCP socket through a pipe into a file and back out of a file through
 * a pipe to the socket (with and without offset pointers, and how each moves), pipe to pipe,
 * tee leaving the bytes in the first pipe, vmsplice both ways, a splice that waits in one
 * thread for another's write, SPLICE_F_NONBLOCK on an empty and a full pipe, end of file and a
 * pipe without writers, and the errors (no pipe on either side, offsets on a pipe or a socket,
 * the same pipe twice, an O_APPEND file, ends that do not read or write). It works in a fresh
 * directory under /tmp and prints nothing of its name. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "case.h"

static int tcp_pair(int *client, int *server) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (bind(l, (void *)&a, sizeof a) < 0 || listen(l, 1) < 0 || getsockname(l, (void *)&a, &len) < 0) return -1;
    *client = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(*client, (void *)&a, sizeof a) < 0) return -1;
    *server = accept(l, NULL, NULL);
    close(l);
    return *server < 0 ? -1 : 0;
}

static int waiter_pipe[2];
static int waiter_file;

static void *late_writer(void *arg) {
    (void)arg;
    usleep(20000);
    write(waiter_pipe[1], "late", 4);
    return NULL;
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    signal(SIGPIPE, SIG_IGN);
    char base[] = "/tmp/conf-splice-XXXXXX";
    if (!mkdtemp(base) || chdir(base) < 0) {
        perror("mkdtemp");
        return 1;
    }
    int c, s, p[2], q[2];
    if (tcp_pair(&c, &s) < 0 || pipe(p) < 0 || pipe(q) < 0) {
        perror("setup");
        return 1;
    }
    int f = open("data", O_RDWR | O_CREAT | O_TRUNC, 0644);

    /* socket -> pipe -> file */
    show("send", write(c, "hello, splice", 13));
    show("socket to pipe", splice(s, NULL, p[1], NULL, 100, 0));
    show("pipe to file", splice(p[0], NULL, f, NULL, 5, 0));
    show("file offset", lseek(f, 0, SEEK_CUR));
    loff_t at = 100;
    show("pipe to file at 100", splice(p[0], NULL, f, &at, 100, 0));
    printf("offset pointer now %lld, file offset %ld\n", (long long)at, (long)lseek(f, 0, SEEK_CUR));
    char b[128];
    ssize_t n = pread(f, b, 5, 0);
    printf("file at 0: %.*s\n", (int)n, b);
    n = pread(f, b, 8, 100);
    printf("file at 100: %.*s\n", (int)n, b);

    /* file -> pipe -> socket */
    at = 100;
    show("file at 100 to pipe", splice(f, &at, p[1], NULL, 3, 0));
    printf("offset pointer now %lld, file offset %ld\n", (long long)at, (long)lseek(f, 0, SEEK_CUR));
    lseek(f, 0, SEEK_SET);
    show("file to pipe", splice(f, NULL, p[1], NULL, 5, 0));
    show("file offset", lseek(f, 0, SEEK_CUR));
    show("pipe to socket", splice(p[0], NULL, s, NULL, 100, 0));
    show_read("client reads", c);
    lseek(f, 0, SEEK_END);
    show("file at its end to pipe", splice(f, NULL, p[1], NULL, 10, 0));

    /* pipe -> pipe, tee */
    write(p[1], "abcdef", 6);
    show("tee", tee(p[0], q[1], 4, 0));
    show("pipe to pipe", splice(p[0], NULL, q[1], NULL, 100, 0));
    show_read("second pipe", q[0]);
    show("tee from an empty pipe, SPLICE_F_NONBLOCK", tee(p[0], q[1], 4, SPLICE_F_NONBLOCK));
    show("splice from an empty pipe, SPLICE_F_NONBLOCK", splice(p[0], NULL, q[1], NULL, 4, SPLICE_F_NONBLOCK));

    /* vmsplice */
    struct iovec iov[2] = {{"vm", 2}, {"splice", 6}};
    show("vmsplice into a pipe", vmsplice(p[1], iov, 2, 0));
    char r1[3] = {0}, r2[6] = {0};
    struct iovec out[2] = {{r1, 3}, {r2, 5}};
    show("vmsplice out of a pipe", vmsplice(p[0], out, 2, 0));
    printf("got %.3s|%.5s\n", r1, r2);
    show("vmsplice on a file", vmsplice(f, iov, 1, 0));
    show("vmsplice out of an empty pipe, SPLICE_F_NONBLOCK", vmsplice(p[0], out, 2, SPLICE_F_NONBLOCK));

    /* a full pipe */
    fcntl(q[1], F_SETPIPE_SZ, 4096);
    char page[4096];
    memset(page, 'x', sizeof page);
    show("fill", write(q[1], page, sizeof page));
    write(p[1], "more", 4);
    show("splice into a full pipe, SPLICE_F_NONBLOCK", splice(p[0], NULL, q[1], NULL, 4, SPLICE_F_NONBLOCK));
    show("drain", read(q[0], page, sizeof page));
    show("now", splice(p[0], NULL, q[1], NULL, 4, SPLICE_F_NONBLOCK));
    show_read("second pipe", q[0]);

    /* a splice that waits */
    pipe(waiter_pipe);
    waiter_file = f;
    pthread_t t;
    pthread_create(&t, NULL, late_writer, NULL);
    at = 200;
    show("waiting splice", splice(waiter_pipe[0], NULL, f, &at, 10, 0));
    pthread_join(t, NULL);
    n = pread(f, b, 4, 200);
    printf("file at 200: %.*s\n", (int)n, b);
    close(waiter_pipe[1]);
    show("splice from a pipe without writers", splice(waiter_pipe[0], NULL, f, NULL, 10, 0));

    /* socket end */
    shutdown(c, SHUT_WR);
    show("socket at end of stream", splice(s, NULL, p[1], NULL, 10, 0));

    /* errors */
    int g = open("other", O_RDWR | O_CREAT, 0644);
    show("file to file", splice(f, NULL, g, NULL, 10, 0));
    show("offset on a pipe", splice(p[0], &at, f, NULL, 10, 0));
    show("offset on a socket", splice(s, &at, p[1], NULL, 10, 0));
    show("the same pipe", splice(p[0], NULL, p[1], NULL, 10, 0));
    show("tee to itself", tee(p[0], p[1], 10, 0));
    show("tee from a file", tee(f, p[1], 10, 0));
    int ap = open("appended", O_WRONLY | O_CREAT | O_APPEND, 0644);
    write(p[1], "z", 1);
    show("to an O_APPEND file", splice(p[0], NULL, ap, NULL, 10, 0));
    show("from the write end", splice(p[1], NULL, f, NULL, 10, 0));
    show("to the read end", splice(f, NULL, p[0], NULL, 10, 0));
    show("unknown flags", splice(p[0], NULL, f, NULL, 10, 0x100));
    show("zero bytes", splice(p[0], NULL, f, NULL, 0, 0));
    close(p[0]);
    show("to a pipe without readers", splice(f, NULL, p[1], NULL, 10, 0));
    return 0;
}
