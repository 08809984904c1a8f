/* Conformance case: processes.
 *
 * fork and wait4 (exit codes, children killed by kill, raise and a fault), waitpid with
 * WNOHANG before and after a child ends, waitid (P_PID, P_ALL, P_PGID, WNOHANG, WNOWAIT),
 * ECHILD, a SIGCHLD handler with SA_SIGINFO, SA_NOCLDWAIT, SIGCHLD ignored, what fork copies
 * and what it shares, exit_group, execve and fork in a process with threads, pipes between
 * children over their stdin and stdout, fds across execve (O_CLOEXEC, FD_CLOEXEC, dup, dup2,
 * dup3, offsets), execve's argv, environment, AT_EXECFN and /proc/self/exe, fexecve and
 * execveat, what execve keeps, its failures, `#!` scripts, vfork and clone(CLONE_VM |
 * CLONE_VFORK), posix_spawn, process groups and sessions, kill to a group, PR_SET_PDEATHSIG.
 *
 * It runs itself again through execve: with a first argument naming a mode (`report`, `fds`,
 * `upper`, ...) it does that and exits, and as the interpreter of a `#!` script it prints the
 * arguments it was given. What it prints is the same under Linux and under deja (but for the
 * lines crates/deja-cli/tests/conformance.rs names as deja's known differences): pids only as
 * relations ("the child's group is its pid"), paths only as equal or not to what was given,
 * uids as equal to getuid(). It makes itself a child subreaper, so that an orphan comes back
 * to it natively as it does under deja, where it is pid 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "case.h"

extern char **environ;

/* The program's own path (readlink of /proc/self/exe) and the directory it works in. */
static char self[4096];
static char base[64];
static pid_t me;

static void die(const char *what) {
    printf("FAILED: %s: %s\n", what, strerrorname_np(errno));
    fflush(stdout);
    _exit(99);
}

/* fork with stdio flushed, so that nothing buffered is written twice. */
static pid_t spawn(void) {
    fflush(stdout);
    fflush(stderr);
    pid_t p = fork();
    if (p < 0)
        die("fork");
    return p;
}

static void make_pipe(int p[2], int flags) {
    if (pipe2(p, flags) < 0)
        die("pipe2");
}

static void sync_write(int fd) {
    if (write(fd, "x", 1) != 1)
        die("sync write");
}

static int sync_read(int fd) {
    char c;
    ssize_t n;
    do
        n = read(fd, &c, 1);
    while (n < 0 && errno == EINTR);
    return (int)n;
}

/* A child's end as a shell would tell it. */
static void describe(const char *what, int st) {
    if (WIFEXITED(st))
        printf("%s: exited %d (status 0x%x)\n", what, WEXITSTATUS(st), st);
    else if (WIFSIGNALED(st))
        printf("%s: killed by SIG%s, core %d (status 0x%x)\n", what, sigabbrev_np(WTERMSIG(st)),
               WCOREDUMP(st) ? 1 : 0, st);
    else
        printf("%s: status 0x%x\n", what, st);
}

/* waitpid(pid) and how it ended. */
static void reap(const char *what, pid_t pid) {
    int st = 0;
    pid_t r;
    do
        r = waitpid(pid, &st, 0);
    while (r < 0 && errno == EINTR);
    if (r != pid) {
        printf("%s: waitpid gave %s\n", what, r < 0 ? strerrorname_np(errno) : "another pid");
        return;
    }
    describe(what, st);
}

/* Runs the program again: argv as given, the environment `env` (with DEJA_EXECFN naming the
 * path), in a child; waits for it. */
static void run_self(const char *what, const char *path, char *const argv[], char *const env[]) {
    pid_t p = spawn();
    if (p == 0) {
        execve(path, argv, env);
        printf("%s: execve: %s\n", what, strerrorname_np(errno));
        fflush(stdout);
        _exit(127);
    }
    reap(what, p);
}

/* ---- modes: the program run again ---- */

/* `report CODE ...`: its arguments, environment and AT_EXECFN; exits with CODE. */
static int mode_report(int argc, char **argv) {
    printf("  argc %d\n", argc);
    for (int i = 0; i < argc; i++)
        printf("  argv[%d] %s\n", i, argv[i]);
    const char *want = getenv("DEJA_SELF");
    for (char **e = environ; *e; e++) {
        if (strncmp(*e, "DEJA_EXECFN=", 12) == 0 || strncmp(*e, "DEJA_PID=", 9) == 0 ||
            strncmp(*e, "DEJA_PPID=", 10) == 0)
            continue;
        if (strncmp(*e, "DEJA_SELF=", 10) == 0)
            printf("  env DEJA_SELF=(the program's path)\n");
        else
            printf("  env %s\n", *e);
    }
    const char *given = getenv("DEJA_EXECFN");
    const char *fn = (const char *)getauxval(AT_EXECFN);
    if (given)
        printf("  AT_EXECFN is the path given, %s: %d\n",
               want && strcmp(given, want) == 0 ? "the program's path" : given, fn && strcmp(fn, given) == 0);
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = 0;
    if (want)
        printf("  /proc/self/exe is the program, run as %s: %d\n", argv[0], strcmp(exe, want) == 0);
    const char *pid = getenv("DEJA_PID"), *ppid = getenv("DEJA_PPID");
    if (pid && ppid)
        printf("  the pid it had before execve: %d, its parent still: %d\n", getpid() == atoi(pid),
               getppid() == atoi(ppid));
    fflush(stdout);
    return atoi(argv[2]);
}

/* `fds NAME=FD ...`: which of the fds are open after execve, with their FD_CLOEXEC; an fd
 * named `pipe` is written to, one named `file` read from its offset. */
static int mode_fds(int argc, char **argv) {
    for (int i = 2; i < argc; i++) {
        char name[32];
        int fd;
        if (sscanf(argv[i], "%31[^=]=%d", name, &fd) != 2)
            continue;
        int flags = fcntl(fd, F_GETFD);
        if (flags < 0) {
            printf("  %s: %s\n", name, strerrorname_np(errno));
            continue;
        }
        printf("  %s: open, FD_CLOEXEC %d\n", name, flags & FD_CLOEXEC);
        if (strcmp(name, "pipe") == 0) {
            const char *m = "written by the program after execve";
            if (write(fd, m, strlen(m)) < 0)
                printf("  write: %s\n", strerrorname_np(errno));
        }
        if (strcmp(name, "file") == 0)
            show_read("  read from the shared offset", fd);
    }
    return 0;
}

/* `upper`: stdin to stdout in capitals until end of file. */
static int mode_upper(void) {
    char b[256];
    ssize_t n;
    while ((n = read(0, b, sizeof b)) > 0) {
        for (ssize_t i = 0; i < n; i++)
            if (b[i] >= 'a' && b[i] <= 'z')
                b[i] -= 32;
        if (write(1, b, n) != n)
            return 1;
    }
    return n < 0 ? 2 : 0;
}

/* `say TEXT`: TEXT on stdout. */
static int mode_say(char **argv) {
    printf("%s\n", argv[2]);
    return 0;
}

/* As the interpreter of a `#!` script: what it was given. DEJA_SELF names the interpreter's
 * path as the `#!` line wrote it, DEJA_SCRIPT the script's path as execve was given it. */
