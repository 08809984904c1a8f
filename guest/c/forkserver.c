/* A key-value server with a process per connection, and its client.
 *
 *   forkserver server PORT [ppoll]
 *   forkserver client HOST:PORT
 *
 * The server listens on 0.0.0.0:PORT and forks a child for every connection it accepts. The
 * child serves a line protocol until the client closes, then exits 0:
 *
 *   PUT key value  -> OK          the value is in /data/kv-KEY once OK is sent: written to a
 *                                 temporary file, fsynced, renamed over the key's file, and
 *                                 /data fsynced
 *   GET key        -> VALUE v | NONE
 *   STATS          -> STATS accepted=A reaped=R   the parent's counts when it forked this child
 *                                 (the child's copy of the parent's memory)
 *   anything else  -> ERR ...     (also a PUT or GET whose file operation failed)
 *
 * The parent reaps every ended child with waitpid(-1, WNOHANG) and says so, before each wait
 * for a connection. SIGCHLD interrupts that wait: its handler writes a byte to a pipe the
 * parent polls beside the listening socket (the self-pipe), so a child that ends between the
 * reaping and the poll still wakes it. With `ppoll`, the parent instead keeps SIGCHLD blocked
 * except inside ppoll (its signal mask argument), the other race-free way on Linux.
 *
 * The client makes several connections (two of them open at once, their requests
 * interleaved), puts and gets keys, and checks every answer against what the server
 * acknowledged. A connection that breaks or an ERR answer is retried on a new connection (the
 * server may have been crashed and restarted, or had an I/O error): a PUT retried is the same
 * PUT. A wrong answer exits 1; running out of retries exits 2. At the end it asks for STATS
 * until the server has reaped every child but the one answering (exit 1 if it never does).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *who = "forkserver";

static void say(const char *fmt, ...) {
    char buf[512];
    int n = snprintf(buf, sizeof buf, "%s: ", who);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(buf + n, sizeof buf - n, fmt, ap);
    va_end(ap);
    if (m < 0) return;
    n += m;
    if (n > (int)sizeof buf - 1) n = sizeof buf - 1;
    ssize_t off = 0;
    while (off < n) {
        ssize_t w = write(1, buf + off, n - off);
        if (w <= 0) return;
        off += w;
    }
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

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* A line reader over a socket. */
struct conn {
    int fd;
    char buf[1024];
    size_t len;
};

/* Reads one line (without its newline) into `out`; returns its length, 0 at a clean end of
   stream, -1 on an error. */
static ssize_t read_line(struct conn *c, char *out, size_t cap) {
    for (;;) {
        char *nl = memchr(c->buf, '\n', c->len);
        if (nl) {
            size_t n = (size_t)(nl - c->buf);
            if (n >= cap) n = cap - 1;
            memcpy(out, c->buf, n);
            out[n] = 0;
            size_t used = (size_t)(nl - c->buf) + 1;
            memmove(c->buf, c->buf + used, c->len - used);
            c->len -= used;
            return (ssize_t)n + (n == 0); /* an empty line is not the end */
        }
        if (c->len == sizeof c->buf) return -1;
        ssize_t r = read(c->fd, c->buf + c->len, sizeof c->buf - c->len);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) return c->len ? -1 : 0;
        c->len += (size_t)r;
    }
}

/* ---------------------------------------------------------------- the server ---- */

static long accepted, reaped;
static const char *data_dir = "/data"; /* $DATA_DIR replaces it (to try the server on a host) */
static int chld_pipe[2] = {-1, -1}; /* the self-pipe: SIGCHLD's handler writes a byte to it */

static void on_sigchld(int sig) {
    (void)sig;
    int saved = errno;
    if (chld_pipe[1] >= 0) (void)!write(chld_pipe[1], "c", 1);
    errno = saved;
}

static int valid_key(const char *k) {
    if (!*k || strlen(k) > 64) return 0;
    for (const char *p = k; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '_')) return 0;
    return 1;
}

