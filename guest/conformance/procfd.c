/* Conformance case: /proc/self/fd, and the routes netlink dumps.
 *
 * Without arguments it opens one fd of each kind (a file, both ends of a pipe, an IPv4 socket,
 * a Unix socket pair, an eventfd, an epoll instance, /dev/null, a directory), then reads
 * /proc/self/fd: its listing (readdir, and getdents64 a few entries at a time while fds close
 * and open), what readlink, lstat and stat say of each entry, what opening an entry again
 * gives, and /dev/fd, /dev/stdin and /dev/stdout. Every line it prints is the same under Linux
 * and under deja: fds it inherited are closed first (through /proc/self/fd, as daemons and
 * Python's subprocess do), paths are printed relative to its fresh directory under /tmp, inode
 * numbers only as equal or not to what fstat says, and fd 0 (/dev/null natively, a pipe under
 * deja) only as present.
 *
 * With `routes` it dumps the routing tables through a raw NETLINK_ROUTE socket and prints
 * each route as `ip route` would, with the attributes in the order they came, then finds the
 * default route's interface and that interface's IPv4 address as etcd's GetDefaultHost does.
 * A host's routes are its own: the test compares this with what deja's network gives a node. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static char base[64];

static void show(const char *what, long r) {
    if (r < 0)
        printf("%s: %s\n", what, strerrorname_np(errno));
    else
        printf("%s: %ld\n", what, r);
}

static void show_ok(const char *what, long r) {
    if (r < 0)
        printf("%s: %s\n", what, strerrorname_np(errno));
    else
        printf("%s: ok\n", what);
}

/* The link's text with the base directory as BASE and an inode in brackets as `=fstat` when
 * it is the st_ino fstat gives for fd (`!=fstat` otherwise). */
static void show_link(const char *what, const char *path, int fd) {
    char t[256];
    ssize_t n = readlink(path, t, sizeof t - 1);
    if (n < 0) {
        printf("%s: %s\n", what, strerrorname_np(errno));
        return;
    }
    t[n] = 0;
    size_t b = strlen(base);
    char *open_br = strchr(t, '[');
    struct stat st;
    if (strncmp(t, base, b) == 0) {
        printf("%s: BASE%s\n", what, t + b);
    } else if (open_br && isdigit((unsigned char)open_br[1]) && fd >= 0 && fstat(fd, &st) == 0) {
        unsigned long ino = strtoul(open_br + 1, NULL, 10);
        printf("%s: %.*s[%sfstat]\n", what, (int)(open_br - t), t, ino == st.st_ino ? "=" : "!=");
    } else {
        printf("%s: %s\n", what, t);
    }
}

static const char *kind(mode_t m) {
    switch (m & S_IFMT) {
    case S_IFREG: return "file";
    case S_IFDIR: return "directory";
    case S_IFIFO: return "fifo";
    case S_IFSOCK: return "socket";
    case S_IFCHR: return "char device";
    case S_IFLNK: return "link";
    case 0: return "anonymous";
    default: return "other";
    }
}

/* The listing of /proc/self/fd by readdir, on one line. */
static void list(const char *what) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) {
        printf("%s: opendir %s\n", what, strerrorname_np(errno));
        return;
    }
    printf("%s:", what);
    struct dirent *e;
    int dirs = 0, links = 0;
    while ((e = readdir(d))) {
        printf(" %s", e->d_name);
        dirs += e->d_type == DT_DIR;
        links += e->d_type == DT_LNK;
    }
    printf(" (%d directories, %d links; the listing's own fd %d)\n", dirs, links, dirfd(d));
    closedir(d);
}

/* Closes every fd above 2 but the listing's own, found through /proc/self/fd. */
static void close_inherited(void) {
    int fds[1024], n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d) {
        printf("opendir /proc/self/fd: %s\n", strerrorname_np(errno));
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)) && n < 1024) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] != '.' && fd > 2 && fd != dirfd(d))
            fds[n++] = fd;
    }
    closedir(d);
    for (int i = 0; i < n; i++)
        close(fds[i]);
    printf("inherited fds closed\n");
}