static int mode_interp(int argc, char **argv) {
    const char *interp = getenv("DEJA_SELF"), *script = getenv("DEJA_SCRIPT");
    printf("  argc %d\n", argc);
    printf("  argv[0] is the interpreter's path: %d\n", interp && strcmp(argv[0], interp) == 0);
    for (int i = 1; i < argc; i++) {
        if (script && strcmp(argv[i], script) == 0)
            printf("  argv[%d] is the script's path as given\n", i);
        else if (script && script[0] == '.' && strlen(argv[i]) > strlen(script) &&
                 strcmp(argv[i] + strlen(argv[i]) - strlen(script) + 1, script + 1) == 0)
            printf("  argv[%d] is the script's absolute path, not %s as given\n", i, script);
        else if (strncmp(argv[i], base, strlen(base)) == 0 && base[0])
            printf("  argv[%d] BASE%s\n", i, argv[i] + strlen(base));
        else if (strncmp(argv[i], "/tmp/deja-procs-", 16) == 0)
            printf("  argv[%d] BASE%s\n", i, strchr(argv[i] + 16, '/') ? strchr(argv[i] + 16, '/') : "");
        else
            printf("  argv[%d] %s\n", i, argv[i]);
    }
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = 0;
    printf("  /proc/self/exe is the interpreter: %d\n", interp && strcmp(exe, interp) == 0);
    fflush(stdout);
    return 5;
}

static void on_int(int sig) {
    (void)sig;
}

/* `state`: what execve kept of the process: dispositions, mask, pending signals, the alarm,
 * the working directory (DEJA_CWD names it) and the umask. */
static int mode_state(void) {
    struct sigaction sa;
    sigaction(SIGUSR1, NULL, &sa);
    printf("  SIGUSR1 still ignored: %d\n", sa.sa_handler == SIG_IGN);
    sigaction(SIGINT, NULL, &sa);
    printf("  SIGINT's handler back to the default: %d\n", sa.sa_handler == SIG_DFL);
    sigset_t m, pend;
    sigprocmask(SIG_SETMASK, NULL, &m);
    sigpending(&pend);
    printf("  SIGUSR2 still blocked: %d, still pending: %d\n", sigismember(&m, SIGUSR2), sigismember(&pend, SIGUSR2));
    unsigned left = alarm(0);
    printf("  the alarm still set: %d\n", left > 0 && left <= 100);
    char cwd[4096];
    const char *want = getenv("DEJA_CWD");
    printf("  the working directory kept: %d\n", getcwd(cwd, sizeof cwd) && want && strcmp(cwd, want) == 0);
    printf("  umask 0%o\n", umask(022));
    signal(SIGUSR2, SIG_IGN);
    return 0;
}

/* `pdeath`: the death signal kept across execve. */
static int mode_pdeath(void) {
    int sig = -1;
    prctl(PR_GET_PDEATHSIG, &sig);
    printf("  after execve, PR_GET_PDEATHSIG: %d\n", sig);
    return 0;
}

/* `ids`: the relations of a spawned program's ids (DEJA_PARENT names its parent's pid). */
static int mode_ids(void) {
    const char *parent = getenv("DEJA_PARENT");
    printf("  getppid is the spawner: %d\n", parent && getppid() == atoi(parent));
    printf("  its group is its pid: %d\n", getpgrp() == getpid());
    printf("  its session is the spawner's: %d\n", parent && getsid(0) == getsid(atoi(parent)));
    sigset_t m;
    sigprocmask(SIG_SETMASK, NULL, &m);
    printf("  SIGUSR2 blocked: %d\n", sigismember(&m, SIGUSR2));
    struct sigaction sa;
    sigaction(SIGUSR1, NULL, &sa);
    printf("  SIGUSR1 default: %d\n", sa.sa_handler == SIG_DFL);
    printf("  fd 25, closed by a file action: %s\n", fcntl(25, F_GETFD) < 0 ? strerrorname_np(errno) : "open");
    show_read("  fd 26, a file action's dup2", 26);
    return 3;
}

/* `block`: waits on stdin (the parent's pipe) until it closes. */
static int mode_block(void) {
    char c;
    while (read(0, &c, 1) > 0) {
    }
    return 0;
}

/* ---- the cases ---- */

static void exit_codes(void) {
    puts("== exit codes");
    int codes[] = {0, 1, 42, 255, 256 + 7};
    for (size_t i = 0; i < sizeof codes / sizeof *codes; i++) {
        pid_t p = spawn();
        if (p == 0)
            _exit(codes[i]);
        int st = -1;
        struct rusage ru;
        pid_t r = wait4(p, &st, 0, &ru);
        char what[64];
        snprintf(what, sizeof what, "_exit(%d), wait4 gave the child %d", codes[i], r == p);
        describe(what, st);
    }
    /* exit() from a child, which flushes its stdio. */
    pid_t p = spawn();
    if (p == 0) {
        printf("child: exit(3) after this line\n");
        exit(3);
    }
    reap("exit(3)", p);
    /* The status pointer may be NULL. */
    p = spawn();
    if (p == 0)
        _exit(0);
    printf("wait4 with no status pointer gave the child: %d\n", wait4(p, NULL, 0, NULL) == p);
}

static void killed(void) {
    puts("== children killed by signals");
    int sigs[] = {SIGTERM, SIGKILL, SIGINT, SIGUSR1};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
        int ready[2], hold[2];
        make_pipe(ready, 0);
        make_pipe(hold, 0);
        pid_t p = spawn();
        if (p == 0) {
            close(ready[0]);
            close(hold[1]);
            signal(sigs[i], SIG_DFL);
            sync_write(ready[1]);
            sync_read(hold[0]);
            _exit(0);
        }
        close(ready[1]);
        close(hold[0]);
        sync_read(ready[0]);
        char what[64];
        snprintf(what, sizeof what, "kill(child, SIG%s) while it waits", sigabbrev_np(sigs[i]));
        show(what, kill(p, sigs[i]));
        reap("  it", p);
        close(ready[0]);
        close(hold[1]);
    }
    /* A child that ignores SIGTERM outlives it, and not SIGKILL. */
    int ready[2], hold[2];
    make_pipe(ready, 0);
    make_pipe(hold, 0);
    pid_t p = spawn();
    if (p == 0) {
        signal(SIGTERM, SIG_IGN);
        sync_write(ready[1]);
        sync_read(hold[0]);
        _exit(4);
    }
    close(ready[1]);
    close(hold[0]);
    sync_read(ready[0]);
    kill(p, SIGTERM);
    int st;
    printf("SIGTERM ignored, WNOHANG: %d\n", (int)waitpid(p, &st, WNOHANG));
    kill(p, SIGKILL);
    reap("then SIGKILL", p);
    close(ready[0]);
    close(hold[1]);
    /* raise, abort and a fault, without core dumps (PR_SET_DUMPABLE 0). */
    p = spawn();
    if (p == 0) {
        prctl(PR_SET_DUMPABLE, 0);
        raise(SIGABRT);
        _exit(0);
    }
    reap("raise(SIGABRT)", p);
    p = spawn();
    if (p == 0) {
        prctl(PR_SET_DUMPABLE, 0);
        abort();
    }
    reap("abort()", p);
    p = spawn();
    if (p == 0) {
        prctl(PR_SET_DUMPABLE, 0);
        volatile int *volatile wild = (int *)16;
        *wild = 1;
        _exit(0);
    }
    reap("a store to address 16", p);
    p = spawn();
    if (p == 0) {
        prctl(PR_SET_DUMPABLE, 0);
        volatile int zero = 0;
        _exit(10 / zero);
    }
    reap("a division by zero", p);
    /* A write to a pipe nobody reads: SIGPIPE. */
    int dead[2];
    make_pipe(dead, 0);
    close(dead[0]);
    p = spawn();
    if (p == 0) {
        signal(SIGPIPE, SIG_DFL);
        write(dead[1], "x", 1);
        _exit(0);
    }
    close(dead[1]);
    reap("a write to a pipe without readers", p);
    /* A child that kills itself with a handled signal survives it. */
    p = spawn();
    if (p == 0) {
        signal(SIGUSR2, SIG_IGN);
        kill(getpid(), SIGUSR2);
        _exit(6);
    }
    reap("SIGUSR2 to itself, ignored", p);
}

