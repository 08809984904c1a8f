/* Conformance case: how many CPUs a program sees. Run natively and under deja with `--cpus` set
 * to the host's count, every line is the same: the affinity mask and the counts glibc derives
 * from it and from /sys (`get_nprocs`, `sysconf`), the CPU lists in /sys/devices/system/cpu,
 * the processors of /proc/cpuinfo, the room the mask needs, and the masks `sched_setaffinity` takes
 * or refuses. It prints no CPU number a thread happens to run on. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include "case.h"

int main(void) {
    cpu_set_t s;
    CPU_ZERO(&s);
    show("sched_getaffinity", sched_getaffinity(0, sizeof s, &s));
    int n = CPU_COUNT(&s);
    printf("CPUs in the mask: %d\n", n);
    printf("get_nprocs: %d\n", get_nprocs());
    printf("get_nprocs_conf: %d\n", get_nprocs_conf());
    printf("sysconf online: %ld\n", sysconf(_SC_NPROCESSORS_ONLN));
    printf("sysconf configured: %ld\n", sysconf(_SC_NPROCESSORS_CONF));
    /* The files that describe them. */
    const char *lists[] = {"/sys/devices/system/cpu/online", "/sys/devices/system/cpu/possible",
                           "/sys/devices/system/cpu/present"};
    for (int i = 0; i < 3; i++) {
        char buf[64] = {0};
        FILE *f = fopen(lists[i], "r");
        if (f) {
            fgets(buf, sizeof buf, f);
            fclose(f);
        }
        printf("%s: %s", lists[i], f ? buf : "missing\n");
    }
    FILE *info = fopen("/proc/cpuinfo", "r");
    int processors = 0, last = -1, flags = 0;
    char line[4096];
    while (info && fgets(line, sizeof line, info)) {
        if (!strncmp(line, "processor", 9) && sscanf(strchr(line, ':') + 1, "%d", &last) == 1)
            processors++;
        if (!strncmp(line, "flags", 5))
            flags++;
    }
    if (info)
        fclose(info);
    printf("/proc/cpuinfo: %d processors, the last numbered %d, every block has a flags line: %d\n", processors,
           last, flags == processors);
    /* The kernel's answer is the size of its mask, whatever room it was given. */
    unsigned long raw[16];
    /* (Its size is the kernel's: 8 bytes per 64 CPUs, or the size its build allows.) */
    long got = syscall(SYS_sched_getaffinity, 0, sizeof raw, raw);
    printf("raw sched_getaffinity, 128 bytes: a multiple of 8 that holds the mask: %d\n",
           got > 0 && got % 8 == 0 && got * 8 >= n && got <= (long)sizeof raw);
    show("raw sched_getaffinity, 4 bytes", syscall(SYS_sched_getaffinity, 0, 4, raw));
    show("raw sched_getaffinity, 12 bytes", syscall(SYS_sched_getaffinity, 0, 12, raw));
    show("of a thread that does not exist", syscall(SYS_sched_getaffinity, 99999, sizeof raw, raw));
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(n - 1, &one);
    show("sched_setaffinity to the last CPU", sched_setaffinity(0, sizeof one, &one));
    CPU_ZERO(&one);
    CPU_SET(n, &one);
    show("sched_setaffinity past the last CPU", sched_setaffinity(0, sizeof one, &one));
    CPU_ZERO(&one);
    show("sched_setaffinity to no CPU", sched_setaffinity(0, sizeof one, &one));
    show("sched_setaffinity back to all", sched_setaffinity(0, sizeof s, &s));
    return 0;
}
