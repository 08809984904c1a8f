/* Conformance case: Unix-domain sockets. Every line it prints is the same under Linux and
 * under deja: socketpair of each type, message boundaries and truncation, shutdown and
 * close as the peer sees them, names in the file system (relative to the working
 * directory) and in the abstract namespace, automatic names, datagram senders' names,
 * readiness through poll and epoll, socket options, the errors of each misuse, a server
 * thread that serves a client over a named socket, descriptors passed with SCM_RIGHTS, and
 * SIGPIPE. It works in a fresh directory
 * under /tmp and prints nothing of its name. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "case.h"

static socklen_t addr_of(struct sockaddr_un *a, const char *path, int abstract) {
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    size_t n = strlen(path);
    if (abstract) {
        memcpy(a->sun_path + 1, path, n);
        return offsetof(struct sockaddr_un, sun_path) + 1 + n;
    }
    memcpy(a->sun_path, path, n);
    return sizeof *a;
}

static const char *events(short r) {
    static char b[64];
    b[0] = 0;
    if (r & POLLIN) strcat(b, "IN ");
    if (r & POLLOUT) strcat(b, "OUT ");
    if (r & POLLERR) strcat(b, "ERR ");
    if (r & POLLHUP) strcat(b, "HUP ");
    if (r & POLLRDHUP) strcat(b, "RDHUP ");
    if (!b[0]) strcat(b, "none ");
    b[strlen(b) - 1] = 0;
    return b;
}

static const char *ready(int fd) {
    struct pollfd p = {fd, POLLIN | POLLOUT | POLLRDHUP, 0};
    poll(&p, 1, 0);
    return events(p.revents);
}

static volatile int pipes;
static void on_pipe(int sig) {
    (void)sig;
    pipes++;
}

/* A write to a socket or pipe with no reader raises SIGPIPE, unless MSG_NOSIGNAL. */
static void sigpipe(void) {
    int sv[2], p[2];
    signal(SIGPIPE, on_pipe);
    socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    close(sv[1]);
    show("write to a closed peer", write(sv[0], "x", 1));
    printf("SIGPIPE handled: %d\n", pipes);
    show("send with MSG_NOSIGNAL", send(sv[0], "x", 1, MSG_NOSIGNAL));
    printf("SIGPIPE handled: %d\n", pipes);
    close(sv[0]);
    pipe(p);
    close(p[0]);
    show("write to a pipe with no reader", write(p[1], "x", 1));
    printf("SIGPIPE handled: %d\n", pipes);
    close(p[1]);
    signal(SIGPIPE, SIG_IGN);
}