static void nohang(void) {
    puts("== waitpid with WNOHANG");
    int go[2];
    make_pipe(go, 0);
    pid_t p = spawn();
    if (p == 0) {
        close(go[1]);
        sync_read(go[0]);
        _exit(7);
    }
    close(go[0]);
    int st = -1;
    printf("before it ends: %d, status untouched %d\n", (int)waitpid(p, &st, WNOHANG), st == -1);
    printf("waitpid(-1, WNOHANG): %d\n", (int)waitpid(-1, &st, WNOHANG));
    close(go[1]);
    siginfo_t si;
    memset(&si, 0, sizeof si);
    show("waitid WNOWAIT until it ends", waitid(P_PID, p, &si, WEXITED | WNOWAIT));
    pid_t r = waitpid(p, &st, WNOHANG);
    printf("after it ended, WNOHANG gives the child: %d\n", r == p);
    describe("  it", st);
    show("waitpid again", waitpid(p, &st, WNOHANG));
}

static void waitids(void) {
    puts("== waitid");
    int go[2];
    make_pipe(go, 0);
    pid_t p = spawn();
    if (p == 0) {
        close(go[1]);
        sync_read(go[0]);
        _exit(5);
    }
    close(go[0]);
    siginfo_t si;
    memset(&si, 0xff, sizeof si);
    show("WNOHANG, running", waitid(P_PID, p, &si, WEXITED | WNOHANG));
    printf("  si_pid %d si_signo %d\n", si.si_pid, si.si_signo);
    close(go[1]);
    for (int i = 0; i < 2; i++) {
        memset(&si, 0, sizeof si);
        show("WNOWAIT", waitid(P_PID, p, &si, WEXITED | WNOWAIT));
        printf("  si_pid is the child %d, si_signo %d, si_code %d (CLD_EXITED %d), si_status %d, "
               "si_uid ours %d\n",
               si.si_pid == p, si.si_signo, si.si_code, CLD_EXITED, si.si_status,
               si.si_uid == getuid());
    }
    memset(&si, 0, sizeof si);
    show("reap", waitid(P_PID, p, &si, WEXITED));
    printf("  si_pid is the child %d, si_status %d\n", si.si_pid == p, si.si_status);
    show("again", waitid(P_PID, p, &si, WEXITED));
    /* P_ALL and a killed child. */
    int ready[2];
    make_pipe(ready, 0);
    make_pipe(go, 0);
    p = spawn();
    if (p == 0) {
        sync_write(ready[1]);
        sync_read(go[0]);
        _exit(0);
    }
    close(ready[1]);
    close(go[0]);
    sync_read(ready[0]);
    kill(p, SIGTERM);
    memset(&si, 0, sizeof si);
    show("P_ALL, killed by SIGTERM", waitid(P_ALL, 0, &si, WEXITED));
    printf("  si_pid is the child %d, si_code %d (CLD_KILLED %d), si_status %d\n", si.si_pid == p,
           si.si_code, CLD_KILLED, si.si_status);
    close(ready[0]);
    close(go[1]);
    /* P_PGID of our own group. */
    p = spawn();
    if (p == 0)
        _exit(9);
    memset(&si, 0, sizeof si);
    show("P_PGID of our group", waitid(P_PGID, getpgrp(), &si, WEXITED));
    printf("  si_pid is the child %d, si_status %d\n", si.si_pid == p, si.si_status);
    show("P_ALL with no children", waitid(P_ALL, 0, &si, WEXITED));
    show("no WEXITED", waitid(P_ALL, 0, &si, WNOHANG));
    show("P_PID 0", waitid(P_PID, 0, &si, WEXITED));
    show("wait4 with an unknown option", wait4(-1, NULL, 0x10, NULL));
}

static void echild(void) {
    puts("== ECHILD");
    show("wait with no children", wait(NULL));
    show("waitpid(-1, WNOHANG) with no children", waitpid(-1, NULL, WNOHANG));
    show("waitpid of ourselves", waitpid(getpid(), NULL, 0));
    show("waitpid of a pid that does not exist", waitpid(0x3ffffff0, NULL, 0));
    /* A grandchild is not ours to wait for. */
    int gp[2], go[2];
    make_pipe(gp, 0);
    make_pipe(go, 0);
    pid_t p = spawn();
    if (p == 0) {
        pid_t g = spawn();
        if (g == 0) {
            close(go[1]);
            sync_read(go[0]);
            _exit(0);
        }
        write(gp[1], &g, sizeof g);
        close(go[0]);
        close(go[1]);
        int st;
        waitpid(g, &st, 0);
        _exit(WEXITSTATUS(st) + 20);
    }
    close(gp[1]);
    close(go[0]);
    pid_t g = 0;
    read(gp[0], &g, sizeof g);
    show("waitpid of a grandchild", waitpid(g, NULL, 0));
    show("kill(grandchild, 0)", kill(g, 0));
    close(go[1]);
    reap("the child, once its child ended", p);
    close(gp[0]);
}

static volatile sig_atomic_t chld_n;
static volatile int chld_signo, chld_code, chld_status, chld_pid, chld_uid;

static void on_chld(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    chld_n++;
    chld_signo = sig;
    chld_code = si->si_code;
    chld_status = si->si_status;
    chld_pid = si->si_pid;
    chld_uid = si->si_uid;
}

static void wait_chld(sigset_t *during, int n) {
    while (chld_n < n)
        sigsuspend(during);
}

static void sigchld(void) {
    puts("== SIGCHLD");
    struct sigaction sa = {0};
    sa.sa_sigaction = on_chld;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGCHLD, &sa, NULL);
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGCHLD);
    sigprocmask(SIG_BLOCK, &block, &old);
    sigset_t during = old;
    sigdelset(&during, SIGCHLD);

    chld_n = 0;
    pid_t p = spawn();
    if (p == 0)
        _exit(3);
    wait_chld(&during, 1);
    printf("exit(3): handled %d, signo %d, si_code %d (CLD_EXITED), si_status %d, si_pid is the "
           "child %d, si_uid ours %d\n",
           chld_n, chld_signo, chld_code, chld_status, chld_pid == p, chld_uid == (int)getuid());
    reap("  reaped after the handler", p);

    int ready[2], hold[2];
    make_pipe(ready, 0);
    make_pipe(hold, 0);
    p = spawn();
    if (p == 0) {
        sync_write(ready[1]);
        sync_read(hold[0]);
        _exit(0);
    }
    close(ready[1]);
    close(hold[0]);
    sync_read(ready[0]);
    chld_n = 0;
    kill(p, SIGKILL);
    wait_chld(&during, 1);
    printf("SIGKILL: handled %d, si_code %d (CLD_KILLED), si_status %d, si_pid is the child %d\n",
           chld_n, chld_code, chld_status, chld_pid == p);
    reap("  reaped", p);
    close(ready[0]);
    close(hold[1]);

    chld_n = 0;
    p = spawn();
    if (p == 0) {
        prctl(PR_SET_DUMPABLE, 0);
        raise(SIGABRT);
        _exit(0);
    }
    wait_chld(&during, 1);
    printf("SIGABRT, no core: handled %d, si_code %d (CLD_KILLED), si_status %d\n", chld_n,
           chld_code, chld_status);
    reap("  reaped", p);

    /* Two children ending while SIGCHLD is blocked: one signal (a standard signal is queued
     * once), two children to reap. */
    chld_n = 0;
    pid_t a = spawn();
    if (a == 0)
        _exit(1);
    pid_t b = spawn();
    if (b == 0)
        _exit(2);
    siginfo_t si;
    waitid(P_PID, a, &si, WEXITED | WNOWAIT);
    waitid(P_PID, b, &si, WEXITED | WNOWAIT);
    sigset_t pending;
    sigpending(&pending);
    printf("two children ended while blocked: SIGCHLD pending %d\n", sigismember(&pending, SIGCHLD));
    sigsuspend(&during);
    printf("  handled %d\n", chld_n);
    reap("  first", a);
    reap("  second", b);

    /* SA_NOCLDWAIT with a handler: children are reaped as they end, and SIGCHLD is sent all
     * the same. */
    puts("== SA_NOCLDWAIT with a handler");
    sa.sa_flags = SA_SIGINFO | SA_NOCLDWAIT;
    sigaction(SIGCHLD, &sa, NULL);
    chld_n = 0;
    p = spawn();
    if (p == 0)
        _exit(4);
    show("wait", wait(NULL));
    sigpending(&pending);
    printf("SIGCHLD pending after SA_NOCLDWAIT reaped the child: %d\n", sigismember(&pending, SIGCHLD));
    sigprocmask(SIG_SETMASK, &old, NULL);
    printf("handled after unblocking, SA_NOCLDWAIT: %d\n", (int)chld_n);
    signal(SIGCHLD, SIG_DFL);

    /* SIGCHLD ignored: children are reaped as they end, and wait waits for the last. */
    puts("== SIGCHLD ignored");
    signal(SIGCHLD, SIG_IGN);
    int go[2];
    make_pipe(go, 0);
    p = spawn();
    if (p == 0) {
        close(go[1]);
        sync_read(go[0]);
        _exit(0);
    }
    close(go[0]);
    show("waitpid WNOHANG while it runs", waitpid(p, NULL, WNOHANG));
    close(go[1]);
    show("wait", wait(NULL));
    show("kill(it, 0) after", kill(p, 0));
    signal(SIGCHLD, SIG_DFL);
    /* A child that ended before SIGCHLD was ignored stays until reaped. */
    p = spawn();
    if (p == 0)
        _exit(8);
    waitid(P_PID, p, &si, WEXITED | WNOWAIT);
    signal(SIGCHLD, SIG_IGN);
    reap("a child that ended before SIG_IGN", p);
    signal(SIGCHLD, SIG_DFL);
}

