/* Conformance case: signals queued with a value. Every line it prints is the same under Linux
 * and under deja: sigqueue to the program's own handler, real-time signals queued once per
 * send and standard ones once, the siginfo sigtimedwait takes, pthread_sigqueue to one
 * thread, the rules of rt_sigqueueinfo and rt_tgsigqueueinfo (who may claim which si_code,
 * targets, bad signals and pointers, a siginfo Linux cannot read whole), and what happens
 * once RLIMIT_SIGPENDING allows nothing more to queue. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "case.h"

static volatile sig_atomic_t got_sig, got_value, got_code, from_us;

static void on_rt(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    got_sig = sig;
    got_value = si->si_value.sival_int;
    got_code = si->si_code;
    from_us = si->si_pid == getpid() && si->si_uid == getuid();
}

/* Takes one pending `sig` without waiting; its siginfo to `info`. */
static int take(int sig, siginfo_t *info) {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, sig);
    struct timespec zero = {0, 0};
    memset(info, 0, sizeof *info);
    return sigtimedwait(&s, info, &zero);
}

/* Takes one pending `sig` and prints what its siginfo says. */
static void show_taken(const char *what, int sig) {
    siginfo_t info;
    int r = take(sig, &info);
    if (r < 0) {
        show(what, r);
        return;
    }
    printf("%s: signal +%d, si_code %d, value %d, from us %d, si_pid 0 %d\n", what, r - SIGRTMIN, info.si_code,
           info.si_value.sival_int, info.si_pid == getpid() && info.si_uid == getuid(), info.si_pid == 0);
}

/* rt_sigqueueinfo to `pid` with a siginfo claiming `code` and `pid_claim`; `tail` fills the
 * bytes past the 48 Linux reads for a layout it knows. */
static long queue_raw(pid_t pid, int sig, int code, pid_t pid_claim, int value, int tail) {
    siginfo_t si;
    memset(&si, 0, sizeof si);
    si.si_code = code;
    si.si_pid = pid_claim;
    si.si_uid = getuid();
    si.si_value.sival_int = value;
    if (tail)
        memset((char *)&si + 48, 0xaa, sizeof si - 48);
    return syscall(SYS_rt_sigqueueinfo, pid, sig, &si);
}

static long tgqueue_raw(pid_t tgid, pid_t tid, int sig, int code, int value) {
    siginfo_t si;
    memset(&si, 0, sizeof si);
    si.si_code = code;
    si.si_pid = getpid();
    si.si_uid = getuid();
    si.si_value.sival_int = value;
    return syscall(SYS_rt_tgsigqueueinfo, tgid, tid, sig, &si);
}

static void block(int sig) {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, sig);
    pthread_sigmask(SIG_BLOCK, &s, NULL);
}

static void *wait_for_value(void *arg) {
    (void)arg;
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGRTMIN + 2);
    siginfo_t info;
    int r = sigwaitinfo(&s, &info);
    printf("the thread took signal +%d, si_code %d, value %d\n", r - SIGRTMIN, info.si_code, info.si_value.sival_int);
    return NULL;
}

static pid_t main_tid;