static void pairs(void) {
    int sv[2];
    char buf[64];
    show("socketpair stream", socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
    show("write hello", write(sv[0], "hello", 5));
    int avail = -1;
    ioctl(sv[1], FIONREAD, &avail);
    printf("FIONREAD: %d\n", avail);
    printf("ready with data: %s\n", ready(sv[1]));
    ssize_t n = read(sv[1], buf, sizeof buf);
    printf("read: %zd %.*s\n", n, (int)n, buf);
    show("write world", write(sv[1], "world", 5));
    show("recv MSG_PEEK", recv(sv[0], buf, 3, MSG_PEEK));
    n = recv(sv[0], buf, sizeof buf, 0);
    printf("recv after peek: %zd %.*s\n", n, (int)n, buf);
    show("recv empty, MSG_DONTWAIT", recv(sv[0], buf, sizeof buf, MSG_DONTWAIT));
    show("shutdown SHUT_WR", shutdown(sv[0], SHUT_WR));
    printf("ready after peer's SHUT_WR: %s\n", ready(sv[1]));
    show("read at end", read(sv[1], buf, sizeof buf));
    show("write after SHUT_WR", write(sv[0], "x", 1));
    show("the peer still writes", write(sv[1], "back", 4));
    show("and it arrives", read(sv[0], buf, sizeof buf));
    show("write unread", write(sv[1], "unread", 6));
    show("close with data unread", close(sv[0]));
    printf("ready after peer's close: %s\n", ready(sv[1]));
    show("read after close, data was unread", read(sv[1], buf, sizeof buf));
    show("read again", read(sv[1], buf, sizeof buf));
    show("write to a closed peer", write(sv[1], "x", 1));
    close(sv[1]);

    show("socketpair dgram", socketpair(AF_UNIX, SOCK_DGRAM, 0, sv));
    send(sv[0], "one", 3, 0);
    send(sv[0], "two", 3, 0);
    send(sv[0], "three", 5, 0);
    send(sv[0], "", 0, 0);
    n = recv(sv[1], buf, 2, 0);
    printf("recv 2 of one: %zd %.*s\n", n, (int)n, buf);
    n = recv(sv[1], buf, sizeof buf, 0);
    printf("next datagram: %zd %.*s\n", n, (int)n, buf);
    show("recv 1 with MSG_TRUNC: the whole length", recv(sv[1], buf, 1, MSG_TRUNC));
    show("an empty datagram", recv(sv[1], buf, sizeof buf, 0));
    show("none left", recv(sv[1], buf, sizeof buf, MSG_DONTWAIT));
    close(sv[0]);
    close(sv[1]);

    show("socketpair seqpacket", socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv));
    send(sv[0], "abcdef", 6, 0);
    send(sv[0], "gh", 2, 0);
    struct iovec iov = {buf, 3};
    struct msghdr m = {0};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    n = recvmsg(sv[1], &m, 0);
    printf("recvmsg 3 of 6: %zd %.*s truncated=%d\n", n, (int)n, buf, !!(m.msg_flags & MSG_TRUNC));
    n = read(sv[1], buf, sizeof buf);
    printf("next packet: %zd %.*s\n", n, (int)n, buf);
    close(sv[0]);
    show("seqpacket read after close", read(sv[1], buf, sizeof buf));
    close(sv[1]);

    show("socketpair AF_INET", socketpair(AF_INET, SOCK_STREAM, 0, sv));
    show("socket protocol 5", socket(AF_UNIX, SOCK_STREAM, 5));
    show("socket SOCK_RAW is datagram", socket(AF_UNIX, SOCK_RAW, 0) >= 0 ? 0 : -1);
}

static void *echo(void *arg) {
    int l = (int)(long)arg;
    int c = accept(l, NULL, NULL);
    char buf[64];
    ssize_t n;
    while ((n = read(c, buf, sizeof buf)) > 0) {
        for (ssize_t i = 0; i < n; i++)
            if (buf[i] >= 'a' && buf[i] <= 'z')
                buf[i] -= 32;
        write(c, buf, n);
    }
    close(c);
    return NULL;
}

