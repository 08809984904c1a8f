/* Conformance case: the interval timer. Every line it prints is the same under Linux and under
 * deja: what alarm returns of the timer before, getitimer of a disarmed and an armed timer,
 * SIGALRM ending pause (si_code SI_KERNEL), a nanosleep (with what was left of it) and a read
 * of an empty pipe (EINTR without SA_RESTART), an interval timer ticking three times, a loop
 * that only reads the clock taking the alarm, the
 * errors of misuse; and at the end SIGALRM's default action ending the program (status 142)
 * while it waits on a pipe no one writes. It prints no time that depends on the host's speed. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "case.h"

static volatile int ticks;
static volatile int code;
static void on_alarm(int sig, siginfo_t *info, void *uc) {
    (void)sig;
    (void)uc;
    ticks++;
    code = info->si_code;
}

static void handler(int flags) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_alarm;
    sa.sa_flags = SA_SIGINFO | flags;
    sigaction(SIGALRM, &sa, NULL);
}

static void arm(long value_us, long interval_us) {
    struct itimerval t = {{interval_us / 1000000, interval_us % 1000000}, {value_us / 1000000, value_us % 1000000}};
    setitimer(ITIMER_REAL, &t, NULL);
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    show("alarm(0), none before", alarm(0));
    show("alarm(5)", alarm(5));
    show("alarm(2), 5 s were left", alarm(2));
    show("alarm(0), 2 s were left", alarm(0));
    struct itimerval cur;
    show("getitimer, disarmed", getitimer(ITIMER_REAL, &cur));
    printf("  value %ld.%06ld interval %ld.%06ld\n", (long)cur.it_value.tv_sec, (long)cur.it_value.tv_usec,
           (long)cur.it_interval.tv_sec, (long)cur.it_interval.tv_usec);
    arm(1500000, 250000);
    getitimer(ITIMER_REAL, &cur);
    printf("armed for 1.5 s: left between 1 and 1.5 s %d, interval %ld.%06ld\n",
           cur.it_value.tv_sec == 1 || (cur.it_value.tv_sec == 0 && cur.it_value.tv_usec > 0),
           (long)cur.it_interval.tv_sec, (long)cur.it_interval.tv_usec);
    struct itimerval old;
    struct itimerval zero = {{0, 0}, {0, 0}};
    show("setitimer, disarming", setitimer(ITIMER_REAL, &zero, &old));
    printf("  the old interval %ld.%06ld\n", (long)old.it_interval.tv_sec, (long)old.it_interval.tv_usec);

    handler(SA_RESTART);
    arm(20000, 0);
    show("pause", pause());
    printf("  ticks %d, si_code %d (SI_KERNEL 128)\n", ticks, code);

    arm(20000, 0);
    struct timespec second = {1, 0}, rem = {0, 0};
    show("nanosleep(1 s)", nanosleep(&second, &rem));
    printf("  ticks %d, what was left between 0.9 and 1 s: %d\n", ticks, rem.tv_sec == 0 && rem.tv_nsec > 900000000);

    handler(0);
    int p[2];
    pipe(p);
    arm(20000, 0);
    char c;
    show("read of an empty pipe, handler without SA_RESTART", read(p[0], &c, 1));
    printf("  ticks %d\n", ticks);

    ticks = 0;
    arm(10000, 10000);
    while (ticks < 3)
        pause();
    arm(0, 0);
    printf("an interval timer ticked: %d\n", ticks);
    getitimer(ITIMER_REAL, &cur);
    printf("  disarmed again: %d\n", cur.it_value.tv_sec == 0 && cur.it_value.tv_usec == 0);

    /* A thread that only reads the clock (through the vDSO) still takes the alarm. */
    ticks = 0;
    arm(5000, 0);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long spins = 0;
    do {
        clock_gettime(CLOCK_MONOTONIC, &t);
        spins++;
    } while (!ticks && t.tv_sec - t0.tv_sec < 5);
    printf("a loop reading the clock took the alarm: %d\n", ticks == 1);

    show("getitimer of a timer that does not exist", getitimer(7, &cur));
    struct itimerval bad = {{0, 0}, {0, 1000000}};
    show("setitimer with 1000000 us", setitimer(ITIMER_REAL, &bad, NULL));
    show("getitimer into a bad pointer", getitimer(ITIMER_REAL, (void *)8));

    /* A process's timer runs while another process runs: the parent's alarm of 0.2 s fires
     * while its child sleeps for 0.6 s, and the child's own timer of 0.1 s fires in the child
     * while the parent waits. */
    fflush(stdout);
    handler(0);
    ticks = 0;
    pid_t child = fork();
    if (child == 0) {
        ticks = 0;
        arm(100000, 0);
        struct timespec tenth = {0, 100000000};
        for (int i = 0; i < 6; i++)
            nanosleep(&tenth, NULL);
        printf("child: slept, its own alarm fired %d\n", ticks);
        fflush(stdout);
        _exit(0);
    }
    arm(200000, 0);
    show("pause while a child runs", pause());
    printf("  ticks %d, before the child ended: %d\n", ticks, waitpid(child, NULL, WNOHANG) == 0);
    int st = 0;
    waitpid(child, &st, 0);
    printf("  the child exited %d\n", WEXITSTATUS(st));

    /* SIGALRM's default action: the program ends, 142 as a shell says it. */
    signal(SIGALRM, SIG_DFL);
    arm(50000, 0);
    printf("waiting on a pipe no one writes\n");
    read(p[0], &c, 1);
    printf("not reached\n");
    return 0;
}
