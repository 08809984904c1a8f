/* Conformance case: permission bits and /dev's memory devices. Every line it prints is the same
 * under Linux and under deja, for a program that is not privileged: run natively as root, it
 * first becomes uid and gid 1000 (under deja it already is). Opens for reading, writing and
 * truncating a file without the bit each needs (EACCES), what access() says of each bit, a file
 * created with mode 0 (written through the descriptor that made it, refused when opened
 * again); a directory without write permission (create, unlink, rename, mkdir, link, symlink:
 * EACCES), one without search permission (names in it cannot be reached, chdir refused, its
 * listing still read), one with search permission only (its names reached, its listing not);
 * a socket's name without write permission (connect: EACCES);
 * setuid and its kin to the program's own ids and to root, setgroups;
 * /dev/zero and /dev/full read, written, seeked, stat'ed and /dev/zero mapped. It works in a
 * fresh directory under /tmp and prints nothing of its name. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/fsuid.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "case.h"

static void show_open(const char *what, const char *path, int flags) {
    int fd = open(path, flags);
    show(what, fd < 0 ? -1 : 0);
    if (fd >= 0) close(fd);
}

static void show_access(const char *path) {
    printf("access %s: F %s, R %s, W %s, X %s\n", path, access(path, F_OK) ? strerrorname_np(errno) : "ok",
           access(path, R_OK) ? strerrorname_np(errno) : "ok", access(path, W_OK) ? strerrorname_np(errno) : "ok",
           access(path, X_OK) ? strerrorname_np(errno) : "ok");
}

static int entries(const char *path) {
    DIR *d = opendir(path);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (getuid() == 0 && (setgid(1000) < 0 || setuid(1000) < 0)) {
        perror("setuid");
        return 1;
    }
    umask(022);

    /* ids: a program without privileges keeps its own */
    show("setuid to its own uid", setuid(1000));
    show("setuid to root", setuid(0));
    show("setuid(-1)", setuid(-1));
    show("setgid to its own gid", setgid(1000));
    show("setreuid(-1, own)", setreuid(-1, 1000));
    show("setresuid(own, -1, root)", setresuid(1000, -1, 0));
    show("setresgid(-1, -1, -1)", setresgid(-1, -1, -1));
    show("setgroups", setgroups(0, NULL));
    show("setfsuid to root gives the one before", setfsuid(0));
    show("and it stayed", setfsuid(-1));
    char base[] = "/tmp/conf-perms-XXXXXX";
    if (!mkdtemp(base) || chdir(base) < 0) {
        perror("mkdtemp");
        return 1;
    }

    /* a file */
    int fd = open("f", O_WRONLY | O_CREAT, 0644);
    write(fd, "data", 4);
    close(fd);
    chmod("f", 0444);
    show_open("read-only file, O_RDONLY", "f", O_RDONLY);
    show_open("read-only file, O_WRONLY", "f", O_WRONLY);
    show_open("read-only file, O_RDWR", "f", O_RDWR);
    show_open("read-only file, O_RDONLY | O_TRUNC", "f", O_RDONLY | O_TRUNC);
    show_open("read-only file, O_PATH", "f", O_PATH);
    show("truncate a read-only file", truncate("f", 0));
    show("truncate it to a negative length", truncate("f", -1));
    show_access("f");
    chmod("f", 0200);
    show_open("write-only file, O_RDONLY", "f", O_RDONLY);
    show_open("write-only file, O_WRONLY", "f", O_WRONLY);
    show_access("f");
    chmod("f", 0100);
    show_access("f");
    chmod("f", 0);
    struct stat st;
    show("stat of a mode-0 file", stat("f", &st));
    printf("its mode: %o\n", st.st_mode & 07777);
    fd = open("new", O_RDWR | O_CREAT | O_EXCL, 0);
    show("create with mode 0", fd < 0 ? -1 : 0);
    show("write through it", write(fd, "abc", 3));
    show("read through it", pread(fd, (char[8]){0}, 8, 0));
    close(fd);
    show_open("open it again", "new", O_RDONLY);
    show("unlink it", unlink("new"));

    /* a socket's name without write permission */
    int srv = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    strcpy(sa.sun_path, "sock");
    bind(srv, (struct sockaddr *)&sa, sizeof sa);
    listen(srv, 1);
    chmod("sock", 0555);
    int cl = socket(AF_UNIX, SOCK_STREAM, 0);
    show("connect to a socket without write permission", connect(cl, (struct sockaddr *)&sa, sizeof sa));
    chmod("sock", 0755);
    show("connect once writable", connect(cl, (struct sockaddr *)&sa, sizeof sa));
    close(cl);
    close(srv);
    unlink("sock");

    /* a directory without write permission */
    mkdir("d", 0755);
    close(open("d/f", O_WRONLY | O_CREAT, 0644));
    chmod("d", 0555);
    show_open("create in a read-only directory", "d/g", O_WRONLY | O_CREAT);
    show_open("open a file in it for writing", "d/f", O_WRONLY);
    show("unlink in it", unlink("d/f"));
    show("rename in it", rename("d/f", "d/h"));
    show("rename out of it", rename("d/f", "moved"));
    show("rename into it", rename("f", "d/f2"));
    show("mkdir in it", mkdir("d/sub", 0755));
    show("link into it", link("f", "d/l"));
    show("symlink in it", symlink("f", "d/s"));
    show("mkfifo in it", mkfifo("d/p", 0644));
    show_access("d");

    /* a directory without write permission moving to another parent */
    mkdir("a", 0755);
    mkdir("b", 0755);
    mkdir("a/m", 0555);
    show("rename a read-only directory to another parent", rename("a/m", "b/m"));
    show("rename it within its parent", rename("a/m", "a/n"));
    rmdir("a/n");
    rmdir("a");
    rmdir("b");

    /* a directory without search permission */
    chmod("d", 0644);
    show("stat of a name in it", stat("d/f", &st));
    show_open("open of a name in it", "d/f", O_RDONLY);
    show("chdir into it", chdir("d"));
    show("its listing", entries("d"));
    show("stat of it", stat("d", &st));
    show_access("d");

    /* search permission only */
    chmod("d", 0111);
    show("stat of a name in it", stat("d/f", &st));
    show_open("open of a name in it", "d/f", O_RDONLY);
    show("its listing", entries("d"));
    show("chdir into it and back", chdir("d") == 0 && chdir("..") == 0 ? 0 : -1);
    chmod("d", 0755);
    show("unlink once writable", unlink("d/f"));
    show("rmdir", rmdir("d"));
    show("unlink of a mode-0 file", unlink("f"));

    /* /dev/zero and /dev/full */
    char buf[8];
    memset(buf, 'x', sizeof buf);
    fd = open("/dev/zero", O_RDWR);
    show("read /dev/zero", read(fd, buf, sizeof buf));
    printf("zeros: %d\n", buf[0] == 0 && buf[7] == 0);
    show("write /dev/zero", write(fd, "abc", 3));
    show("lseek /dev/zero", lseek(fd, 100, SEEK_SET));
    char *m = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    show("mmap /dev/zero", m == MAP_FAILED ? -1 : 0);
    if (m != MAP_FAILED) {
        printf("mapped: %d, ", m[0] + m[8191]);
        m[100] = 7;
        printf("written: %d\n", m[100]);
    }
    fstat(fd, &st);
    printf("/dev/zero: char %d, rdev %u:%u, mode %o\n", S_ISCHR(st.st_mode), major(st.st_rdev), minor(st.st_rdev),
           st.st_mode & 0777);
    close(fd);
    fd = open("/dev/full", O_RDWR);
    show("write /dev/full", write(fd, "abc", 3));
    memset(buf, 'x', sizeof buf);
    show("read /dev/full", read(fd, buf, sizeof buf));
    printf("zeros: %d\n", buf[0] == 0 && buf[7] == 0);
    stat("/dev/full", &st);
    printf("/dev/full: char %d, rdev %u:%u\n", S_ISCHR(st.st_mode), major(st.st_rdev), minor(st.st_rdev));
    chdir("/");
    rmdir(base);
    return 0;
}
