/* The waits that take a signal mask of their own (ppoll, pselect, epoll_pwait): the mask
   replaces the thread's for the wait alone. A signal it lets through ends the wait with EINTR
   and its handler runs; one it blocks stays pending; the thread's own mask is back after the
   call whichever way it ended. sigsuspend for comparison. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t seen;
static void handler(int s) { (void)s; seen++; }

static int fds[2];
static int ep;
static sigset_t none, usr1;

/* Waits with `mask` in one of the three calls for up to `ms`; -1/errno or the count. */
static int wait_in(int which, const sigset_t *mask, int ms) {
    struct timespec to = {ms / 1000, (ms % 1000) * 1000000L};
    if (which == 0) {
        struct pollfd pf = {.fd = fds[0], .events = POLLIN};
        return ppoll(&pf, 1, &to, mask);
    }
    if (which == 1) {
        fd_set rs;
        FD_ZERO(&rs);
        FD_SET(fds[0], &rs);
        return pselect(fds[0] + 1, &rs, 0, 0, &to, mask);
    }
    struct epoll_event ev;
    return epoll_pwait(ep, &ev, 1, ms, mask);
}

static const char *names[] = {"ppoll", "pselect", "epoll_pwait"};

static int blocked_now(void) {
    sigset_t now;
    sigprocmask(SIG_BLOCK, 0, &now);
    return sigismember(&now, SIGUSR1);
}

static void *later(void *arg) {
    struct timespec d = {0, 20000000};
    nanosleep(&d, 0);
    pthread_kill(*(pthread_t *)arg, SIGUSR1);
    return 0;
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigaction(SIGUSR1, &sa, 0);
    sigemptyset(&none);
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigprocmask(SIG_BLOCK, &usr1, 0);
    if (pipe(fds) != 0) return 2;
    ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN};
    epoll_ctl(ep, EPOLL_CTL_ADD, fds[0], &ev);
    for (int w = 0; w < 3; w++) {
        /* Pending before the call, let through by its mask. */
        seen = 0;
        raise(SIGUSR1);
        int r = wait_in(w, &none, 100);
        int e = errno;
        printf("%s, pending and let through: %d %s, handler ran %d, blocked after %d\n", names[w], r,
               r < 0 ? strerror(e) : "", (int)seen, blocked_now());
        /* Pending, and blocked by the call's mask too: the wait times out, it stays pending. */
        seen = 0;
        raise(SIGUSR1);
        r = wait_in(w, &usr1, 10);
        sigset_t p;
        sigpending(&p);
        printf("%s, pending and blocked by its mask: %d, handler ran %d, still pending %d\n", names[w], r, (int)seen,
               sigismember(&p, SIGUSR1));
        /* Ready with the signal let through: Linux takes the signal first. */
        int sig;
        sigwait(&usr1, &sig);
        if (write(fds[1], "x", 1) != 1) return 2;
        seen = 0;
        r = wait_in(w, &none, 100);
        printf("%s, ready and nothing pending: %d, handler ran %d, blocked after %d\n", names[w], r, (int)seen,
               blocked_now());
        char c;
        if (read(fds[0], &c, 1) != 1) return 2;
        /* Sent by another thread while the call waits. */
        pthread_t me = pthread_self(), t;
        pthread_create(&t, 0, later, &me);
        seen = 0;
        r = wait_in(w, &none, 2000);
        e = errno;
        pthread_join(t, 0);
        printf("%s, sent while waiting: %d %s, handler ran %d, blocked after %d\n", names[w], r, r < 0 ? strerror(e) : "",
               (int)seen, blocked_now());
        /* No mask: the thread's own, which blocks it. */
        raise(SIGUSR1);
        seen = 0;
        r = wait_in(w, NULL, 10);
        sigwait(&usr1, &sig);
        printf("%s, no mask: %d, handler ran %d\n", names[w], r, (int)seen);
    }
    seen = 0;
    raise(SIGUSR1);
    int r = sigsuspend(&none);
    printf("sigsuspend: %d %s, handler ran %d, blocked after %d\n", r, strerror(errno), (int)seen, blocked_now());
    return 0;
}