/* getdents64 of fd with a buffer of `room` bytes: the names, on one line. */
static int dents(const char *what, int fd, size_t room) {
    char buf[4096];
    long n = syscall(SYS_getdents64, fd, buf, room);
    if (n < 0) {
        printf("%s: %s\n", what, strerrorname_np(errno));
        return -1;
    }
    printf("%s:", what);
    for (long at = 0; at < n;) {
        struct dirent64 *e = (void *)(buf + at);
        printf(" %s", e->d_name);
        at += e->d_reclen;
    }
    printf("\n");
    return (int)n;
}

static void fds(void) {
    close_inherited();
    strcpy(base, "/tmp/conf-procfd-XXXXXX");
    if (!mkdtemp(base)) {
        perror("mkdtemp");
        exit(2);
    }
    char path[128], link[64];
    snprintf(path, sizeof path, "%s/f", base);
    int file = open(path, O_CREAT | O_RDWR, 0644);
    show("file", file);
    write(file, "hello", 5);
    int p[2];
    show_ok("pipe", pipe(p));
    printf("pipe ends: %d %d\n", p[0], p[1]);
    show("socket", socket(AF_INET, SOCK_STREAM, 0));
    int sp[2];
    show_ok("socketpair", socketpair(AF_UNIX, SOCK_STREAM, 0, sp));
    printf("pair: %d %d\n", sp[0], sp[1]);
    int null;
    show("eventfd", eventfd(0, 0));
    show("epoll", epoll_create1(0));
    show("/dev/null", null = open("/dev/null", O_WRONLY));
    int dir = open(base, O_RDONLY | O_DIRECTORY);
    show("directory", dir);
    int last = dir;

    list("listing");
    for (int fd = 0; fd <= last; fd++) {
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        char what[80];
        if (fd == 0) {
            char t[256];
            printf("readlink 0: %s\n", readlink(link, t, sizeof t) > 0 ? "present" : strerrorname_np(errno));
            continue;
        }
        snprintf(what, sizeof what, "readlink %d", fd);
        show_link(what, link, fd);
        struct stat l, s, f;
        if (lstat(link, &l) < 0) {
            printf("lstat %d: %s\n", fd, strerrorname_np(errno));
            continue;
        }
        printf("lstat %d: %s %04o size %ld nlink %ld\n", fd, kind(l.st_mode), l.st_mode & 07777, (long)l.st_size,
               (long)l.st_nlink);
        if (stat(link, &s) < 0) {
            printf("stat %d: %s\n", fd, strerrorname_np(errno));
            continue;
        }
        fstat(fd, &f);
        printf("stat %d: %s, %s fstat\n", fd, kind(s.st_mode),
               s.st_ino == f.st_ino && s.st_dev == f.st_dev && s.st_mode == f.st_mode ? "as" : "not as");
    }

    /* Opening an entry opens what it leads to again. */
    char buf[32] = {0};
    snprintf(link, sizeof link, "/proc/self/fd/%d", file);
    int again = open(link, O_RDONLY);
    show("reopen the file", again);
    show("read it", read(again, buf, sizeof buf - 1));
    printf("read: %s\n", buf);
    show("the first fd's offset", lseek(file, 0, SEEK_CUR));
    snprintf(link, sizeof link, "/proc/self/fd/%d", again);
    show_link("readlink of the new fd", link, again);
    close(again);
    snprintf(link, sizeof link, "/proc/self/fd/%d/f", dir);
    int through = open(link, O_RDONLY);
    show("open f through the directory's entry", through);
    close(through);
    snprintf(link, sizeof link, "/proc/self/fd/%d/", file);
    show_ok("a file's entry as a directory", open(link, O_RDONLY));
    snprintf(link, sizeof link, "/proc/self/fd/%d", p[0]);
    int writer = open(link, O_WRONLY);
    show("the pipe's read end opened for writing", writer);
    show("write through it", write(writer, "through", 7));
    memset(buf, 0, sizeof buf);
    show("read from the read end", read(p[0], buf, sizeof buf - 1));
    printf("read: %s\n", buf);
    close(writer);
    for (int fd = p[1]; fd <= last; fd++) {
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        int r = open(link, fd == p[1] || fd == null ? O_WRONLY : O_RDONLY);
        printf("open entry %d: %s\n", fd, r >= 0 ? "ok" : strerrorname_np(errno));
        if (r >= 0)
            close(r);
    }
    snprintf(link, sizeof link, "/proc/self/fd/%d", file);
    show_ok("open with O_NOFOLLOW", open(link, O_RDONLY | O_NOFOLLOW));
    show_ok("open with O_CREAT | O_EXCL", open(link, O_RDWR | O_CREAT | O_EXCL, 0644));

    /* Renamed, unlinked: the entry follows the file. */
    char other[128];
    snprintf(other, sizeof other, "%s/g", base);
    rename(path, other);
    show_link("readlink after rename", link, file);
    rename(other, path);
    unlink(path);
    show_link("readlink after unlink", link, file);
    again = open(link, O_RDONLY);
    memset(buf, 0, sizeof buf);
    show("read the unlinked file through it", read(again, buf, sizeof buf - 1));
    close(again);

    /* A closed fd's entry is gone; so are names that are not fds. */
    close(sp[1]);
    snprintf(link, sizeof link, "/proc/self/fd/%d", sp[1]);
    struct stat st;
    show_ok("stat a closed fd's entry", stat(link, &st));
    show_ok("lstat it", lstat(link, &st));
    char t[64];
    show_ok("readlink it", readlink(link, t, sizeof t));
    show_ok("open it", open(link, O_RDONLY));
    show_ok("stat /proc/self/fd/03", stat("/proc/self/fd/03", &st));
    show_ok("stat /proc/self/fd/x", stat("/proc/self/fd/x", &st));

    /* getdents64 reads the table as it is at each call. */
    int d = open("/proc/self/fd", O_RDONLY | O_DIRECTORY);
    show("open /proc/self/fd", d);
    dents("first 6", d, 6 * 24);
    close(3);
    close(5);
    show("a new file takes fd", open(base, O_RDONLY | O_DIRECTORY));
    dents("the rest", d, 4096);
    show("opened after the listing ended", open(base, O_RDONLY | O_DIRECTORY));
    dents("at the end", d, 4096);
    lseek(d, 0, SEEK_SET);
    dents("rewound, no room", d, 8);
    dents("rewound", d, 4096);
    close(d);
    list("listing now");

    /* /dev/fd and the standard streams' links. */
    show_link("readlink /dev/fd", "/dev/fd", -1);
    show_link("readlink /dev/stdin", "/dev/stdin", -1);
    int out = open("/dev/stdout", O_WRONLY);
    show("open /dev/stdout", out);
    write(out, "written to /dev/stdout\n", 23);
    snprintf(link, sizeof link, "/dev/fd/%d", dir);
    show_ok("stat /dev/fd/DIR", stat(link, &st));
    printf("it is a %s\n", kind(st.st_mode));
    rmdir(base);
}

