/* hostchan: executes every instruction through which a program can observe its host, directly
 * in inline assembly, and prints what each returned: cpuid (vendor, signature and APIC ID,
 * structured features, topology), rdtsc, rdtscp (with TSC_AUX), rdpid, rdrand and rdseed at
 * 16, 32 and 64 bits (with the carry flag), and xgetbv.
 *
 * Natively, the values differ from run to run and from core to core. Under deja, with the code
 * rewritten, every one of them comes from deja's model: the same for the same seed, on any
 * core of any host. Built static by `cargo xtask guests` (gcc -static -O2).
 *
 * `hostchan N` executes rdtsc N times instead and prints the sum (`deja bench` times a trap).
 * `hostchan jit` writes a function that reads the TSC into anonymous memory, makes it executable
 * with mprotect, and calls it twice, as a JIT would. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* rdtsc; shl rdx, 32; or rax, rdx; ret */
static const uint8_t READ_TSC[] = {0x0f, 0x31, 0x48, 0xc1, 0xe2, 0x20, 0x48, 0x09, 0xd0, 0xc3};

static int jit(void) {
    uint8_t *code = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (code == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    memcpy(code, READ_TSC, sizeof READ_TSC);
    if (mprotect(code, 4096, PROT_READ | PROT_EXEC) != 0) {
        perror("mprotect");
        return 1;
    }
    uint64_t (*read_tsc)(void) = (uint64_t (*)(void))code;
    uint64_t a = read_tsc();
    uint64_t b = read_tsc();
    printf("jit rdtsc %llu then %llu\n", (unsigned long long)a, (unsigned long long)b);
    printf("jit code now %02x %02x\n", code[0], code[1]);
    return 0;
}

static void cpuid(uint32_t leaf, uint32_t sub) {
    uint32_t a, b, c, d;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(leaf), "c"(sub));
    printf("cpuid %08x.%u: %08x %08x %08x %08x\n", leaf, sub, a, b, c, d);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "jit") == 0) {
        return jit();
    }
    if (argc > 1) {
        long n = atol(argv[1]);
        uint64_t sum = 0;
        for (long i = 0; i < n; i++) {
            uint32_t lo, hi;
            __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
            sum += (uint64_t)hi << 32 | lo;
        }
        printf("rdtsc %ld times, sum %llu\n", n, (unsigned long long)sum);
        return 0;
    }
    cpuid(0, 0);
    cpuid(1, 0);
    cpuid(7, 0);
    cpuid(0xb, 0);
    cpuid(0xb, 1);
    cpuid(0x80000001, 0);

    uint32_t lo, hi, aux;
    __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
    printf("rdtsc %llu\n", (unsigned long long)hi << 32 | lo);
    __asm__ volatile("rdtscp" : "=a"(lo), "=d"(hi), "=c"(aux));
    printf("rdtscp %llu aux %u\n", (unsigned long long)hi << 32 | lo, aux);

    uint64_t pid = 0xffff;
    __asm__ volatile("rdpid %0" : "=r"(pid));
    printf("rdpid %llu\n", (unsigned long long)pid);

    uint16_t r16;
    uint32_t r32;
    uint64_t r64;
    uint8_t ok16, ok32, ok64;
    __asm__ volatile("rdrand %0; setc %1" : "=r"(r16), "=qm"(ok16) : : "cc");
    __asm__ volatile("rdrand %0; setc %1" : "=r"(r32), "=qm"(ok32) : : "cc");
    __asm__ volatile("rdrand %0; setc %1" : "=r"(r64), "=qm"(ok64) : : "cc");
    printf("rdrand %04x/%u %08x/%u %016llx/%u\n", r16, ok16, r32, ok32, (unsigned long long)r64, ok64);
    __asm__ volatile("rdseed %0; setc %1" : "=r"(r16), "=qm"(ok16) : : "cc");
    __asm__ volatile("rdseed %0; setc %1" : "=r"(r32), "=qm"(ok32) : : "cc");
    __asm__ volatile("rdseed %0; setc %1" : "=r"(r64), "=qm"(ok64) : : "cc");
    printf("rdseed %04x/%u %08x/%u %016llx/%u\n", r16, ok16, r32, ok32, (unsigned long long)r64, ok64);

    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    printf("xgetbv %#llx\n", (unsigned long long)hi << 32 | lo);
    return 0;
}