static int global = 1;

static void *sleeper(void *arg) {
    sync_read(*(int *)arg);
    return NULL;
}

static void *forker(void *arg) {
    pid_t p = spawn();
    if (p == 0) {
        /* Alone in the child: the thread that forked. */
        printf("child of a thread: exit(21) from it\n");
        exit(21);
    }
    *(pid_t *)arg = p;
    return NULL;
}

static void forks(void) {
    puts("== what fork copies and shares");
    int *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int *private = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    *shared = 1;
    *private = 1;
    global = 1;
    char *heap = malloc(64);
    strcpy(heap, "parent");
    char path[128];
    snprintf(path, sizeof path, "%s/offset", base);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    sigset_t usr2, old;
    sigemptyset(&usr2);
    sigaddset(&usr2, SIGUSR2);
    sigprocmask(SIG_BLOCK, &usr2, &old);
    raise(SIGUSR2);
    alarm(100);
    pid_t parent = getpid();
    pid_t p = spawn();
    if (p == 0) {
        printf("child: fork gave 0, getppid is the parent %d, getpid differs %d\n", getppid() == parent,
               getpid() != parent);
        *shared = 2;
        *private = 2;
        global = 2;
        strcpy(heap, "child");
        write(fd, "abc", 3);
        sigset_t pend, mask;
        sigpending(&pend);
        sigprocmask(SIG_SETMASK, NULL, &mask);
        printf("child: SIGUSR2 pending %d, blocked %d, alarm left %u\n", sigismember(&pend, SIGUSR2),
               sigismember(&mask, SIGUSR2), alarm(0));
        fflush(stdout);
        _exit(0);
    }
    reap("child", p);
    printf("MAP_SHARED %d, MAP_PRIVATE %d, a global %d, the heap %s\n", *shared, *private, global, heap);
    printf("the file offset the child moved: %ld\n", (long)lseek(fd, 0, SEEK_CUR));
    sigset_t pend;
    sigpending(&pend);
    printf("our SIGUSR2 still pending: %d, our alarm still set: %d\n", sigismember(&pend, SIGUSR2),
           alarm(0) > 0);
    signal(SIGUSR2, SIG_IGN);
    sigprocmask(SIG_SETMASK, &old, NULL);
    signal(SIGUSR2, SIG_DFL);
    close(fd);
    unlink(path);
    free(heap);
    munmap(shared, 4096);
    munmap(private, 4096);

    /* Children in order: waitpid(-1) takes the one that ended. */
    int go1[2], go2[2];
    make_pipe(go1, 0);
    make_pipe(go2, 0);
    pid_t a = spawn();
    if (a == 0) {
        close(go1[1]);
        close(go2[0]);
        close(go2[1]);
        sync_read(go1[0]);
        _exit(1);
    }
    pid_t b = spawn();
    if (b == 0) {
        close(go1[0]);
        close(go1[1]);
        close(go2[1]);
        sync_read(go2[0]);
        _exit(2);
    }
    close(go1[0]);
    close(go2[0]);
    close(go2[1]);
    int st;
    pid_t r = waitpid(-1, &st, 0);
    printf("waitpid(-1): the second child %d, exit %d\n", r == b, WEXITSTATUS(st));
    close(go1[1]);
    r = waitpid(0, &st, 0);
    printf("waitpid(0): the first child %d, exit %d\n", r == a, WEXITSTATUS(st));

    /* A process of two threads: one thread's exit_group ends both. */
    puts("== threads");
    p = spawn();
    if (p == 0) {
        int hold[2];
        make_pipe(hold, 0);
        pthread_t t;
        pthread_create(&t, NULL, sleeper, &hold[0]);
        exit(6);
    }
    reap("exit(6) while another thread waits", p);
    p = spawn();
    if (p == 0) {
        int hold[2];
        make_pipe(hold, 0);
        pthread_t t;
        pthread_create(&t, NULL, sleeper, &hold[0]);
        syscall(SYS_exit_group, 11);
        _exit(0);
    }
    reap("exit_group(11)", p);
    /* execve from a process with another thread: the thread goes. */
    p = spawn();
    if (p == 0) {
        int hold[2];
        make_pipe(hold, 0);
        pthread_t t;
        pthread_create(&t, NULL, sleeper, &hold[0]);
        char *argv[] = {"after-threads", "report", "12", NULL};
        char *env[] = {"DEJA_THREADS=2", NULL};
        execve("/proc/self/exe", argv, env);
        _exit(127);
    }
    reap("execve with another thread", p);
    /* A child another thread forked is the process's: the main thread waits for it. */
    pthread_t t;
    pid_t kid = 0;
    pthread_create(&t, NULL, forker, &kid);
    pthread_join(t, NULL);
    reap("a child another thread forked, reaped by the main thread", kid);
}