/* Makes `value` the durable contents of /data/kv-KEY; 0 or an errno. */
static int put(const char *key, const char *value) {
    char path[256], tmp[320];
    snprintf(path, sizeof path, "%s/kv-%s", data_dir, key);
    snprintf(tmp, sizeof tmp, "%s/.kv-%s.tmp-%d", data_dir, key, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return errno;
    int e = 0;
    if (write_all(fd, value, strlen(value)) != 0 || fsync(fd) != 0) e = errno ? errno : EIO;
    close(fd);
    if (e) {
        unlink(tmp);
        return e;
    }
    if (rename(tmp, path) != 0) {
        e = errno;
        unlink(tmp);
        return e;
    }
    int dir = open(data_dir, O_RDONLY | O_DIRECTORY);
    if (dir < 0) return errno;
    if (fsync(dir) != 0) e = errno;
    close(dir);
    return e;
}

/* Reads /data/kv-KEY into `out`: 1 found, 0 none, -errno on an error. */
static int get(const char *key, char *out, size_t cap) {
    char path[256];
    snprintf(path, sizeof path, "%s/kv-%s", data_dir, key);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return errno == ENOENT ? 0 : -errno;
    size_t len = 0;
    for (;;) {
        ssize_t r = read(fd, out + len, cap - 1 - len);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            close(fd);
            return -e;
        }
        if (r == 0 || len + (size_t)r == cap - 1) {
            len += (size_t)r;
            break;
        }
        len += (size_t)r;
    }
    close(fd);
    out[len] = 0;
    return 1;
}

static int serve_child(int fd, long conn_no) {
    struct conn c = {.fd = fd};
    char line[512], reply[600];
    int served = 0;
    for (;;) {
        ssize_t n = read_line(&c, line, sizeof line);
        if (n == 0) break;
        if (n < 0) {
            say("child %d (connection %ld): connection broken: %s\n", (int)getpid(), conn_no, strerror(errno));
            return 1;
        }
        served++;
        char *save = NULL;
        char *cmd = strtok_r(line, " ", &save);
        char *key = cmd ? strtok_r(NULL, " ", &save) : NULL;
        char *value = key ? strtok_r(NULL, "", &save) : NULL;
        if (cmd && strcmp(cmd, "PUT") == 0 && key && value && valid_key(key)) {
            int e = put(key, value);
            if (e)
                snprintf(reply, sizeof reply, "ERR put %s: %s\n", key, strerror(e));
            else
                snprintf(reply, sizeof reply, "OK\n");
            say("child %d: PUT %s %s -> %s", (int)getpid(), key, value, reply);
        } else if (cmd && strcmp(cmd, "GET") == 0 && key && !value && valid_key(key)) {
            char v[400];
            int r = get(key, v, sizeof v);
            if (r < 0)
                snprintf(reply, sizeof reply, "ERR get %s: %s\n", key, strerror(-r));
            else if (r == 0)
                snprintf(reply, sizeof reply, "NONE\n");
            else
                snprintf(reply, sizeof reply, "VALUE %s\n", v);
            say("child %d: GET %s -> %s", (int)getpid(), key, reply);
        } else if (cmd && strcmp(cmd, "STATS") == 0 && !key) {
            snprintf(reply, sizeof reply, "STATS accepted=%ld reaped=%ld\n", accepted, reaped);
            say("child %d: %s", (int)getpid(), reply);
        } else {
            snprintf(reply, sizeof reply, "ERR bad request\n");
        }
        if (write_all(fd, reply, strlen(reply)) != 0) {
            say("child %d: reply: %s\n", (int)getpid(), strerror(errno));
            return 1;
        }
    }
    say("child %d: connection %ld closed after %d requests\n", (int)getpid(), conn_no, served);
    return 0;
}

static void reap(void) {
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid <= 0) return;
        reaped++;
        if (WIFEXITED(status))
            say("reaped child %d (exit %d), %ld of %ld\n", (int)pid, WEXITSTATUS(status), reaped, accepted);
        else
            say("reaped child %d (signal %d), %ld of %ld\n", (int)pid, WTERMSIG(status), reaped, accepted);
    }
}

/* Waits until the listening socket is readable; returns 0, or -1 when SIGCHLD came first (the
   caller reaps then). */