static void named(void) {
    struct sockaddr_un a, got;
    socklen_t len;
    char buf[64];
    int l = socket(AF_UNIX, SOCK_STREAM, 0);
    show("listen unbound", listen(l, 4));
    socklen_t al = addr_of(&a, "srv.sock", 0);
    show("bind srv.sock (relative)", bind(l, (struct sockaddr *)&a, al));
    show("bind twice", bind(l, (struct sockaddr *)&a, al));
    struct stat st;
    show("stat", stat("srv.sock", &st));
    printf("is a socket: %d, size %ld\n", S_ISSOCK(st.st_mode), (long)st.st_size);
    show("open a socket", open("srv.sock", O_RDONLY));
    int other = socket(AF_UNIX, SOCK_STREAM, 0);
    show("bind an existing path", bind(other, (struct sockaddr *)&a, al));
    show("connect before listen", connect(other, (struct sockaddr *)&a, al));
    show("listen", listen(l, 4));
    fcntl(l, F_SETFL, O_NONBLOCK);
    show("accept none, O_NONBLOCK", accept(l, NULL, NULL));
    fcntl(l, F_SETFL, 0);
    printf("listener ready: %s\n", ready(l));
    int c = socket(AF_UNIX, SOCK_STREAM, 0);
    show("read unconnected", read(c, buf, 1));
    show("write unconnected", write(c, "x", 1));
    show("getpeername unconnected", getpeername(c, (struct sockaddr *)&got, &(socklen_t){sizeof got}));
    show("connect", connect(c, (struct sockaddr *)&a, al));
    show("connect again", connect(c, (struct sockaddr *)&a, al));
    printf("listener ready with one waiting: %s\n", ready(l));
    len = sizeof got;
    int s = accept(l, (struct sockaddr *)&got, &len);
    printf("accepted: %d, peer address length %u (unnamed)\n", s >= 0, len);
    len = sizeof got;
    getsockname(l, (struct sockaddr *)&got, &len);
    printf("getsockname: %u %s\n", len, got.sun_path);
    len = sizeof got;
    getpeername(c, (struct sockaddr *)&got, &len);
    printf("client's peer: %u %s\n", len, got.sun_path);
    len = sizeof got;
    getsockname(s, (struct sockaddr *)&got, &len);
    printf("accepted socket's name: %u %s\n", len, got.sun_path);
    len = 4;
    getsockname(l, (struct sockaddr *)&got, &len);
    printf("getsockname into 4 bytes: length %u\n", len);
    int v;
    len = sizeof v;
    getsockopt(s, SOL_SOCKET, SO_TYPE, &v, &len);
    printf("SO_TYPE %d", v);
    getsockopt(s, SOL_SOCKET, SO_DOMAIN, &v, &len);
    printf(" SO_DOMAIN %d", v);
    getsockopt(l, SOL_SOCKET, SO_ACCEPTCONN, &v, &len);
    printf(" SO_ACCEPTCONN %d\n", v);
    struct ucred cr;
    len = sizeof cr;
    getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cr, &len);
    printf("SO_PEERCRED: pid is ours %d, uid is ours %d, length %u\n", cr.pid == getpid(), cr.uid == getuid(), len);
    write(c, "ping", 4);
    ssize_t n = read(s, buf, sizeof buf);
    printf("served: %.*s\n", (int)n, buf);
    close(s);
    close(c);
    close(other);

    pthread_t t;
    pthread_create(&t, NULL, echo, (void *)(long)l);
    c = socket(AF_UNIX, SOCK_STREAM, 0);
    show("connect to the echo thread", connect(c, (struct sockaddr *)&a, al));
    const char *lines[] = {"first line\n", "second\n", "third and last\n"};
    for (int i = 0; i < 3; i++) {
        write(c, lines[i], strlen(lines[i]));
        size_t got_n = 0;
        while (got_n < strlen(lines[i])) {
            n = read(c, buf + got_n, sizeof buf - got_n);
            if (n <= 0)
                break;
            got_n += n;
        }
        printf("echo: %.*s", (int)got_n, buf);
    }
    shutdown(c, SHUT_WR);
    show("echo thread closed", read(c, buf, sizeof buf));
    pthread_join(t, NULL);
    close(c);

    close(l);
    c = socket(AF_UNIX, SOCK_STREAM, 0);
    show("connect after the listener closed", connect(c, (struct sockaddr *)&a, al));
    show("unlink", unlink("srv.sock"));
    show("connect after unlink", connect(c, (struct sockaddr *)&a, al));
    l = socket(AF_UNIX, SOCK_STREAM, 0);
    show("bind again", bind(l, (struct sockaddr *)&a, al));
    show("listen again", listen(l, 1));
    int d = socket(AF_UNIX, SOCK_DGRAM, 0);
    show("connect a datagram socket to a stream one", connect(d, (struct sockaddr *)&a, al));
    close(d);
    close(c);
    close(l);
    unlink("srv.sock");
    mkdir("sub", 0755);
    al = addr_of(&a, "sub/nested.sock", 0);
    l = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    show("bind sub/nested.sock", bind(l, (struct sockaddr *)&a, al));
    listen(l, 1);
    chdir("sub");
    c = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    al = addr_of(&a, "nested.sock", 0);
    show("connect from inside sub", connect(c, (struct sockaddr *)&a, al));
    chdir("..");
    s = accept(l, NULL, NULL);
    send(c, "packet", 6, 0);
    n = recv(s, buf, sizeof buf, 0);
    printf("seqpacket served: %.*s\n", (int)n, buf);
    close(s);
    close(c);
    close(l);
    unlink("sub/nested.sock");
    rmdir("sub");
    al = addr_of(&a, "missing/x.sock", 0);
    l = socket(AF_UNIX, SOCK_STREAM, 0);
    show("bind in a missing directory", bind(l, (struct sockaddr *)&a, al));
    close(l);
}