static void *from_another_thread(void *arg) {
    (void)arg;
    show("rt_sigqueueinfo claiming SI_USER from a thread that is not the process", queue_raw(getpid(), SIGRTMIN + 1, SI_USER, getpid(), 1, 0));
    show("rt_sigqueueinfo with SI_QUEUE from that thread", queue_raw(getpid(), SIGRTMIN + 1, SI_QUEUE, getpid(), 2, 0));
    show("rt_tgsigqueueinfo claiming SI_USER to the main thread", tgqueue_raw(getpid(), main_tid, SIGRTMIN + 1, SI_USER, 3));
    show("rt_tgsigqueueinfo claiming SI_USER to itself", tgqueue_raw(getpid(), gettid(), SIGRTMIN + 4, SI_USER, 4));
    siginfo_t info;
    int r = take(SIGRTMIN + 4, &info);
    printf("it took its own: signal +%d, si_code %d, value %d\n", r - SIGRTMIN, info.si_code, info.si_value.sival_int);
    return NULL;
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    main_tid = gettid();

    /* A handler with SA_SIGINFO sees the value, before sigqueue returns. */
    struct sigaction sa = {0};
    sa.sa_sigaction = on_rt;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGRTMIN, &sa, NULL);
    union sigval v = {.sival_int = 42};
    show("sigqueue to our handler", sigqueue(getpid(), SIGRTMIN, v));
    printf("handler: signal +%d, value %d, si_code %d (SI_QUEUE %d), from us %d\n", got_sig - SIGRTMIN, got_value,
           got_code, SI_QUEUE, from_us);

    /* Blocked: a real-time signal queues each instance, in order; a standard one once. */
    block(SIGRTMIN + 1);
    block(SIGUSR1);
    for (int i = 1; i <= 3; i++) {
        v.sival_int = i;
        sigqueue(getpid(), SIGRTMIN + 1, v);
    }
    v.sival_int = 5;
    sigqueue(getpid(), SIGUSR1, v);
    v.sival_int = 6;
    sigqueue(getpid(), SIGUSR1, v);
    sigset_t pending;
    sigpending(&pending);
    printf("pending: SIGRTMIN+1 %d, SIGUSR1 %d\n", sigismember(&pending, SIGRTMIN + 1), sigismember(&pending, SIGUSR1));
    show_taken("first", SIGRTMIN + 1);
    show_taken("second", SIGRTMIN + 1);
    show_taken("third", SIGRTMIN + 1);
    show_taken("a fourth", SIGRTMIN + 1);
    siginfo_t info;
    int r = take(SIGUSR1, &info);
    printf("SIGUSR1 sent twice: taken %d with value %d\n", r == SIGUSR1, info.si_value.sival_int);
    show("and again", take(SIGUSR1, &info));

    /* kill queues each instance of a real-time signal too. */
    kill(getpid(), SIGRTMIN + 1);
    kill(getpid(), SIGRTMIN + 1);
    show_taken("kill, first", SIGRTMIN + 1);
    show_taken("kill, second", SIGRTMIN + 1);
    show_taken("kill, a third", SIGRTMIN + 1);

    /* An ignored signal is not queued. */
    signal(SIGRTMIN + 3, SIG_IGN);
    show("sigqueue of an ignored signal", sigqueue(getpid(), SIGRTMIN + 3, v));
    sigpending(&pending);
    printf("pending: %d\n", sigismember(&pending, SIGRTMIN + 3));

    /* pthread_sigqueue: one thread's, taken by that thread. */
    block(SIGRTMIN + 2);
    pthread_t t;
    pthread_create(&t, NULL, wait_for_value, NULL);
    v.sival_int = 77;
    int e = pthread_sigqueue(t, SIGRTMIN + 2, v);
    pthread_join(t, NULL);
    printf("pthread_sigqueue: %s\n", e ? strerrorname_np(e) : "0");
    sigpending(&pending);
    printf("the main thread has none pending: %d\n", !sigismember(&pending, SIGRTMIN + 2));

    /* The rules of rt_sigqueueinfo. */
    pid_t me = getpid();
    show("a bad siginfo pointer", syscall(SYS_rt_sigqueueinfo, me, SIGRTMIN + 1, (void *)8));
    show("signal 65", queue_raw(me, 65, SI_QUEUE, me, 0, 0));
    show("signal 0", queue_raw(me, 0, SI_QUEUE, me, 0, 0));
    show("a pid that cannot exist", queue_raw(INT_MAX, SIGRTMIN + 1, SI_QUEUE, me, 0, 0));
    show("pid -1", queue_raw(-1, SIGRTMIN + 1, SI_QUEUE, me, 0, 0));
    show("pid 0", queue_raw(0, SIGRTMIN + 1, SI_QUEUE, me, 0, 0));
    show("claiming SI_USER to another process", queue_raw(me + 1, SIGRTMIN + 1, SI_USER, me, 0, 0));
    show("claiming SI_TKILL to another process", queue_raw(me + 1, SIGRTMIN + 1, SI_TKILL, me, 0, 0));
    show("claiming SI_KERNEL to another process", queue_raw(me + 1, SIGRTMIN + 1, SI_KERNEL, me, 0, 0));
    show("claiming SI_USER from pid 4242 to ourselves", queue_raw(me, SIGRTMIN + 1, SI_USER, 4242, 8, 0));
    r = take(SIGRTMIN + 1, &info);
    printf("taken: si_code %d, si_pid %d, value %d\n", info.si_code, info.si_pid, info.si_value.sival_int);
    show("claiming SI_TKILL to ourselves", queue_raw(me, SIGRTMIN + 1, SI_TKILL, me, 9, 0));
    r = take(SIGRTMIN + 1, &info);
    printf("taken: si_code %d (glibc folds SI_TKILL into SI_USER), value %d\n", info.si_code, info.si_value.sival_int);
    show("SI_QUEUE with bytes past the 48 Linux reads", queue_raw(me, SIGRTMIN + 1, SI_QUEUE, me, 10, 1));
    show_taken("taken", SIGRTMIN + 1);
    show("an si_code Linux does not know, with bytes past 48", queue_raw(me, SIGRTMIN + 1, -100, me, 11, 1));
    show("the same with zeros there", queue_raw(me, SIGRTMIN + 1, -100, me, 12, 0));
    show_taken("taken", SIGRTMIN + 1);

    /* The rules of rt_tgsigqueueinfo, and both from another thread. */
    show("rt_tgsigqueueinfo to ourselves", tgqueue_raw(me, gettid(), SIGRTMIN + 1, SI_USER, 13));
    show_taken("taken", SIGRTMIN + 1);
    show("tid 0", tgqueue_raw(me, 0, SIGRTMIN + 1, SI_QUEUE, 0));
    show("tgid 0", tgqueue_raw(0, gettid(), SIGRTMIN + 1, SI_QUEUE, 0));
    show("a tid that cannot exist", tgqueue_raw(me, INT_MAX, SIGRTMIN + 1, SI_QUEUE, 0));
    show("signal 65 to a thread", tgqueue_raw(me, gettid(), 65, SI_QUEUE, 0));
    block(SIGRTMIN + 4);
    pthread_create(&t, NULL, from_another_thread, NULL);
    pthread_join(t, NULL);
    show_taken("the process's, from the thread", SIGRTMIN + 1);
    show_taken("nothing more", SIGRTMIN + 1);

    /* RLIMIT_SIGPENDING 0: nothing queues with a siginfo. */
    struct rlimit old, none;
    getrlimit(RLIMIT_SIGPENDING, &old);
    none.rlim_cur = 0;
    none.rlim_max = old.rlim_max;
    show("setrlimit(RLIMIT_SIGPENDING, 0)", setrlimit(RLIMIT_SIGPENDING, &none));
    v.sival_int = 20;
    show("sigqueue of a real-time signal", sigqueue(me, SIGRTMIN + 1, v));
    e = pthread_kill(pthread_self(), SIGRTMIN + 1);
    printf("pthread_kill of a real-time signal: %s\n", e ? strerrorname_np(e) : "0");
    show("kill of a real-time signal", kill(me, SIGRTMIN + 1));
    show("and again", kill(me, SIGRTMIN + 1));
    show_taken("taken", SIGRTMIN + 1);
    show_taken("once", SIGRTMIN + 1);
    show("sigqueue of a standard signal", sigqueue(me, SIGUSR1, v));
    r = take(SIGUSR1, &info);
    printf("taken %d: si_code %d, value %d, si_pid 0 %d\n", r == SIGUSR1, info.si_code, info.si_value.sival_int, info.si_pid == 0);
    show("kill of a standard signal", kill(me, SIGUSR1));
    r = take(SIGUSR1, &info);
    printf("taken %d: si_code %d, from us %d\n", r == SIGUSR1, info.si_code, info.si_pid == me);
    show("setrlimit back", setrlimit(RLIMIT_SIGPENDING, &old));
    show("sigqueue again", sigqueue(me, SIGRTMIN + 1, v));
    show_taken("taken", SIGRTMIN + 1);
    return 0;
}