static const char *table(unsigned t) {
    return t == RT_TABLE_MAIN ? "main" : t == RT_TABLE_LOCAL ? "local" : "other";
}

static const char *rtype(unsigned t) {
    return t == RTN_UNICAST ? "unicast" : t == RTN_LOCAL ? "local" : t == RTN_BROADCAST ? "broadcast" : "other";
}

/* Sends a dump request of `type` for `family` and prints each message `each` gives a line for;
 * returns the interface of the IPv4 main table's default route (0: none) for routes, and for
 * addresses prints the IPv4 address of interface `oif`. */
static unsigned dump(int fd, int type, int family, unsigned oif) {
    struct {
        struct nlmsghdr h;
        struct rtgenmsg g;
    } req = {{NLMSG_LENGTH(sizeof(struct rtgenmsg)), type, NLM_F_REQUEST | NLM_F_DUMP, 1, 0}, {family}};
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    if (sendto(fd, &req, req.h.nlmsg_len, 0, (struct sockaddr *)&kernel, sizeof kernel) < 0) {
        printf("send: %s\n", strerrorname_np(errno));
        return 0;
    }
    unsigned found = 0;
    static char buf[65536];
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n <= 0) {
            printf("recv: %s\n", n < 0 ? strerrorname_np(errno) : "end");
            return found;
        }
        for (struct nlmsghdr *h = (void *)buf; NLMSG_OK(h, n); h = NLMSG_NEXT(h, n)) {
            if (h->nlmsg_type == NLMSG_DONE)
                return found;
            if (h->nlmsg_type == NLMSG_ERROR) {
                struct nlmsgerr *e = NLMSG_DATA(h);
                printf("error: %s\n", strerrorname_np(-e->error));
                return found;
            }
            if (h->nlmsg_type == RTM_NEWADDR) {
                struct ifaddrmsg *a = NLMSG_DATA(h);
                int len = IFA_PAYLOAD(h);
                for (struct rtattr *r = IFA_RTA(a); RTA_OK(r, len); r = RTA_NEXT(r, len)) {
                    char s[INET6_ADDRSTRLEN];
                    if (a->ifa_index == oif && r->rta_type == IFA_ADDRESS && !found) {
                        printf("default host: %s\n", inet_ntop(a->ifa_family, RTA_DATA(r), s, sizeof s));
                        found = 1;
                    }
                }
                continue;
            }
            if (h->nlmsg_type != RTM_NEWROUTE) {
                printf("message type %d\n", h->nlmsg_type);
                continue;
            }
            struct rtmsg *m = NLMSG_DATA(h);
            char line[512], s[INET6_ADDRSTRLEN], attrs[64] = "";
            int at = snprintf(line, sizeof line, "%s %s %s", m->rtm_family == AF_INET ? "inet" : "inet6",
                              table(m->rtm_table), rtype(m->rtm_type));
            if (m->rtm_dst_len == 0)
                at += snprintf(line + at, sizeof line - at, " default");
            unsigned route_oif = 0, tableattr = 0;
            int len = RTM_PAYLOAD(h);
            for (struct rtattr *r = RTM_RTA(m); RTA_OK(r, len); r = RTA_NEXT(r, len)) {
                snprintf(attrs + strlen(attrs), sizeof attrs - strlen(attrs), "%s%d", attrs[0] ? "," : "",
                         r->rta_type);
                switch (r->rta_type) {
                case RTA_DST:
                    at += snprintf(line + at, sizeof line - at, " %s/%d",
                                   inet_ntop(m->rtm_family, RTA_DATA(r), s, sizeof s), m->rtm_dst_len);
                    break;
                case RTA_GATEWAY:
                    at += snprintf(line + at, sizeof line - at, " via %s",
                                   inet_ntop(m->rtm_family, RTA_DATA(r), s, sizeof s));
                    break;
                case RTA_OIF:
                    route_oif = *(unsigned *)RTA_DATA(r);
                    at += snprintf(line + at, sizeof line - at, " dev %u", route_oif);
                    break;
                case RTA_PREFSRC:
                    at += snprintf(line + at, sizeof line - at, " src %s",
                                   inet_ntop(m->rtm_family, RTA_DATA(r), s, sizeof s));
                    break;
                case RTA_PRIORITY:
                    at += snprintf(line + at, sizeof line - at, " metric %u", *(unsigned *)RTA_DATA(r));
                    break;
                case RTA_TABLE:
                    tableattr = *(unsigned *)RTA_DATA(r);
                    break;
                }
            }
            printf("%s proto %d scope %d table %u attrs %s multi %d\n", line, m->rtm_protocol, m->rtm_scope,
                   tableattr, attrs, !!(h->nlmsg_flags & NLM_F_MULTI));
            if (m->rtm_family == AF_INET && m->rtm_dst_len == 0 && m->rtm_table == RT_TABLE_MAIN)
                found = route_oif;
        }
    }
}

static void routes(void) {
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    show_ok("netlink socket", fd);
    unsigned oif = dump(fd, RTM_GETROUTE, AF_UNSPEC, 0);
    printf("default route's interface: %u\n", oif);
    if (oif && !dump(fd, RTM_GETADDR, AF_INET, oif))
        printf("default host: none\n");
    printf("IPv4 only:\n");
    dump(fd, RTM_GETROUTE, AF_INET, 0);
    struct {
        struct nlmsghdr h;
        struct rtmsg m;
    } one = {{sizeof one, RTM_GETROUTE, NLM_F_REQUEST, 2, 0}, {.rtm_family = AF_INET}};
    send(fd, &one, sizeof one, 0);
    char buf[256];
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    struct nlmsghdr *h = (void *)buf;
    if (n > 0 && h->nlmsg_type == NLMSG_ERROR)
        printf("one route: error %s\n", strerrorname_np(-((struct nlmsgerr *)NLMSG_DATA(h))->error));
    else
        printf("one route: type %d\n", n > 0 ? h->nlmsg_type : -1);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc > 1 && strcmp(argv[1], "routes") == 0)
        routes();
    else
        fds();
    return 0;
}
