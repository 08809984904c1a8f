/* Conformance case: signals. Every line it prints is the same under Linux and under deja.
 *
 * Faults delivered to handlers (SIGSEGV on the alternate stack, SIGFPE, SIGILL, SIGTRAP),
 * a handler that edits the saved context to skip the faulting instruction, signals a program
 * sends itself (raise, kill, a blocked signal released by sigprocmask), the mask inside a
 * handler, the FPU state kept across a handler, and abort() with a handler that returns. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

static sigjmp_buf jump;
static volatile int last_sig, last_code, handled;
static volatile uintptr_t last_addr;
static volatile int on_altstack;
static char altstack[64 * 1024];

static void recover(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    last_sig = sig;
    last_code = si->si_code;
    last_addr = (uintptr_t)si->si_addr;
    stack_t st;
    sigaltstack(NULL, &st);
    on_altstack = (st.ss_flags & SS_ONSTACK) != 0;
    siglongjmp(jump, 1);
}

/* Skips the 2-byte instruction that faulted by moving the saved RIP. */
static void skip2(int sig, siginfo_t *si, void *uc) {
    ucontext_t *u = uc;
    last_sig = sig;
    last_code = si->si_code;
    u->uc_mcontext.gregs[REG_RIP] += 2;
    handled++;
}

static void count(int sig) {
    last_sig = sig;
    handled++;
}

static void install(int sig, void (*h)(int, siginfo_t *, void *), int flags) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = h;
    sa.sa_flags = SA_SIGINFO | flags;
    sigemptyset(&sa.sa_mask);
    if (sigaction(sig, &sa, NULL) != 0) {
        perror("sigaction");
        exit(2);
    }
}

static void simple(int sig, void (*h)(int)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = h;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, NULL);
}

static volatile int blocked_inside;
static void check_mask(int sig) {
    sigset_t cur;
    sigprocmask(SIG_BLOCK, NULL, &cur);
    blocked_inside = sigismember(&cur, sig) + 2 * sigismember(&cur, SIGUSR2);
    handled++;
}

static void clobber_fpu(int sig) {
    (void)sig;
    volatile double x = 1.0;
    for (int i = 0; i < 10; i++) x = x * 3.0 + 0.5;
    __asm__ volatile("xorps %%xmm7, %%xmm7" ::: "xmm7");
    handled++;
}

static void abort_handler(int sig) {
    (void)sig;
    /* Returns: abort() then dies of SIGABRT anyway. */
    write(1, "abort handler ran\n", 18);
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    stack_t ss = {.ss_sp = altstack, .ss_size = sizeof altstack, .ss_flags = 0};
    if (sigaltstack(&ss, NULL) != 0) {
        perror("sigaltstack");
        return 2;
    }

    /* 1. A read of a near-NULL address, recovered on the alternate stack. */
    install(SIGSEGV, recover, SA_ONSTACK);
    if (sigsetjmp(jump, 1) == 0) {
        volatile int *p = (int *)0x18;
        (void)*p;
        printf("segv: not delivered\n");
    } else {
        printf("segv: sig=%d code=%d addr=%#lx altstack=%d\n", last_sig, last_code, (unsigned long)last_addr,
               on_altstack);
    }

    /* 2. A write to read-only memory: SEGV_ACCERR. */
    if (sigsetjmp(jump, 1) == 0) {
        *(volatile char *)main = 0;
        printf("accerr: not delivered\n");
    } else {
        printf("accerr: sig=%d code=%d addr-is-main=%d\n", last_sig, last_code, last_addr == (uintptr_t)main);
    }

    /* 3. Integer division by zero: SIGFPE, FPE_INTDIV. */
    install(SIGFPE, recover, 0);
    if (sigsetjmp(jump, 1) == 0) {
        volatile int zero = 0, one = 1;
        printf("fpe: %d\n", one / zero);
    } else {
        printf("fpe: sig=%d code=%d\n", last_sig, last_code);
    }

    /* 4. ud2, skipped by the handler editing the context: SIGILL, ILL_ILLOPN. */
    install(SIGILL, skip2, 0);
    handled = 0;
    __asm__ volatile("ud2");
    printf("ill: sig=%d code=%d handled=%d, resumed after the instruction\n", last_sig, last_code, handled);

    /* 5. A faulting load skipped the same way: execution goes on with the registers intact. */
    install(SIGSEGV, skip2, 0);
    handled = 0;
    long kept = 0x1234567;
    __asm__ volatile("mov $0x20, %%rax\n\tmov (%%rax), %%eax" ::: "rax", "memory");  /* 8b 00: 2 bytes */
    printf("skip: sig=%d code=%d handled=%d kept=%#lx\n", last_sig, last_code, handled, kept);

    /* 6. int3: SIGTRAP, the saved RIP already after it. */
    simple(SIGTRAP, count);
    handled = 0;
    __asm__ volatile("int3");
    printf("trap: sig=%d handled=%d\n", last_sig, handled);

    /* 7. raise() runs the handler before it returns; kill() to itself too. */
    simple(SIGUSR1, count);
    handled = 0;
    raise(SIGUSR1);
    printf("raise: handled=%d\n", handled);
    kill(getpid(), SIGUSR1);
    printf("kill: handled=%d\n", handled);

    /* 8. A blocked signal waits; unblocking runs it at once. */
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigprocmask(SIG_BLOCK, &set, &old);
    raise(SIGUSR1);
    sigset_t pending;
    sigpending(&pending);
    printf("blocked: handled=%d pending=%d\n", handled, sigismember(&pending, SIGUSR1));
    sigprocmask(SIG_SETMASK, &old, NULL);
    printf("unblocked: handled=%d\n", handled);

    /* 9. Inside a handler its own signal and sa_mask are blocked. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = check_mask;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGUSR2);
    sigaction(SIGUSR1, &sa, NULL);
    raise(SIGUSR1);
    printf("mask inside: own=%d usr2=%d\n", blocked_inside & 1, blocked_inside >> 1);

    /* 10. The FPU and SSE registers survive a handler that uses them. */
    simple(SIGUSR2, clobber_fpu);
    volatile double d = 2.5;
    double r;
    __asm__ volatile("movsd %1, %%xmm7\n\t"
                     "mov $62, %%eax\n\t"
                     "mov %2, %%edi\n\t"
                     "mov $12, %%esi\n\t"
                     "syscall\n\t"
                     "movsd %%xmm7, %0"
                     : "=x"(r)
                     : "m"(d), "r"(getpid())
                     : "rax", "rdi", "rsi", "rcx", "r11", "xmm7", "memory");
    printf("fpu kept: %.2f\n", r);

    /* 11. abort() with a handler that returns still ends the program with SIGABRT. */
    simple(SIGABRT, abort_handler);
    printf("aborting\n");
    abort();
}
