/* Conformance case: the clock, read the way glibc reads it (through the vDSO when the auxiliary
 * vector names one). Every line it prints is the same under Linux and under deja: the vDSO is
 * there, a spin until a deadline ends and never sees time go back, the wall clocks agree, the
 * calls glibc forwards to the kernel (CPU-time clocks, bad ids) answer as Linux does.
 *
 * `clock MS count` also prints how many reads the spin took and the last time it read: under
 * deja both are a pure function of the run, the same with the vDSO and without. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/time.h>
#include <time.h>

#include "case.h"

static long long ns(struct timespec t) {
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(int argc, char **argv) {
    long ms = argc > 1 ? atol(argv[1]) : 2;
    int count = argc > 2 && strcmp(argv[2], "count") == 0;
    printf("vdso: %s\n", getauxval(AT_SYSINFO_EHDR) ? "present" : "absent");

    struct timespec start, now, prev;
    clock_gettime(CLOCK_MONOTONIC, &start);
    prev = start;
    long reads = 0, back = 0;
    do {
        clock_gettime(CLOCK_MONOTONIC, &now);
        reads++;
        back += ns(now) < ns(prev);
        prev = now;
    } while (ns(now) - ns(start) < ms * 1000000LL);
    printf("spin to a %ld ms deadline: ended, time %s\n", ms, back ? "went back" : "never went back");
    if (count)
        printf("spin: %ld reads, last at %lld ns\n", reads, ns(now));

    struct timeval tv;
    struct timespec real, boot;
    gettimeofday(&tv, NULL);
    time_t t = time(NULL);
    clock_gettime(CLOCK_REALTIME, &real);
    long d1 = (long)(t - tv.tv_sec), d2 = (long)(real.tv_sec - t);
    printf("time, gettimeofday and CLOCK_REALTIME agree: %s\n", d1 >= 0 && d1 <= 1 && d2 >= 0 && d2 <= 1 ? "yes" : "no");
    clock_gettime(CLOCK_MONOTONIC, &now);
    clock_gettime(CLOCK_BOOTTIME, &boot);
    printf("CLOCK_BOOTTIME at or after CLOCK_MONOTONIC: %s\n", ns(boot) >= ns(now) ? "yes" : "no");
    struct timezone tz = {123, 456};
    show("gettimeofday with a timezone", gettimeofday(&tv, &tz));
    printf("timezone: %d minutes west, dst %d\n", tz.tz_minuteswest, tz.tz_dsttime);
    struct timeval *volatile no_tv = NULL; /* glibc declares the argument non-null; Linux allows it */
    show("gettimeofday(NULL, NULL)", gettimeofday(no_tv, NULL));
    struct timespec res;
    show("clock_getres(CLOCK_MONOTONIC)", clock_getres(CLOCK_MONOTONIC, &res));
    printf("resolution: %ld.%09ld s\n", (long)res.tv_sec, res.tv_nsec);
    show("clock_getres(CLOCK_REALTIME, NULL)", clock_getres(CLOCK_REALTIME, NULL));
    show("clock_gettime(CLOCK_PROCESS_CPUTIME_ID)", clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &res));
    show("clock_gettime(CLOCK_THREAD_CPUTIME_ID)", clock_gettime(CLOCK_THREAD_CPUTIME_ID, &res));
    show("clock_gettime(10)", clock_gettime(10, &res));
    show("clock_gettime(-1)", clock_gettime(-1, &res));
    show("clock_getres(42)", clock_getres(42, &res));
    unsigned cpu = 99, node = 99;
    show("getcpu", getcpu(&cpu, &node));
    show("getcpu(NULL, NULL)", getcpu(NULL, NULL));
    return 0;
}
