/* Conformance case: waiting for signals. Every line it prints is the same under Linux and
 * under deja: sigsuspend with a temporary mask, woken by a signal another thread sends, and
 * the mask it puts back; pause until a handler ran; sigtimedwait and sigwaitinfo taking a
 * pending signal without its handler, with its siginfo, a timeout, and their errors. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "case.h"

static volatile sig_atomic_t handled, mask_in_handler;
static pthread_t main_thread;

static void on_usr(int sig) {
    sigset_t now;
    pthread_sigmask(SIG_BLOCK, NULL, &now);
    mask_in_handler = sigismember(&now, SIGUSR1) * 10 + sigismember(&now, SIGUSR2);
    handled = sig;
}

static void *send_usr1(void *arg) {
    (void)arg;
    pthread_kill(main_thread, SIGUSR1);
    return NULL;
}

static void *nag_usr2(void *arg) {
    (void)arg;
    while (!handled) {
        pthread_kill(main_thread, SIGUSR2);
        usleep(1000);
    }
    return NULL;
}

static void *kill_process(void *arg) {
    (void)arg;
    kill(getpid(), SIGUSR1);
    return NULL;
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    main_thread = pthread_self();
    struct sigaction sa = {0};
    sa.sa_handler = on_usr;
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGUSR2, &sa, NULL);

    /* sigsuspend: SIGUSR1 blocked; the thread's signal waits until sigsuspend unblocks it. */
    sigset_t usr1, empty, now;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigemptyset(&empty);
    pthread_sigmask(SIG_BLOCK, &usr1, NULL);
    pthread_t t;
    pthread_create(&t, NULL, send_usr1, NULL);
    pthread_join(t, NULL);
    printf("before sigsuspend: handled %d\n", handled);
    show("sigsuspend", sigsuspend(&empty));
    printf("handled %d, SIGUSR1 blocked inside the handler %d\n", handled == SIGUSR1, mask_in_handler / 10);
    pthread_sigmask(SIG_BLOCK, NULL, &now);
    printf("after: SIGUSR1 blocked again %d\n", sigismember(&now, SIGUSR1));
    show("rt_sigsuspend with a bad size", syscall(SYS_rt_sigsuspend, &empty, 4));

    /* pause: returns once a handler has run. */
    handled = 0;
    pthread_create(&t, NULL, nag_usr2, NULL);
    show("pause", pause());
    printf("pause ended after the handler of %s\n", handled == SIGUSR2 ? "SIGUSR2" : "?");
    pthread_join(t, NULL);

    /* sigtimedwait: takes a blocked pending signal without its handler. */
    handled = 0;
    raise(SIGUSR1);
    siginfo_t info;
    struct timespec zero = {0, 0}, short_wait = {0, 10 * 1000 * 1000}, bad = {0, 1000000000};
    show("sigtimedwait", sigtimedwait(&usr1, &info, &zero));
    printf("si_signo %d si_code %d (glibc folds SI_TKILL into SI_USER), handler ran %d\n", info.si_signo, info.si_code, handled);
    show("sigtimedwait, nothing pending, no wait", sigtimedwait(&usr1, &info, &zero));
    show("sigtimedwait, nothing pending, 10 ms", sigtimedwait(&usr1, &info, &short_wait));
    show("sigtimedwait, bad timeout", sigtimedwait(&usr1, &info, &bad));
    pthread_create(&t, NULL, kill_process, NULL);
    show("sigwaitinfo for a kill from another thread", sigwaitinfo(&usr1, &info));
    printf("si_code %d (SI_USER), si_pid is ours %d, si_uid is ours %d\n", info.si_code, info.si_pid == getpid(),
           info.si_uid == getuid());
    pthread_join(t, NULL);
    int sig = 0;
    raise(SIGUSR1);
    show("sigwait", sigwait(&usr1, &sig));
    printf("sigwait gave %d\n", sig);
    printf("handlers ran: %d\n", handled);
    return 0;
}