static void abstract_and_dgram(void) {
    struct sockaddr_un a, b, got;
    socklen_t len;
    char buf[64];
    int l = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
    socklen_t al = addr_of(&a, "deja-conformance-abstract", 1);
    show("bind abstract", bind(l, (struct sockaddr *)&a, al));
    len = sizeof got;
    getsockname(l, (struct sockaddr *)&got, &len);
    printf("abstract name: length %u, first byte %d, %s\n", len, got.sun_path[0], got.sun_path + 1);
    int other = socket(AF_UNIX, SOCK_STREAM, 0);
    show("bind it twice", bind(other, (struct sockaddr *)&a, al));
    close(other);
    listen(l, 0);
    int epfd = epoll_create1(0);
    struct epoll_event ev = {EPOLLIN | EPOLLET, {.fd = l}}, out[4];
    epoll_ctl(epfd, EPOLL_CTL_ADD, l, &ev);
    show("epoll before connect", epoll_wait(epfd, out, 4, 0));
    int c = socket(AF_UNIX, SOCK_STREAM, 0);
    show("connect abstract", connect(c, (struct sockaddr *)&a, al));
    show("epoll after connect", epoll_wait(epfd, out, 4, 0));
    show("epoll again (edge-triggered)", epoll_wait(epfd, out, 4, 0));
    int s = accept(l, NULL, NULL);
    struct epoll_event ev2 = {EPOLLIN | EPOLLOUT | EPOLLRDHUP, {.fd = s}};
    epoll_ctl(epfd, EPOLL_CTL_ADD, s, &ev2);
    close(c);
    int k = epoll_wait(epfd, out, 4, 0);
    printf("epoll after the client closed: %d, IN %d OUT %d RDHUP %d HUP %d\n", k, !!(out[0].events & EPOLLIN),
           !!(out[0].events & EPOLLOUT), !!(out[0].events & EPOLLRDHUP), !!(out[0].events & EPOLLHUP));
    close(s);
    close(l);
    close(epfd);

    int d = socket(AF_UNIX, SOCK_DGRAM, 0);
    show("autobind", bind(d, (struct sockaddr *)&(struct sockaddr_un){AF_UNIX}, sizeof(sa_family_t)));
    len = sizeof got;
    getsockname(d, (struct sockaddr *)&got, &len);
    printf("automatic name: length %u, first byte %d\n", len, got.sun_path[0]);
    close(d);

    int srv = socket(AF_UNIX, SOCK_DGRAM, 0);
    al = addr_of(&a, "dg.sock", 0);
    show("bind dg.sock", bind(srv, (struct sockaddr *)&a, al));
    int cl = socket(AF_UNIX, SOCK_DGRAM, 0);
    socklen_t bl = addr_of(&b, "cl.sock", 0);
    bind(cl, (struct sockaddr *)&b, bl);
    show("sendto", sendto(cl, "from cl", 7, 0, (struct sockaddr *)&a, al));
    len = sizeof got;
    ssize_t n = recvfrom(srv, buf, sizeof buf, 0, (struct sockaddr *)&got, &len);
    printf("recvfrom: %.*s from %s (length %u)\n", (int)n, buf, got.sun_path, len);
    int anon = socket(AF_UNIX, SOCK_DGRAM, 0);
    show("send unconnected", send(anon, "x", 1, 0));
    sendto(anon, "anonymous", 9, 0, (struct sockaddr *)&a, al);
    len = sizeof got;
    n = recvfrom(srv, buf, sizeof buf, 0, (struct sockaddr *)&got, &len);
    printf("recvfrom an unnamed sender: %.*s, length %u\n", (int)n, buf, len);
    show("connect cl to srv", connect(cl, (struct sockaddr *)&a, al));
    show("send connected", send(cl, "connected", 9, 0));
    show("srv connects to cl", connect(srv, (struct sockaddr *)&b, bl));
    show("a third socket sends to srv", sendto(anon, "no", 2, 0, (struct sockaddr *)&a, al));
    n = recv(srv, buf, sizeof buf, 0);
    printf("srv got: %.*s\n", (int)n, buf);
    show("sendto a stream name", sendto(anon, "x", 1, 0, (struct sockaddr *)&(struct sockaddr_un){AF_UNIX, "nowhere"}, sizeof a));
    close(srv);
    show("send to a closed peer", send(cl, "x", 1, 0));
    show("send again", send(cl, "x", 1, 0));
    close(cl);
    close(anon);
    unlink("dg.sock");
    unlink("cl.sock");
}