static void pipes(void) {
    puts("== pipes between children");
    int a[2], b[2];
    make_pipe(a, 0);
    make_pipe(b, 0);
    pid_t c1 = spawn();
    if (c1 == 0) {
        dup2(a[1], 1);
        close(a[0]);
        close(a[1]);
        close(b[0]);
        close(b[1]);
        char *argv[] = {"say", "say", "hello from the first child", NULL};
        execve("/proc/self/exe", argv, (char *[]){NULL});
        _exit(127);
    }
    pid_t c2 = spawn();
    if (c2 == 0) {
        dup2(a[0], 0);
        dup2(b[1], 1);
        close(a[0]);
        close(a[1]);
        close(b[0]);
        close(b[1]);
        char *argv[] = {"upper", "upper", NULL};
        execve("/proc/self/exe", argv, (char *[]){NULL});
        _exit(127);
    }
    close(a[0]);
    close(a[1]);
    close(b[1]);
    char buf[256];
    size_t got = 0;
    ssize_t n;
    while ((n = read(b[0], buf + got, sizeof buf - 1 - got)) > 0)
        got += n;
    buf[got] = 0;
    printf("through two children: %s", buf);
    printf("then end of file: %zd\n", n);
    close(b[0]);
    reap("  the writer", c1);
    reap("  the filter", c2);

    /* A reader sees end of file only once every writer closed: the parent's copy too. */
    make_pipe(a, 0);
    make_pipe(b, 0);
    pid_t c = spawn();
    if (c == 0) {
        dup2(a[0], 0);
        dup2(b[1], 1);
        close(a[0]);
        close(a[1]);
        close(b[0]);
        close(b[1]);
        execve("/proc/self/exe", (char *[]){"upper", "upper", NULL}, (char *[]){NULL});
        _exit(127);
    }
    close(a[0]);
    close(b[1]);
    write(a[1], "one ", 4);
    n = read(b[0], buf, sizeof buf);
    printf("the filter wrote: %.*s\n", (int)n, buf);
    int st;
    printf("still running while we hold the write end: %d\n", (int)waitpid(c, &st, WNOHANG));
    write(a[1], "two", 3);
    close(a[1]);
    got = 0;
    while ((n = read(b[0], buf + got, sizeof buf - 1 - got)) > 0)
        got += n;
    printf("after we closed it: %.*s, then %zd\n", (int)got, buf, n);
    close(b[0]);
    reap("  the filter", c);
}

static void exec_fds(void) {
    puts("== fds across execve");
    int p[2];
    make_pipe(p, 0);
    int cloexec = open("/dev/null", O_RDONLY | O_CLOEXEC);
    int later = open("/dev/null", O_RDONLY);
    fcntl(later, F_SETFD, FD_CLOEXEC);
    int duped = dup(cloexec);
    int dup3d = dup3(p[1], 20, O_CLOEXEC);
    int dup2d = dup2(cloexec, 21);
    int q[2];
    make_pipe(q, O_CLOEXEC);
    int fcntl_dup = fcntl(p[1], F_DUPFD_CLOEXEC, 30);
    char path[128];
    snprintf(path, sizeof path, "%s/shared", base);
    int file = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    write(file, "0123456789", 10);
    lseek(file, 4, SEEK_SET);
    char args[10][32];
    snprintf(args[0], 32, "pipe=%d", p[1]);
    snprintf(args[1], 32, "O_CLOEXEC=%d", cloexec);
    snprintf(args[2], 32, "F_SETFD=%d", later);
    snprintf(args[3], 32, "dup=%d", duped);
    snprintf(args[4], 32, "dup3-O_CLOEXEC=%d", dup3d);
    snprintf(args[5], 32, "dup2=%d", dup2d);
    snprintf(args[6], 32, "pipe2-O_CLOEXEC=%d", q[0]);
    snprintf(args[7], 32, "F_DUPFD_CLOEXEC=%d", fcntl_dup);
    snprintf(args[8], 32, "file=%d", file);
    snprintf(args[9], 32, "never-opened=%d", 40);
    pid_t c = spawn();
    if (c == 0) {
        close(p[0]);
        int f = fcntl(cloexec, F_GETFD);
        printf("  before execve, the O_CLOEXEC fd: open %d, FD_CLOEXEC %d\n", f >= 0, f & FD_CLOEXEC);
        fflush(stdout);
        char *argv[] = {"fds", "fds", args[0], args[1], args[2], args[3], args[4], args[5], args[6], args[7], args[8], args[9], NULL};
        execve("/proc/self/exe", argv, (char *[]){NULL});
        _exit(127);
    }
    close(p[1]);
    close(dup3d);
    close(fcntl_dup);
    reap("fds", c);
    show_read("read from the inherited pipe", p[0]);
    show_read("then", p[0]);
    printf("our offset after the program read: %ld\n", (long)lseek(file, 0, SEEK_CUR));
    close(p[0]);
    close(cloexec);
    close(later);
    close(duped);
    close(dup2d);
    close(q[0]);
    close(q[1]);
    close(file);
    unlink(path);
}

static void exec_args(void) {
    puts("== execve: argv, the environment, AT_EXECFN");
    {
        char *argv[] = {"custom-name", "report", "23", "two words", "", NULL};
        char *env[] = {"DEJA_ONE=1", "DEJA_TWO=two words", "DEJA_EXECFN=/proc/self/exe", "NOEQUALS", NULL};
        run_self("/proc/self/exe with an argv and an environment", "/proc/self/exe", argv, env);
    }
    {
        pid_t c = spawn();
        if (c == 0) {
            char pid[32], ppid[32];
            snprintf(pid, sizeof pid, "DEJA_PID=%d", getpid());
            snprintf(ppid, sizeof ppid, "DEJA_PPID=%d", getppid());
            char *argv[] = {"same-pid", "report", "0", NULL};
            char *env[] = {pid, ppid, NULL};
            execve("/proc/self/exe", argv, env);
            _exit(127);
        }
        reap("the pid kept", c);
    }
    {
        char selfenv[4200], fnenv[4200];
        snprintf(selfenv, sizeof selfenv, "DEJA_SELF=%s", self);
        snprintf(fnenv, sizeof fnenv, "DEJA_EXECFN=%s", self);
        char *argv[] = {"by-path", "report", "0", NULL};
        char *env[] = {selfenv, fnenv, NULL};
        run_self("its own path", self, argv, env);
    }
    {
        char *argv[] = {"no-env", "report", "1", NULL};
        run_self("a NULL environment", "/proc/self/exe", argv, NULL);
    }
    {
        /* fexecve: execveat(fd, "", AT_EMPTY_PATH). */
        int fd = open(self, O_RDONLY | O_CLOEXEC);
        char selfenv[4200];
        snprintf(selfenv, sizeof selfenv, "DEJA_SELF=%s", self);
        char *argv[] = {"fexecve", "report", "13", NULL};
        char *env[] = {selfenv, NULL};
        pid_t c = spawn();
        if (c == 0) {
            fexecve(fd, argv, env);
            printf("fexecve: %s\n", strerrorname_np(errno));
            fflush(stdout);
            _exit(127);
        }
        reap("fexecve of our own fd", c);
        close(fd);
    }
    {
        /* execveat from a directory fd. */
        char dir[4096];
        strcpy(dir, self);
        char *slash = strrchr(dir, '/');
        *slash = 0;
        int dfd = open(dir[0] ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        char selfenv[4200];
        snprintf(selfenv, sizeof selfenv, "DEJA_SELF=%s", self);
        char *argv[] = {"execveat", "report", "14", NULL};
        char *env[] = {selfenv, NULL};
        pid_t c = spawn();
        if (c == 0) {
            syscall(SYS_execveat, dfd, slash + 1, argv, env, 0);
            printf("execveat: %s\n", strerrorname_np(errno));
            fflush(stdout);
            _exit(127);
        }
        reap("execveat of our name in our directory's fd", c);
        close(dfd);
    }
}

static void exec_state(void) {
    puts("== what execve keeps");
    pid_t c = spawn();
    if (c == 0) {
        signal(SIGUSR1, SIG_IGN);
        signal(SIGINT, on_int);
        sigset_t usr2;
        sigemptyset(&usr2);
        sigaddset(&usr2, SIGUSR2);
        sigprocmask(SIG_BLOCK, &usr2, NULL);
        raise(SIGUSR2);
        alarm(100);
        if (chdir(base) < 0)
            die("chdir");
        umask(027);
        char cwd[200];
        snprintf(cwd, sizeof cwd, "DEJA_CWD=%s", base);
        execve("/proc/self/exe", (char *[]){"state", "state", NULL}, (char *[]){cwd, NULL});
        _exit(127);
    }
    reap("  it", c);
}

static void write_file(const char *path, const char *text, mode_t mode) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
    if (fd < 0)
        die(path);
    write(fd, text, strlen(text));
    close(fd);
    chmod(path, mode);
}

