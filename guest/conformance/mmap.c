/* Shared file mappings follow their file, as Linux's page cache makes them: a read-only
 * MAP_SHARED mapping sees every later write, growth and truncation of the file, through any
 * descriptor; a mapping far larger than the file (bbolt maps its database with room for 10 GiB)
 * costs only the file's pages. */
#define _GNU_SOURCE
#include "case.h"
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>

static void fill(int fd, char c, off_t at) {
    char b[4096];
    memset(b, c, sizeof b);
    show("pwrite", pwrite(fd, b, sizeof b, at));
}

int main(void) {
    int fd = open("/tmp/mmap-case", O_RDWR | O_CREAT | O_TRUNC, 0600);
    show("open", fd >= 0 ? 0 : -1);
    fill(fd, 'A', 0);
    char *p = mmap(NULL, 1 << 20, PROT_READ, MAP_SHARED, fd, 0);
    show("mmap 1 MiB of a 4 KiB file", p == MAP_FAILED ? -1 : 0);
    char *q = mmap(NULL, 8192, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
    show("a second mapping", q == MAP_FAILED ? -1 : 0);
    printf("first byte: %c\n", p[0]);
    fill(fd, 'B', 0);
    printf("after a pwrite over it: %c %c\n", p[0], q[4095]);
    fill(fd, 'C', 4096);
    printf("after the file grew: %c %c\n", p[4096], q[4096]);
    int other = open("/tmp/mmap-case", O_WRONLY | O_APPEND);
    show("write through another descriptor", write(other, "DDDD", 4));
    printf("appended: %c%c%c%c then %d\n", p[8192], p[8193], p[8194], p[8195], p[8196]);
    show("ftruncate to 16 KiB", ftruncate(fd, 16384));
    printf("the grown part reads zero: %d %d\n", p[12288], p[16383]);
    show("ftruncate to 4 KiB", ftruncate(fd, 4096));
    show("ftruncate to 8 KiB", ftruncate(fd, 8192));
    printf("what was cut is gone: %d, the rest stays: %c\n", p[4096], p[100]);
    show("unlink while mapped", unlink("/tmp/mmap-case"));
    fill(fd, 'E', 0);
    printf("an unlinked file's mapping still follows it: %c\n", p[0]);
    char *big = mmap(NULL, 16UL << 30, PROT_READ, MAP_SHARED, fd, 0);
    show("mmap 16 GiB of it", big == MAP_FAILED ? -1 : 0);
    printf("its first byte: %c\n", big[0]);
    fill(fd, 'F', 4096);
    printf("and it follows too: %c\n", big[4096]);
    show("munmap the 16 GiB", munmap(big, 16UL << 30));
    show("a writable shared mapping of a read-only descriptor",
         (long)(mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, open("/proc/self/maps", O_RDONLY), 0) ==
                        MAP_FAILED
                    ? -1
                    : 0));
    return 0;
}
