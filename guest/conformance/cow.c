/* Conformance case: what fork copies, as copy-on-write makes it.
 *
 * A process with 560 MiB of private memory it wrote forks (more than half of deja's default
 * 1 GiB of guest memory: a fork that copied every page at once would fail), and the two write
 * into it side by side; each sees its own writes and none of the other's. Then, on smaller
 * mappings: the kernel writing a child's private page (read from a pipe), a page made
 * read-only and writable again after the fork, a write to a read-only page (still SIGSEGV),
 * a private file mapping written by the child, an anonymous shared mapping (still shared),
 * and a fork of a fork. What it prints is the same under Linux and under deja. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "case.h"

#define PAGE 4096UL
#ifndef BIG_MIB
#define BIG_MIB 560UL
#endif
#define BIG_PAGES (BIG_MIB * 256UL)
/* Every STRIDE-th page is written after the fork: by the child at offset 0, by the parent
 * at offset HALF. */
#ifndef STRIDE
#define STRIDE 128UL
#endif
#define HALF (STRIDE / 2)

/* Waits for `pid` and prints how it ended. */
static void reap(const char *what, pid_t pid) {
    int st = 0;
    if (waitpid(pid, &st, 0) != pid)
        printf("%s: waitpid: %s\n", what, strerrorname_np(errno));
    else if (WIFEXITED(st))
        printf("%s: exit %d\n", what, WEXITSTATUS(st));
    else if (WIFSIGNALED(st))
        printf("%s: killed by %s\n", what, sigabbrev_np(WTERMSIG(st)));
}

/* The word written at the start of page `i` before the fork. */
static uint64_t before(unsigned long i) {
    return 0x5eed0000000000ULL + i;
}

static void big(void) {
    size_t len = BIG_PAGES * PAGE;
    uint64_t *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        printf("big: mmap: %s\n", strerrorname_np(errno));
        return;
    }
    for (unsigned long i = 0; i < BIG_PAGES; i++)
        m[i * PAGE / 8] = before(i);
    pid_t pid = fork();
    if (pid < 0) {
        printf("big: fork with %lu MiB written: %s\n", BIG_MIB, strerrorname_np(errno));
        return;
    }
    if (pid == 0) {
        /* The child writes every STRIDE-th page, then checks every page. */
        for (unsigned long i = 0; i < BIG_PAGES; i += STRIDE)
            m[i * PAGE / 8] = ~before(i);
        unsigned long wrong = 0;
        for (unsigned long i = 0; i < BIG_PAGES; i++) {
            uint64_t want = i % STRIDE == 0 ? ~before(i) : before(i);
            if (m[i * PAGE / 8] != want)
                wrong++;
        }
        _exit(wrong == 0 ? 0 : 1);
    }
    printf("big: fork with %lu MiB written: ok\n", BIG_MIB);
    for (unsigned long i = HALF; i < BIG_PAGES; i += STRIDE)
        m[i * PAGE / 8] = 0;
    reap("big: the child saw its own writes and the memory as at the fork (0: yes)", pid);
    unsigned long wrong = 0;
    for (unsigned long i = 0; i < BIG_PAGES; i++) {
        uint64_t want = i % STRIDE == HALF ? 0 : before(i);
        if (m[i * PAGE / 8] != want)
            wrong++;
    }
    printf("big: pages of the parent the child changed: %lu\n", wrong);
    munmap(m, len);
}

static void small(void) {
    char *priv = mmap(NULL, 4 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *shared = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    strcpy(priv, "parent's buffer");
    strcpy(priv + PAGE, "parent's page");
    strcpy(priv + 2 * PAGE, "read-only");
    mprotect(priv + 2 * PAGE, PAGE, PROT_READ);
    strcpy(shared, "before");

    char path[] = "/tmp/cow-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0 || write(fd, "file as written", 16) != 16) {
        printf("file: %s\n", strerrorname_np(errno));
        return;
    }
    char *file = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);

    int p[2];
    if (pipe(p) != 0)
        return;
    pid_t pid = fork();
    if (pid < 0) {
        printf("small: fork: %s\n", strerrorname_np(errno));
        return;
    }
    if (pid == 0) {
        /* The kernel writes into the child's copy. */
        if (write(p[1], "from the pipe", 14) != 14 || read(p[0], priv, 14) != 14)
            _exit(2);
        /* Read-only and back after the fork, then written. */
        mprotect(priv + PAGE, PAGE, PROT_READ);
        mprotect(priv + PAGE, PAGE, PROT_READ | PROT_WRITE);
        strcpy(priv + PAGE, "child's page");
        strcpy(file, "child's mapping");
        strcpy(shared, "child");
        pid_t grand = fork();
        if (grand == 0) {
            strcpy(priv + PAGE, "grandchild's");
            strcpy(shared, "grandchild");
            _exit(strcmp(priv, "from the pipe") == 0 ? 0 : 3);
        }
        int st = 0;
        waitpid(grand, &st, 0);
        int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0 && strcmp(priv + PAGE, "child's page") == 0;
        printf("child: its buffer \"%s\", its page \"%s\", the grandchild %s\n", priv, priv + PAGE,
               ok ? "kept to its own" : "reached ours");
        fflush(stdout);
        /* A page read-only since before the fork stays read-only. */
        priv[2 * PAGE] = 'X';
        _exit(4);
    }
    reap("small: the child", pid);
    printf("parent: its buffer \"%s\", its page \"%s\", its read-only page \"%s\"\n", priv, priv + PAGE,
           priv + 2 * PAGE);
    printf("parent: the private file mapping \"%s\"\n", file);
    char back[32] = {0};
    pread(fd, back, 16, 0);
    printf("parent: the file \"%s\"\n", back);
    printf("parent: the shared mapping \"%s\"\n", shared);
    unlink(path);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    big();
    small();
    return 0;
}