static void exec_failures(void) {
    puts("== execve failures");
    char text[128], noexec[128], empty[128], missing[128], notdir[128], loop1[128], loop2[128];
    snprintf(text, sizeof text, "%s/text", base);
    snprintf(noexec, sizeof noexec, "%s/noexec", base);
    snprintf(empty, sizeof empty, "%s/empty", base);
    snprintf(missing, sizeof missing, "%s/missing-interpreter", base);
    snprintf(notdir, sizeof notdir, "%s/text/below", base);
    snprintf(loop1, sizeof loop1, "%s/loop1", base);
    snprintf(loop2, sizeof loop2, "%s/loop2", base);
    write_file(text, "echo this is not a program\n", 0755);
    write_file(noexec, "#!/bin/sh\n", 0644);
    write_file(empty, "", 0755);
    write_file(missing, "#!/deja/no/such/interpreter\n", 0755);
    char line[256];
    snprintf(line, sizeof line, "#!%s\n", loop2);
    write_file(loop1, line, 0755);
    snprintf(line, sizeof line, "#!%s\n", loop1);
    write_file(loop2, line, 0755);
    char *argv[] = {"x", NULL};
    const char *paths[][2] = {
        {"a path that does not exist", "/deja/no/such/program"},
        {"a text file without #!", text},
        {"an empty file", empty},
        {"a file without x permission", noexec},
        {"a directory", "/tmp"},
        {"a #! line naming a missing interpreter", missing},
        {"a path through a file", notdir},
        {"two scripts naming each other", loop1},
        {"an empty path", ""},
    };
    pid_t c = spawn();
    if (c == 0) {
        for (size_t i = 0; i < sizeof paths / sizeof *paths; i++)
            show(paths[i][0], execve(paths[i][1], argv, NULL));
        show("a bad argv pointer", syscall(SYS_execve, self, 16L, 0L));
        show("a bad path pointer", syscall(SYS_execve, 16L, argv, 0L));
        char *bad_env[] = {"A=1", (char *)16, NULL};
        show("a bad string in the environment", execve(self, argv, bad_env));
        show("execveat with an unknown flag", syscall(SYS_execveat, AT_FDCWD, self, argv, NULL, 0x4));
        printf("the process is still running\n");
        fflush(stdout);
        _exit(0);
    }
    reap("after the failures", c);
    unlink(text);
    unlink(noexec);
    unlink(empty);
    unlink(missing);
    unlink(loop1);
    unlink(loop2);
}

static void scripts(void) {
    puts("== #! scripts");
    char s1[128], s2[128], s3[128], s4[128], line[4200];
    snprintf(s1, sizeof s1, "%s/with-arg", base);
    snprintf(s2, sizeof s2, "%s/no-arg", base);
    snprintf(s3, sizeof s3, "%s/spaces", base);
    snprintf(s4, sizeof s4, "%s/nested", base);
    snprintf(line, sizeof line, "#!%s interp\nthe script's text is not read\n", self);
    write_file(s1, line, 0755);
    snprintf(line, sizeof line, "#!%s\n", self);
    write_file(s2, line, 0755);
    snprintf(line, sizeof line, "#! \t%s   interp with  spaces \t\n", self);
    write_file(s3, line, 0755);
    snprintf(line, sizeof line, "#!%s\n", s1);
    write_file(s4, line, 0755);
    char selfenv[4200];
    snprintf(selfenv, sizeof selfenv, "DEJA_SELF=%s", self);
    const char *cases[][2] = {
        {"a script with an argument on its #! line", s1},
        {"a script without one", s2},
        {"spaces around the interpreter and inside its argument", s3},
        {"a script whose interpreter is a script", s4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char scriptenv[200];
        snprintf(scriptenv, sizeof scriptenv, "DEJA_SCRIPT=%s", cases[i][1]);
        char *argv[] = {"the-script's-argv0", "a", "b c", NULL};
        char *env[] = {selfenv, scriptenv, NULL};
        printf("%s:\n", cases[i][0]);
        run_self("  it", cases[i][1], argv, env);
    }
    /* By a relative path, from the script's directory. */
    pid_t c = spawn();
    if (c == 0) {
        if (chdir(base) < 0)
            die("chdir");
        char *argv[] = {"rel", "x", NULL};
        char *env[] = {selfenv, "DEJA_SCRIPT=./with-arg", NULL};
        printf("by the relative path ./with-arg:\n");
        fflush(stdout);
        execve("./with-arg", argv, env);
        _exit(127);
    }
    reap("  it", c);
    unlink(s1);
    unlink(s2);
    unlink(s3);
    unlink(s4);
}

static int vm_child(void *arg) {
    *(volatile int *)arg = 2;
    return 4;
}

static void vforks(void) {
    puts("== vfork");
    static volatile int shared;
    shared = 0;
    pid_t p = vfork();
    if (p == 0) {
        shared = 1;
        _exit(3);
    }
    printf("vfork and _exit: the child wrote our memory %d\n", shared);
    reap("  it", p);
    char *argv[] = {"vforked", "report", "11", NULL};
    char *env[] = {"DEJA_VFORK=1", NULL};
    fflush(stdout);
    p = vfork();
    if (p == 0) {
        execve("/proc/self/exe", argv, env);
        _exit(127);
    }
    reap("vfork and execve", p);
    static volatile int err;
    err = 0;
    p = vfork();
    if (p == 0) {
        execve("/deja/no/such/program", argv, env);
        err = errno;
        _exit(127);
    }
    printf("vfork and a failed execve: %s\n", strerrorname_np(err));
    reap("  it", p);
    /* The clone posix_spawn makes, by hand: CLONE_VM | CLONE_VFORK on a stack of its own; the
     * child's function returns, and glibc ends it with exit (not exit_group). */
    char *stack = malloc(1 << 16);
    p = clone(vm_child, stack + (1 << 16), CLONE_VM | CLONE_VFORK | SIGCHLD, (void *)&shared);
    printf("clone(CLONE_VM | CLONE_VFORK): the child wrote our memory %d\n", shared == 2);
    reap("  it", p);
    free(stack);
    /* A clone with another exit signal: SIGUSR1 instead of SIGCHLD, waited for with __WALL. */
    signal(SIGUSR1, SIG_IGN);
    fflush(stdout);
    p = (pid_t)syscall(SYS_clone, SIGUSR1, NULL, NULL, NULL, 0);
    if (p == 0)
        syscall(SYS_exit_group, 5);
    /* Linux's wait4 does not wait for a child with another exit signal unless __WALL or
     * __WCLONE is given. */
    int st;
    pid_t r = waitpid(p, &st, __WALL);
    printf("clone with exit signal SIGUSR1 (ignored here), waitpid __WALL gave it %d\n", r == p);
    describe("  it", st);
    signal(SIGUSR1, SIG_DFL);
}

static void spawns(void) {
    puts("== posix_spawn");
    signal(SIGUSR1, SIG_IGN);
    int p[2], data[2];
    make_pipe(p, 0);
    make_pipe(data, 0);
    write(data[1], "data", 4);
    close(data[1]);
    int hidden = dup2(p[0], 25);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    posix_spawn_file_actions_addclose(&fa, p[0]);
    posix_spawn_file_actions_addclose(&fa, 25);
    posix_spawn_file_actions_adddup2(&fa, data[0], 26);
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
    posix_spawnattr_setpgroup(&at, 0);
    sigset_t def, mask;
    sigemptyset(&def);
    sigaddset(&def, SIGUSR1);
    posix_spawnattr_setsigdefault(&at, &def);
    sigemptyset(&mask);
    sigaddset(&mask, SIGUSR2);
    posix_spawnattr_setsigmask(&at, &mask);
    char parent[32];
    snprintf(parent, sizeof parent, "DEJA_PARENT=%d", getpid());
    char *argv[] = {"spawned", "ids", NULL};
    char *env[] = {parent, NULL};
    pid_t c;
    int r = posix_spawn(&c, "/proc/self/exe", &fa, &at, argv, env);
    printf("posix_spawn: %d\n", r);
    close(p[1]);
    close(data[0]);
    char buf[1024];
    size_t got = 0;
    ssize_t n;
    while ((n = read(p[0], buf + got, sizeof buf - 1 - got)) > 0)
        got += n;
    printf("%.*s", (int)got, buf);
    reap("  it", c);
    close(p[0]);
    close(hidden);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    signal(SIGUSR1, SIG_DFL);

    r = posix_spawn(&c, "/deja/no/such/program", NULL, NULL, argv, env);
    printf("posix_spawn of a missing program: %s\n", r ? strerrorname_np(r) : "0");
    char *path_env[] = {"PATH=/deja/nowhere", NULL};
    char **saved = environ;
    environ = path_env;
    r = posix_spawnp(&c, "deja-no-such-program", NULL, NULL, argv, env);
    environ = saved;
    printf("posix_spawnp of a name on no PATH: %s\n", r ? strerrorname_np(r) : "0");
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 3, "/deja/no/such/file", O_RDONLY, 0);
    r = posix_spawn(&c, "/proc/self/exe", &fa, NULL, argv, env);
    printf("posix_spawn with an open that fails: %s\n", r ? strerrorname_np(r) : "0");
    posix_spawn_file_actions_destroy(&fa);
    show("no child left behind", waitpid(-1, NULL, WNOHANG));
}

