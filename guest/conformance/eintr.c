/* Conformance case: a signal that reaches a thread blocked in a call. Every line it prints is
 * the same under Linux and under deja: a read of an empty pipe ends with EINTR when the
 * handler lacks SA_RESTART and goes on to return the data when it has it; poll ends with EINTR
 * either way; a receive with SO_RCVTIMEO ends with EINTR even with SA_RESTART; accept restarts,
 * and so does the open of a FIFO that waits for a writer (which ends with EINTR without it);
 * a thread that blocks the signal keeps waiting and takes it later; an ignored signal does not
 * end a wait. The sender waits until the receiver is asleep in its call (natively it watches
 * /proc/self/task/TID/stat; under deja, where that file is not served, the receiver is asleep
 * by the time a 1 ms sleep of the sender ends, since deja runs one thread at a time). */
#define _GNU_SOURCE
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
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "case.h"

static volatile int handled;
static void on_usr1(int sig) {
    (void)sig;
    handled++;
}

static void handler(int flags) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sa.sa_flags = flags;
    sigaction(SIGUSR1, &sa, NULL);
}

static volatile pid_t waiter;
static volatile int started;

/* Until thread `tid` sleeps in the kernel. */
static void until_asleep(pid_t tid) {
    while (!started)
        sched_yield();
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", tid);
    struct timespec ms = {0, 1000000};
    for (int i = 0; i < 5000; i++) {
        nanosleep(&ms, NULL);
        FILE *f = fopen(path, "r");
        if (!f)
            return;
        char buf[512] = {0};
        fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        char *p = strrchr(buf, ')');
        if (p && p[2] == 'S')
            return;
    }
}

enum what { READ, POLL, RECV_TIMEO, ACCEPT, READ_BLOCKED, FIFO_OPEN };
static int fds[2];
static int lfd;
static char fifo[64];

static void *wait_in(void *arg) {
    enum what w = (enum what)(long)arg;
    waiter = syscall(SYS_gettid);
    char b[8] = {0};
    long r;
    if (w == READ_BLOCKED) {
        sigset_t s;
        sigemptyset(&s);
        sigaddset(&s, SIGUSR1);
        pthread_sigmask(SIG_BLOCK, &s, NULL);
    }
    started = 1;
    switch (w) {
    case READ:
    case READ_BLOCKED:
        r = read(fds[0], b, sizeof b);
        break;
    case POLL: {
        struct pollfd p = {fds[0], POLLIN, 0};
        r = poll(&p, 1, -1);
        break;
    }
    case RECV_TIMEO:
        r = recv(fds[0], b, sizeof b, 0);
        break;
    case ACCEPT:
        r = accept(lfd, NULL, NULL);
        if (r >= 0)
            close(r), r = 1;
        break;
    case FIFO_OPEN:
        r = open(fifo, O_RDONLY);
        if (r >= 0) {
            int n = read(r, b, sizeof b);
            close(r);
            r = n;
        }
        break;
    }
    int e = errno;
    if (r < 0)
        printf("  the call: %s, handler ran %d\n", strerrorname_np(e), handled);
    else
        printf("  the call: %ld %s, handler ran %d\n", r, w == ACCEPT ? "(accepted)" : b, handled);
    if (w == READ_BLOCKED) {
        sigset_t s;
        sigemptyset(&s);
        sigaddset(&s, SIGUSR1);
        pthread_sigmask(SIG_UNBLOCK, &s, NULL);
        printf("  unblocked: handler ran %d\n", handled);
    }
    return NULL;
}

static void round_of(const char *title, enum what w, int flags, int sig_handled) {
    printf("%s\n", title);
    handled = 0;
    started = 0;
    if (sig_handled)
        handler(flags);
    else
        signal(SIGUSR1, SIG_IGN);
    if (w == RECV_TIMEO) {
        socketpair(AF_UNIX, SOCK_STREAM, 0, fds);
        struct timeval tv = {30, 0};
        setsockopt(fds[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    } else if (w == ACCEPT) {
        lfd = socket(AF_UNIX, SOCK_STREAM, 0);
        struct sockaddr sa = {AF_UNIX, ""}; /* an automatic abstract name */
        bind(lfd, &sa, sizeof(sa_family_t));
        listen(lfd, 1);
    } else {
        pipe(fds);
    }
    pthread_t t;
    pthread_create(&t, NULL, wait_in, (void *)(long)w);
    until_asleep(waiter);
    syscall(SYS_tgkill, getpid(), waiter, SIGUSR1);
    until_asleep(waiter);
    printf("  sent; the sender's handler count %d\n", handled);
    if (w == FIFO_OPEN) {
        int wr = open(fifo, O_WRONLY | O_NONBLOCK);
        printf("  a writer opens: %s\n", wr >= 0 ? "yes" : strerrorname_np(errno));
        if (wr >= 0) {
            write(wr, "fifo", 5);
            close(wr);
        }
        pthread_join(t, NULL);
        return;
    }
    if (w == ACCEPT) {
        struct sockaddr_storage name;
        socklen_t len = sizeof name;
        getsockname(lfd, (void *)&name, &len);
        int c = socket(AF_UNIX, SOCK_STREAM, 0);
        connect(c, (void *)&name, len);
        pthread_join(t, NULL);
        close(c);
        close(lfd);
        return;
    }
    write(fds[1], "data", 5);
    pthread_join(t, NULL);
    close(fds[0]);
    close(fds[1]);
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    round_of("read, handler without SA_RESTART", READ, 0, 1);
    round_of("read, handler with SA_RESTART", READ, SA_RESTART, 1);
    round_of("poll, handler with SA_RESTART", POLL, SA_RESTART, 1);
    round_of("recv with SO_RCVTIMEO, handler with SA_RESTART", RECV_TIMEO, SA_RESTART, 1);
    round_of("accept, handler with SA_RESTART", ACCEPT, SA_RESTART, 1);
    round_of("read in a thread that blocks the signal", READ_BLOCKED, 0, 1);
    round_of("read, the signal ignored", READ, 0, 0);
    char dir[] = "/tmp/deja-eintr-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    snprintf(fifo, sizeof fifo, "%s/f", dir);
    show("mkfifo", mkfifo(fifo, 0600));
    round_of("open of a FIFO, handler without SA_RESTART", FIFO_OPEN, 0, 1);
    round_of("open of a FIFO, handler with SA_RESTART", FIFO_OPEN, SA_RESTART, 1);
    unlink(fifo);
    rmdir(dir);
    return 0;
}