/* Sends `n` descriptors with one byte of data `c`. */
static long send_fds(int s, const int *fds, int n, char c) {
    char ctl[CMSG_SPACE(sizeof(int) * 8)];
    memset(ctl, 0, sizeof ctl);
    struct iovec iov = {&c, 1};
    struct msghdr m = {0};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl;
    m.msg_controllen = CMSG_SPACE(sizeof(int) * n);
    struct cmsghdr *h = CMSG_FIRSTHDR(&m);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(sizeof(int) * n);
    memcpy(CMSG_DATA(h), fds, sizeof(int) * n);
    return sendmsg(s, &m, 0);
}

/* Receives into `fds` with room for `room` descriptors; how many came, or -1. */
static int recv_fds(int s, int *fds, int room, int flags, int *mflags) {
    char c, ctl[CMSG_SPACE(sizeof(int) * 8)];
    struct iovec iov = {&c, 1};
    struct msghdr m = {0};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = room ? ctl : NULL;
    m.msg_controllen = room ? CMSG_SPACE(sizeof(int) * room) : 0;
    if (recvmsg(s, &m, flags) < 0)
        return -1;
    *mflags = m.msg_flags;
    int n = 0;
    for (struct cmsghdr *h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h))
        if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS) {
            n = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            memcpy(fds, CMSG_DATA(h), sizeof(int) * n);
        }
    return n;
}