static int wait_for_connection(int lfd, int use_ppoll, const sigset_t *unblocked) {
    if (use_ppoll) {
        /* SIGCHLD is blocked except inside ppoll: no signal can slip in between the reaping
           and the wait. (deja ignores ppoll's signal mask: a SIGCHLD blocked outside stays
           blocked inside, and ppoll waits for the next connection. See docs/PROCESSES.md.) */
        struct pollfd p = {.fd = lfd, .events = POLLIN};
        int r = ppoll(&p, 1, NULL, unblocked);
        if (r < 0 && errno != EINTR) {
            say("ppoll: %s\n", strerror(errno));
            exit(2);
        }
        return r < 0 ? -1 : 0;
    }
    /* The self-pipe: a SIGCHLD between the reaping and poll leaves a byte in the pipe. */
    struct pollfd p[2] = {{.fd = lfd, .events = POLLIN}, {.fd = chld_pipe[0], .events = POLLIN}};
    int r = poll(p, 2, -1);
    if (r < 0 && errno != EINTR) {
        say("poll: %s\n", strerror(errno));
        exit(2);
    }
    if (r < 0 || p[1].revents) {
        char drain[64];
        while (read(chld_pipe[0], drain, sizeof drain) > 0) {
        }
    }
    return r > 0 && (p[0].revents & POLLIN) ? 0 : -1;
}

static int server(int port, int use_ppoll) {
    who = "server";
    if (getenv("DATA_DIR")) data_dir = getenv("DATA_DIR");
    sigset_t chld, none;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigemptyset(&none);
    if (!use_ppoll && pipe2(chld_pipe, O_NONBLOCK | O_CLOEXEC) != 0) {
        say("pipe2: %s\n", strerror(errno));
        return 2;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigchld;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_NOCLDSTOP; /* no SA_RESTART: a wait it interrupts returns EINTR */
    if (sigaction(SIGCHLD, &sa, NULL) != 0 || (use_ppoll && sigprocmask(SIG_BLOCK, &chld, NULL) != 0)) {
        say("sigaction: %s\n", strerror(errno));
        return 2;
    }
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(INADDR_ANY)};
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(lfd, 16) != 0) {
        say("listen on port %d: %s\n", port, strerror(errno));
        return 2;
    }
    say("pid %d listening on port %d (waiting in %s)\n", (int)getpid(), port, use_ppoll ? "ppoll" : "poll");
    for (;;) {
        reap();
        if (wait_for_connection(lfd, use_ppoll, &none) != 0) continue;
        struct sockaddr_in peer;
        socklen_t plen = sizeof peer;
        int fd = accept4(lfd, (struct sockaddr *)&peer, &plen, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
            say("accept: %s\n", strerror(errno));
            return 2;
        }
        accepted++;
        pid_t pid = fork();
        if (pid < 0) {
            say("fork: %s\n", strerror(errno));
            close(fd);
            continue;
        }
        if (pid == 0) {
            close(lfd);
            signal(SIGCHLD, SIG_DFL);
            if (chld_pipe[0] >= 0) {
                close(chld_pipe[0]);
                close(chld_pipe[1]);
                chld_pipe[0] = chld_pipe[1] = -1;
            }
            sigprocmask(SIG_UNBLOCK, &chld, NULL);
            _exit(serve_child(fd, accepted));
        }
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &peer.sin_addr, ip, sizeof ip);
        say("connection %ld from %s:%d: child %d\n", accepted, ip, ntohs(peer.sin_port), (int)pid);
        close(fd);
    }
}

/* ---------------------------------------------------------------- the client ---- */

static struct sockaddr_in server_addr;
static int retries_left = 40;

/* Connects, retrying for a while (the server may not listen yet, or be restarting). */
static int dial(struct conn *c) {
    for (int attempt = 0; attempt < 200; attempt++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            say("socket: %s\n", strerror(errno));
            exit(2);
        }
        if (connect(fd, (struct sockaddr *)&server_addr, sizeof server_addr) == 0) {
            struct timeval tv = {3, 0};
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            c->fd = fd;
            c->len = 0;
            return 0;
        }
        close(fd);
        sleep_ms(25);
    }
    say("could not connect for 5 s\n");
    exit(2);
}

