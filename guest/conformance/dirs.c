/* Conformance case: working directories. Every line it prints is the same under Linux and
 * under deja: chdir, fchdir and getcwd, relative paths and AT_FDCWD resolving from the
 * working directory, their errors, and a working directory that is removed. It works in a
 * fresh directory under /tmp and prints nothing of its name. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char base[64];

static void show(const char *what, int r) {
    if (r < 0)
        printf("%s: %s\n", what, strerrorname_np(errno));
    else
        printf("%s: ok\n", what);
}

/* The working directory relative to the base, or the error getcwd gave. */
static void where(void) {
    char buf[256];
    if (!getcwd(buf, sizeof buf)) {
        printf("getcwd: %s\n", strerrorname_np(errno));
        return;
    }
    size_t n = strlen(base);
    printf("getcwd: BASE%s\n", strncmp(buf, base, n) == 0 ? buf + n : " (outside)");
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    strcpy(base, "/tmp/conf-dirs-XXXXXX");
    if (!mkdtemp(base)) {
        perror("mkdtemp");
        return 2;
    }
    show("chdir base", chdir(base));
    where();
    show("mkdir a", mkdir("a", 0755));
    show("chdir a", chdir("a"));
    where();
    int fd = open("f", O_CREAT | O_WRONLY, 0644);
    show("create a/f relatively", fd);
    write(fd, "relative\n", 9);
    close(fd);
    char buf[32] = {0};
    fd = openat(AT_FDCWD, "../a/f", O_RDONLY);
    show("openat AT_FDCWD ../a/f", fd);
    read(fd, buf, sizeof buf - 1);
    printf("read back: %s", buf);
    close(fd);
    struct stat st;
    show("stat .", stat(".", &st));
    printf(". is a directory: %d\n", S_ISDIR(st.st_mode));
    int up = open("..", O_RDONLY | O_DIRECTORY);
    show("fchdir ..", fchdir(up));
    where();
    show("access a/f", access("a/f", R_OK));
    show("fchdir to a file", fchdir(open("a/f", O_RDONLY)));
    show("chdir nope", chdir("nope"));
    show("chdir a/f", chdir("a/f"));
    show("chdir a/f/", chdir("a/f/"));
    char small[4];
    printf("getcwd into 4 bytes: %s\n", getcwd(small, sizeof small) ? "ok" : strerrorname_np(errno));
    /* A working directory that is removed. */
    show("mkdir gone", mkdir("gone", 0755));
    show("chdir gone", chdir("gone"));
    show("rmdir ../gone", rmdir("../gone"));
    where();
    show("create in a removed directory", open("x", O_CREAT | O_WRONLY, 0644));
    show("chdir base", chdir(base));
    where();
    show("unlink a/f", unlink("a/f"));
    show("rmdir a", rmdir("a"));
    show("chdir /", chdir("/"));
    where();
    show("rmdir base", rmdir(base));
    return 0;
}