static void rights(void) {
    int sv[2], p[2], got[8], mf;
    char buf[64];
    socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    pipe(p);
    int f = open("passed.txt", O_CREAT | O_RDWR | O_TRUNC, 0644);
    write(f, "0123456789", 10);
    lseek(f, 4, SEEK_SET);
    int pass[2] = {p[1], f};
    show("sendmsg with two descriptors", send_fds(sv[0], pass, 2, 'a'));
    close(p[1]);
    close(f);
    int n = recv_fds(sv[1], got, 2, MSG_CMSG_CLOEXEC, &mf);
    printf("received %d descriptors, flags %d, cloexec %d\n", n, mf, fcntl(got[0], F_GETFD));
    show("write through the received pipe end", write(got[0], "through", 7));
    close(got[0]);
    n = read(p[0], buf, sizeof buf);
    printf("the pipe gave: %.*s\n", n, buf);
    show("and then its end", read(p[0], buf, sizeof buf));
    printf("the file's shared offset: %ld\n", (long)lseek(got[1], 0, SEEK_CUR));
    n = read(got[1], buf, 3);
    printf("read at it: %.*s\n", n, buf);
    close(got[1]);
    close(p[0]);

    /* Too little room: the rest are closed and MSG_CTRUNC says so. */
    pipe(p);
    int three[3] = {p[1], p[1], p[1]};
    send_fds(sv[0], three, 3, 'b');
    close(p[1]);
    n = recv_fds(sv[1], got, 1, 0, &mf);
    printf("CMSG_SPACE of one int holds %d of three, MSG_CTRUNC %d\n", n, !!(mf & MSG_CTRUNC));
    for (int i = 0; i < n; i++)
        close(got[i]);
    show("the pipe's writers are all gone", read(p[0], buf, sizeof buf));
    close(p[0]);

    /* read() has no room at all; a peek leaves them for the real receive. */
    pipe(p);
    send_fds(sv[0], &p[1], 1, 'c');
    n = recv_fds(sv[1], got, 1, MSG_PEEK, &mf);
    printf("peeked %d\n", n);
    close(got[0]);
    show("read() drops them", read(sv[1], buf, 1));
    close(p[1]);
    show("so the pipe ends", read(p[0], buf, sizeof buf));
    close(p[0]);

    /* A stream read stops at the end of a write that passed descriptors. */
    write(sv[0], "xx", 2);
    pipe(p);
    send_fds(sv[0], &p[1], 1, 'd');
    write(sv[0], "yy", 2);
    char c3[8];
    struct iovec iov = {c3, sizeof c3};
    char ctl[CMSG_SPACE(sizeof(int))];
    struct msghdr m = {0};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl;
    m.msg_controllen = sizeof ctl;
    ssize_t k = recvmsg(sv[1], &m, 0);
    printf("one read: %zd bytes %.*s, control %zu\n", k, (int)k, c3, (size_t)m.msg_controllen);
    struct cmsghdr *h = CMSG_FIRSTHDR(&m);
    if (h)
        close(*(int *)CMSG_DATA(h));
    k = read(sv[1], c3, sizeof c3);
    printf("the next: %zd bytes %.*s\n", k, (int)k, c3);
    close(p[0]);
    close(p[1]);

    int bad = 99;
    show("passing a closed descriptor", send_fds(sv[0], &bad, 1, 'e'));
    /* Over a datagram pair, with the datagram. */
    int d[2];
    socketpair(AF_UNIX, SOCK_DGRAM, 0, d);
    pipe(p);
    send_fds(d[0], &p[1], 1, 'f');
    close(p[1]);
    close(d[1]);
    show("closing the receiver with it queued closes it", read(p[0], buf, sizeof buf));
    close(p[0]);
    close(d[0]);
    close(sv[0]);
    close(sv[1]);
    unlink("passed.txt");
}

/* SO_PASSCRED: each message comes with the sender's credentials, which are ours. */
static void passcred(void) {
    int sv[2];
    socketpair(AF_UNIX, SOCK_DGRAM, 0, sv);
    int one = 1;
    show("SO_PASSCRED", setsockopt(sv[1], SOL_SOCKET, SO_PASSCRED, &one, sizeof one));
    send(sv[0], "c", 1, 0);
    char b[4];
    char ctl[CMSG_SPACE(sizeof(struct ucred))];
    struct iovec iov = {b, sizeof b};
    struct msghdr m = {0};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl;
    m.msg_controllen = sizeof ctl;
    show("recvmsg", recvmsg(sv[1], &m, 0));
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    if (c && c->cmsg_type == SCM_CREDENTIALS) {
        struct ucred u;
        memcpy(&u, CMSG_DATA(c), sizeof u);
        printf("credentials: controllen %zu, pid ours %d, uid ours %d, gid ours %d\n", (size_t)m.msg_controllen,
               u.pid == getpid(), u.uid == getuid(), u.gid == getgid());
    } else {
        printf("no credentials\n");
    }
    send(sv[0], "d", 1, 0);
    m.msg_controllen = 8;
    show("recvmsg with no room for them", recvmsg(sv[1], &m, 0));
    printf("  MSG_CTRUNC %d\n", !!(m.msg_flags & MSG_CTRUNC));
    close(sv[0]);
    close(sv[1]);
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    char base[] = "/tmp/conf-unix-XXXXXX";
    if (!mkdtemp(base) || chdir(base) < 0) {
        perror("mkdtemp");
        return 2;
    }
    sigpipe();
    pairs();
    named();
    abstract_and_dgram();
    rights();
    passcred();
    chdir("/");
    show("rmdir base", rmdir(base));
    return 0;
}