static void groups(void) {
    puts("== process groups and sessions");
    pid_t pg = getpgrp(), sid = getsid(0);
    printf("getpgid(0) is getpgrp(): %d, getpgid(getpid()) too: %d\n", getpgid(0) == pg, getpgid(me) == pg);
    printf("getsid(0) is getsid(getpid()): %d\n", sid == getsid(me));
    show("getpgid of a pid that does not exist", getpgid(0x3ffffff0));
    show("getsid of a pid that does not exist", getsid(0x3ffffff0));
    show("getpgid(-1)", getpgid(-1));
    show("getsid(-1)", getsid(-1));

    int go[2], ready[2];
    make_pipe(go, 0);
    make_pipe(ready, 0);
    pid_t c = spawn();
    if (c == 0) {
        close(go[1]);
        close(ready[0]);
        printf("child: getppid is the parent %d, in the parent's group %d and session %d\n", getppid() == me,
               getpgrp() == pg, getsid(0) == sid);
        show("child: setpgid(0, 0)", setpgid(0, 0));
        printf("child: its group is its pid: %d\n", getpgrp() == getpid());
        show("child: setsid as a group leader", setsid());
        show("child: setpgid back to the parent's group", setpgid(0, pg));
        printf("child: back in it: %d\n", getpgrp() == pg);
        show("child: setpgid to a group that does not exist", setpgid(0, 0x3ffffff0));
        show("child: setpgid(-1, 0)", setpgid(-1, 0));
        show("child: setpgid(0, -1)", setpgid(0, -1));
        fflush(stdout);
        sync_write(ready[1]);
        sync_read(go[0]);
        _exit(0);
    }
    close(go[0]);
    close(ready[1]);
    sync_read(ready[0]);
    show("parent: setpgid(child, child)", setpgid(c, c));
    printf("parent: getpgid(child) is the child: %d\n", getpgid(c) == c);
    show("parent: setpgid(child, 0) again", setpgid(c, 0));
    show("parent: setpgid(child, our group)", setpgid(c, pg));
    close(go[1]);
    siginfo_t si;
    waitid(P_PID, c, &si, WEXITED | WNOWAIT);
    printf("getpgid of a zombie child is our group: %d\n", getpgid(c) == pg);
    show("kill(zombie, 0)", kill(c, 0));
    reap("  reaped", c);
    show("getpgid after it was reaped", getpgid(c));

    /* A session of its own. */
    make_pipe(go, 0);
    make_pipe(ready, 0);
    c = spawn();
    if (c == 0) {
        close(go[1]);
        close(ready[0]);
        pid_t s = setsid();
        printf("child: setsid gave its pid %d; session %d and group %d are its pid\n", s == getpid(),
               getsid(0) == getpid(), getpgrp() == getpid());
        printf("child: getppid still the parent: %d\n", getppid() == me);
        show("child: setsid again", setsid());
        show("child: setpgid(0, 0) as a session leader", setpgid(0, 0));
        show("child: setpgid into the old group", setpgid(0, pg));
        fflush(stdout);
        pid_t g = spawn();
        if (g == 0) {
            printf("grandchild: in the new session %d and group %d\n", getsid(0) == getppid(),
                   getpgrp() == getppid());
            show("grandchild: setsid", setsid() == getpid() ? 0 : -1);
            fflush(stdout);
            _exit(0);
        }
        reap("child: the grandchild", g);
        sync_write(ready[1]);
        sync_read(go[0]);
        _exit(0);
    }
    close(go[0]);
    close(ready[1]);
    sync_read(ready[0]);
    printf("parent: getsid(child) is the child: %d, getpgid(child) too: %d\n", getsid(c) == c, getpgid(c) == c);
    show("parent: setpgid of a child in another session", setpgid(c, c));
    show("parent: setpgid of it to our group", setpgid(c, pg));
    close(go[1]);
    reap("  it", c);

    /* setpgid of a child before and after its execve. */
    int exec_seen[2];
    make_pipe(go, 0);
    make_pipe(exec_seen, O_CLOEXEC);
    c = spawn();
    if (c == 0) {
        close(go[1]);
        close(exec_seen[0]);
        char b;
        read(go[0], &b, 1);
        dup2(go[0], 0);
        execve("/proc/self/exe", (char *[]){"block", "block", NULL}, (char *[]){NULL});
        _exit(127);
    }
    close(go[0]);
    close(exec_seen[1]);
    show("setpgid(child, child) before its execve", setpgid(c, c));
    sync_write(go[1]);
    printf("its execve closed the O_CLOEXEC pipe: %d\n", sync_read(exec_seen[0]));
    show("setpgid(child, child) after its execve", setpgid(c, c));
    printf("its group is its pid: %d\n", getpgid(c) == c);
    close(go[1]);
    reap("  it", c);
    close(exec_seen[0]);

    /* setpgid of a process that is not our child. */
    int gp[2];
    make_pipe(gp, 0);
    make_pipe(go, 0);
    c = spawn();
    if (c == 0) {
        pid_t g = spawn();
        if (g == 0) {
            close(go[1]);
            sync_read(go[0]);
            _exit(0);
        }
        write(gp[1], &g, sizeof g);
        close(go[0]);
        close(go[1]);
        waitpid(g, NULL, 0);
        _exit(0);
    }
    close(gp[1]);
    close(go[0]);
    pid_t g = 0;
    read(gp[0], &g, sizeof g);
    show("setpgid of a grandchild", setpgid(g, g));
    printf("getpgid of a grandchild is our group: %d\n", getpgid(g) == pg);
    close(go[1]);
    reap("  the child", c);
    close(gp[0]);
}

static volatile sig_atomic_t usr1_seen;

static void on_usr1(int sig) {
    (void)sig;
    usr1_seen++;
}