/* One request and its answer on `c`; on a broken connection or an ERR answer, reconnects and
   sends it again. Returns the answer in `out`. */
static void request(struct conn *c, const char *req, char *out, size_t cap) {
    for (;;) {
        char line[600];
        snprintf(line, sizeof line, "%s\n", req);
        ssize_t n = -1;
        if (c->fd >= 0 && write_all(c->fd, line, strlen(line)) == 0) n = read_line(c, out, cap);
        if (n > 0 && strncmp(out, "ERR", 3) != 0) return;
        if (--retries_left < 0) {
            say("giving up on \"%s\": out of retries\n", req);
            exit(2);
        }
        if (n > 0)
            say("\"%s\" answered \"%s\": retrying\n", req, out);
        else
            say("\"%s\": connection %s: reconnecting\n", req, n == 0 ? "closed" : "broken");
        if (c->fd >= 0) close(c->fd);
        c->fd = -1;
        sleep_ms(20);
        dial(c);
    }
}

static void expect(struct conn *c, const char *req, const char *want) {
    char got[600];
    request(c, req, got, sizeof got);
    if (strcmp(got, want) != 0) {
        say("WRONG ANSWER to \"%s\": got \"%s\", expected \"%s\"\n", req, got, want);
        exit(1);
    }
    say("%s -> %s\n", req, got);
}

static void hang_up(struct conn *c) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
}

static int client(const char *hostport) {
    who = "client";
    char host[64];
    const char *colon = strrchr(hostport, ':');
    if (!colon || (size_t)(colon - hostport) >= sizeof host) {
        say("usage: forkserver client HOST:PORT\n");
        return 2;
    }
    memcpy(host, hostport, (size_t)(colon - hostport));
    host[colon - hostport] = 0;
    server_addr.sin_family = AF_INET;
    server_addr.sin_port = htons((uint16_t)atoi(colon + 1));
    if (inet_pton(AF_INET, host, &server_addr.sin_addr) != 1) {
        say("bad address %s\n", host);
        return 2;
    }
    struct conn a = {.fd = -1}, b = {.fd = -1}, c = {.fd = -1};
    /* Two connections at once: two children serve them side by side. */
    dial(&a);
    dial(&b);
    expect(&a, "GET apple", "NONE");
    expect(&a, "PUT apple red", "OK");
    expect(&b, "PUT banana yellow", "OK");
    expect(&b, "GET apple", "VALUE red");
    expect(&a, "GET banana", "VALUE yellow");
    expect(&b, "PUT apple green", "OK");
    expect(&a, "GET apple", "VALUE green");
    hang_up(&a);
    hang_up(&b);
    /* A third, after both closed. */
    dial(&c);
    expect(&c, "GET apple", "VALUE green");
    expect(&c, "GET banana", "VALUE yellow");
    expect(&c, "PUT cherry dark-red", "OK");
    expect(&c, "GET cherry", "VALUE dark-red");
    expect(&c, "GET durian", "NONE");
    hang_up(&c);
    /* Every child but the one answering has been reaped, eventually. */
    for (int i = 0; i < 50; i++) {
        struct conn s = {.fd = -1};
        dial(&s);
        char got[600];
        request(&s, "STATS", got, sizeof got);
        hang_up(&s);
        long acc = -1, rea = -1;
        if (sscanf(got, "STATS accepted=%ld reaped=%ld", &acc, &rea) != 2) {
            say("WRONG ANSWER to STATS: \"%s\"\n", got);
            return 1;
        }
        if (acc >= 1 && rea == acc - 1) {
            say("server reaped every earlier child: %s\n", got);
            say("all answers right\n");
            return 0;
        }
        say("not reaped yet: %s\n", got);
        sleep_ms(20);
    }
    say("the server never reaped its children\n");
    return 1;
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);
    if ((argc == 3 || argc == 4) && strcmp(argv[1], "server") == 0)
        return server(atoi(argv[2]), argc == 4 && strcmp(argv[3], "ppoll") == 0);
    if (argc == 3 && strcmp(argv[1], "client") == 0) return client(argv[2]);
    say("usage: forkserver server PORT [ppoll] | forkserver client HOST:PORT\n");
    return 2;
}