static void group_kill(void) {
    puts("== kill to a group");
    /* kill(0, sig) from the leader of a group of three. */
    pid_t leader = spawn();
    if (leader == 0) {
        setpgid(0, 0);
        sigset_t usr1, old;
        sigemptyset(&usr1);
        sigaddset(&usr1, SIGUSR1);
        sigprocmask(SIG_BLOCK, &usr1, &old);
        signal(SIGUSR1, on_usr1);
        int ready[2], hold[2];
        make_pipe(ready, 0);
        make_pipe(hold, 0);
        pid_t kids[2];
        for (int i = 0; i < 2; i++) {
            kids[i] = spawn();
            if (kids[i] == 0) {
                signal(SIGUSR1, SIG_DFL);
                sigprocmask(SIG_SETMASK, &old, NULL);
                sync_write(ready[1]);
                sync_read(hold[0]);
                _exit(0);
            }
        }
        close(ready[1]);
        close(hold[0]);
        sync_read(ready[0]);
        sync_read(ready[0]);
        printf("leader: its children are in its group: %d %d\n", getpgid(kids[0]) == getpid(),
               getpgid(kids[1]) == getpid());
        show("leader: kill(0, SIGUSR1)", kill(0, SIGUSR1));
        reap("leader: first child", kids[0]);
        reap("leader: second child", kids[1]);
        printf("leader: its handler ran before unblocking: %d\n", (int)usr1_seen);
        sigprocmask(SIG_SETMASK, &old, NULL);
        printf("leader: after unblocking: %d\n", (int)usr1_seen);
        fflush(stdout);
        _exit(0);
    }
    reap("the leader", leader);

    /* kill(-pgid, sig) from outside the group. */
    int ready[2], hold[2];
    make_pipe(ready, 0);
    make_pipe(hold, 0);
    pid_t a = spawn();
    if (a == 0) {
        setpgid(0, 0);
        sync_write(ready[1]);
        sync_read(hold[0]);
        _exit(0);
    }
    setpgid(a, a);
    pid_t b = spawn();
    if (b == 0) {
        setpgid(0, a);
        sync_write(ready[1]);
        sync_read(hold[0]);
        _exit(0);
    }
    setpgid(b, a);
    close(ready[1]);
    close(hold[0]);
    sync_read(ready[0]);
    sync_read(ready[0]);
    printf("the second child is in the first's group: %d\n", getpgid(b) == a);
    show("kill(-group, 0)", kill(-a, 0));
    show("kill(-group, SIGTERM)", kill(-a, SIGTERM));
    reap("  first", a);
    reap("  second", b);
    show("kill(-group, 0) once they are gone", kill(-a, 0));
    show("kill(a pid that does not exist, 0)", kill(0x3ffffff0, 0));
    show("kill(ourselves, 65)", kill(me, 65));
    close(ready[0]);
    close(hold[1]);
}

static volatile sig_atomic_t death_sig, death_code;

static void on_death(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    death_sig = sig;
    death_code = si->si_code;
}

static void pdeathsig(void) {
    puts("== PR_SET_PDEATHSIG");
    int sig = -1;
    prctl(PR_GET_PDEATHSIG, &sig);
    printf("ours: %d\n", sig);
    pid_t c = spawn();
    if (c == 0) {
        show("child: PR_SET_PDEATHSIG SIGUSR1", prctl(PR_SET_PDEATHSIG, SIGUSR1));
        prctl(PR_GET_PDEATHSIG, &sig);
        printf("child: PR_GET_PDEATHSIG: %d\n", sig);
        show("child: PR_SET_PDEATHSIG 65", prctl(PR_SET_PDEATHSIG, 65));
        fflush(stdout);
        pid_t g = spawn();
        if (g == 0) {
            sig = -1;
            prctl(PR_GET_PDEATHSIG, &sig);
            printf("grandchild: not inherited: %d\n", sig);
            fflush(stdout);
            _exit(0);
        }
        reap("child: the grandchild", g);
        execve("/proc/self/exe", (char *[]){"pdeath", "pdeath", NULL}, (char *[]){NULL});
        _exit(127);
    }
    reap("child", c);

    /* A grandchild whose parent ends: it gets its signal, and comes to us (the subreaper). */
    int report[2], ready[2];
    make_pipe(report, 0);
    make_pipe(ready, 0);
    pid_t gpid = 0;
    int gp[2];
    make_pipe(gp, 0);
    c = spawn();
    if (c == 0) {
        close(report[0]);
        pid_t middle = getpid();
        pid_t g = spawn();
        if (g == 0) {
            sigset_t usr1, old;
            sigemptyset(&usr1);
            sigaddset(&usr1, SIGUSR1);
            sigprocmask(SIG_BLOCK, &usr1, &old);
            struct sigaction sa = {0};
            sa.sa_sigaction = on_death;
            sa.sa_flags = SA_SIGINFO;
            sigaction(SIGUSR1, &sa, NULL);
            prctl(PR_SET_PDEATHSIG, SIGUSR1);
            int parent_then = getppid() == middle;
            sync_write(ready[1]);
            while (!death_sig)
                sigsuspend(&old);
            dprintf(report[1],
                    "grandchild: its parent was the middle process %d; got signal %d, si_code %d; "
                    "now getppid is the subreaper %d\n",
                    parent_then, death_sig, death_code, getppid() == me);
            _exit(17);
        }
        write(gp[1], &g, sizeof g);
        sync_read(ready[0]);
        _exit(0);
    }
    close(report[1]);
    close(ready[1]);
    close(ready[0]);
    close(gp[1]);
    read(gp[0], &gpid, sizeof gpid);
    close(gp[0]);
    reap("the middle process", c);
    char buf[512];
    size_t got = 0;
    ssize_t n;
    while ((n = read(report[0], buf + got, sizeof buf - 1 - got)) > 0)
        got += n;
    printf("%.*s", (int)got, buf);
    close(report[0]);
    reap("the orphan, reaped by us", gpid);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n < 0)
        die("readlink /proc/self/exe");
    self[n] = 0;
    if (argc > 1) {
        if (strcmp(argv[1], "report") == 0 && argc > 2)
            return mode_report(argc, argv);
        if (strcmp(argv[1], "fds") == 0)
            return mode_fds(argc, argv);
        if (strcmp(argv[1], "upper") == 0)
            return mode_upper();
        if (strcmp(argv[1], "say") == 0 && argc > 2)
            return mode_say(argv);
        if (strcmp(argv[1], "interp") == 0 || strncmp(argv[1], "interp ", 7) == 0 ||
            strncmp(argv[1], "/tmp/deja-procs-", 16) == 0 || getenv("DEJA_SCRIPT"))
            return mode_interp(argc, argv);
        if (strcmp(argv[1], "pdeath") == 0)
            return mode_pdeath();
        if (strcmp(argv[1], "state") == 0)
            return mode_state();
        if (strcmp(argv[1], "ids") == 0)
            return mode_ids();
        if (strcmp(argv[1], "block") == 0)
            return mode_block();
        printf("unknown mode %s\n", argv[1]);
        return 2;
    }
    me = getpid();
    /* Signals as a fresh program has them, whatever the one that started us left. */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int defaults[] = {SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGPIPE, SIGCHLD, SIGALRM};
    for (size_t i = 0; i < sizeof defaults / sizeof *defaults; i++)
        signal(defaults[i], SIG_DFL);
    /* No core files from the children that crash, whatever the host's settings. */
    struct rlimit core = {0, 0};
    setrlimit(RLIMIT_CORE, &core);
    /* Orphans come back to us natively, as they do to pid 1 under deja. */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    strcpy(base, "/tmp/deja-procs-XXXXXX");
    if (!mkdtemp(base))
        die("mkdtemp");
    exit_codes();
    killed();
    nohang();
    waitids();
    echild();
    sigchld();
    forks();
    pipes();
    exec_fds();
    exec_args();
    exec_state();
    exec_failures();
    scripts();
    vforks();
    spawns();
    groups();
    group_kill();
    pdeathsig();
    puts("== the end");
    show("wait: no child left", wait(NULL));
    show("rmdir base", rmdir(base));
    return 0;
}
