/* Conformance case: IPv6 loopback and dual-stack sockets, and the interfaces a program sees
 * through netlink. Every line it prints is the same under Linux and under deja: TCP and UDP
 * over ::1, the names each side sees, a dual-stack listener on :: taking an IPv4 client (seen
 * as ::ffff:127.0.0.1), IPV6_V6ONLY and the binds it lets clash or not, the errors of each
 * misuse; then getifaddrs and a raw RTM_GETADDR dump, of which it prints only the loopback
 * interface (the host's other interfaces are its own), and the errors of netlink misuse.
 * It prints no port a kernel chose and no process id. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netpacket/packet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "case.h"

/* Fixed ports, high enough not to be anyone's natively. */
#define P1 47311
#define P2 47312
#define P3 47313
#define P4 47314

static struct sockaddr_in6 six(const char *ip, int port) {
    struct sockaddr_in6 a;
    memset(&a, 0, sizeof a);
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(port);
    inet_pton(AF_INET6, ip, &a.sin6_addr);
    return a;
}

static struct sockaddr_in four(const char *ip, int port) {
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    inet_pton(AF_INET, ip, &a.sin_addr);
    return a;
}

/* `what: family address port?` of a name a call returned. */
static void name(const char *what, struct sockaddr_storage *s, socklen_t len, int port_known) {
    char ip[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (s->ss_family == AF_INET6) {
        struct sockaddr_in6 *a = (void *)s;
        inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip);
        port = ntohs(a->sin6_port);
    } else if (s->ss_family == AF_INET) {
        struct sockaddr_in *a = (void *)s;
        inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
        port = ntohs(a->sin_port);
    }
    if (port_known)
        printf("%s: family %d len %u %s port %d\n", what, s->ss_family, len, ip, port);
    else
        printf("%s: family %d len %u %s port %s\n", what, s->ss_family, len, ip, port ? "set" : "0");
}

/* A TCP socket whose binds a connection of an earlier run in TIME_WAIT does not stop. */
static int tcp(int family) {
    int fd = socket(family, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    return fd;
}

static int opt(int fd, int level, int o) {
    int v = -1;
    socklen_t l = sizeof v;
    if (getsockopt(fd, level, o, &v, &l) < 0)
        return -errno;
    return v;
}

static void tcp_loopback(void) {
    int l = tcp(AF_INET6);
    show("v6 socket", l >= 0);
    show("SO_DOMAIN", opt(l, SOL_SOCKET, SO_DOMAIN));
    show("IPV6_V6ONLY default", opt(l, IPPROTO_IPV6, IPV6_V6ONLY));
    struct sockaddr_in6 a = six("::1", P1);
    show("bind [::1]", bind(l, (void *)&a, sizeof a));
    show("listen", listen(l, 4));
    struct sockaddr_storage s;
    socklen_t len = sizeof s;
    show("getsockname", getsockname(l, (void *)&s, &len));
    name("listener", &s, len, 1);
    int c = socket(AF_INET6, SOCK_STREAM, 0);
    show("connect [::1]", connect(c, (void *)&a, sizeof a));
    len = sizeof s;
    int sv = accept(l, (void *)&s, &len);
    show("accept", sv >= 0);
    name("accepted peer", &s, len, 0);
    len = sizeof s;
    getsockname(c, (void *)&s, &len);
    name("client name", &s, len, 0);
    len = sizeof s;
    getpeername(c, (void *)&s, &len);
    name("client peer", &s, len, 1);
    show("send", send(c, "hello", 5, 0));
    char b[16] = {0};
    show("recv", recv(sv, b, sizeof b, 0));
    printf("got: %s\n", b);
    /* A short name is truncated; the length says how long it is. */
    len = 8;
    getsockname(sv, (void *)&s, &len);
    printf("truncated name length: %u\n", len);
    close(c);
    close(sv);
    struct sockaddr_in6 none = six("::1", P4);
    c = socket(AF_INET6, SOCK_STREAM, 0);
    show("connect to nobody", connect(c, (void *)&none, sizeof none));
    close(c);
    close(l);
}

/* A connection closed with bytes its program never read is reset: the peer's next send says
 * ECONNRESET, the one after EPIPE. */
static void reset_on_unread(void) {
    int l = tcp(AF_INET6);
    struct sockaddr_in6 a = six("::1", P1);
    bind(l, (void *)&a, sizeof a);
    listen(l, 4);
    int c = socket(AF_INET6, SOCK_STREAM, 0);
    connect(c, (void *)&a, sizeof a);
    int sv = accept(l, NULL, NULL);
    show("send what the server will not read", send(c, "unread", 6, MSG_NOSIGNAL));
    char b[8];
    show("the server reads nothing, closes", close(sv));
    struct timespec ms = {0, 10000000};
    nanosleep(&ms, NULL);
    show("send after the reset", send(c, "more", 4, MSG_NOSIGNAL));
    show("send again", send(c, "more", 4, MSG_NOSIGNAL));
    show("recv", recv(c, b, sizeof b, 0));
    close(c);
    close(l);
}

static void dual_stack(void) {
    int l = tcp(AF_INET6);
    struct sockaddr_in6 any = six("::", P2);
    show("bind [::] dual", bind(l, (void *)&any, sizeof any));
    show("listen", listen(l, 4));
    int v4 = tcp(AF_INET);
    struct sockaddr_in a4 = four("0.0.0.0", P2);
    show("bind 0.0.0.0 beside it", bind(v4, (void *)&a4, sizeof a4));
    close(v4);
    int c = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in lo4 = four("127.0.0.1", P2);
    show("connect 127.0.0.1", connect(c, (void *)&lo4, sizeof lo4));
    struct sockaddr_storage s;
    socklen_t len = sizeof s;
    int sv = accept(l, (void *)&s, &len);
    show("accept", sv >= 0);
    name("v4 peer as v6 sees it", &s, len, 0);
    len = sizeof s;
    getsockname(sv, (void *)&s, &len);
    name("server side name", &s, len, 1);
    close(c);
    close(sv);
    /* Connected to a mapped address from an IPv6 socket. */
    c = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 mapped = six("::ffff:127.0.0.1", P2);
    show("connect ::ffff:127.0.0.1", connect(c, (void *)&mapped, sizeof mapped));
    len = sizeof s;
    getsockname(c, (void *)&s, &len);
    name("its own name", &s, len, 0);
    sv = accept(l, NULL, NULL);
    close(sv);
    close(c);
    close(l);

    /* IPV6_V6ONLY: the v6 wildcard and the v4 wildcard can share a port. */
    int only = tcp(AF_INET6);
    int one = 1;
    show("IPV6_V6ONLY on", setsockopt(only, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one));
    show("IPV6_V6ONLY now", opt(only, IPPROTO_IPV6, IPV6_V6ONLY));
    any = six("::", P3);
    show("bind [::] v6only", bind(only, (void *)&any, sizeof any));
    show("IPV6_V6ONLY after bind", setsockopt(only, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one));
    listen(only, 4);
    v4 = tcp(AF_INET);
    a4 = four("0.0.0.0", P3);
    show("bind 0.0.0.0 beside v6only", bind(v4, (void *)&a4, sizeof a4));
    listen(v4, 4);
    c = socket(AF_INET, SOCK_STREAM, 0);
    lo4 = four("127.0.0.1", P3);
    show("connect 127.0.0.1", connect(c, (void *)&lo4, sizeof lo4));
    fcntl(only, F_SETFL, O_NONBLOCK);
    fcntl(v4, F_SETFL, O_NONBLOCK);
    show("the v6only listener has it", accept(only, NULL, NULL) >= 0);
    show("the v4 listener has it", accept(v4, NULL, NULL) >= 0);
    close(c);
    c = socket(AF_INET6, SOCK_STREAM, 0);
    show("v6only socket", setsockopt(c, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one));
    show("connect it to a mapped address", connect(c, (void *)&mapped, sizeof mapped));
    struct sockaddr_in6 m0 = six("::ffff:127.0.0.1", 0);
    show("bind it to a mapped address", bind(c, (void *)&m0, sizeof m0));
    close(c);
    close(only);
    close(v4);

    /* Misuse. */
    c = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 far = six("2001:db8::1", 0);
    show("bind a foreign address", bind(c, (void *)&far, sizeof far));
    a4 = four("127.0.0.1", 0);
    show("bind a sockaddr_in", bind(c, (void *)&a4, sizeof a4));
    struct sockaddr_in6 bad = six("::1", 0);
    bad.sin6_family = AF_INET;
    show("bind a sockaddr_in6 marked AF_INET", bind(c, (void *)&bad, sizeof bad));
    show("bind a short sockaddr_in6", bind(c, (void *)&bad, 20));
    close(c);
    c = socket(AF_INET, SOCK_STREAM, 0);
    show("IPV6_V6ONLY on an AF_INET socket", setsockopt(c, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one));
    struct sockaddr_in6 s6 = six("::1", 0);
    show("AF_INET socket given a sockaddr_in6", bind(c, (void *)&s6, sizeof s6));
    close(c);
}

static void udp(void) {
    int a = socket(AF_INET6, SOCK_DGRAM, 0);
    struct sockaddr_in6 at = six("::", P4);
    show("udp bind [::]", bind(a, (void *)&at, sizeof at));
    int b = socket(AF_INET6, SOCK_DGRAM, 0);
    struct sockaddr_in6 to = six("::1", P4);
    show("sendto [::1]", sendto(b, "six", 3, 0, (void *)&to, sizeof to));
    int c = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in to4 = four("127.0.0.1", P4);
    show("sendto 127.0.0.1", sendto(c, "four", 4, 0, (void *)&to4, sizeof to4));
    for (int i = 0; i < 2; i++) {
        char buf[16] = {0};
        struct sockaddr_storage s;
        socklen_t len = sizeof s;
        show("recvfrom", recvfrom(a, buf, sizeof buf, 0, (void *)&s, &len));
        printf("datagram: %s\n", buf);
        name("from", &s, len, 0);
    }
    close(a);
    close(b);
    close(c);

    /* A datagram to a port nobody holds: a connected sender hears of it, an unconnected one
     * does not. */
    char buf[8];
    for (int v6 = 0; v6 < 2; v6++) {
        struct sockaddr_in6 n6 = six("::1", P4);
        struct sockaddr_in n4 = four("127.0.0.1", P4);
        struct sockaddr *to_nobody = v6 ? (void *)&n6 : (void *)&n4;
        socklen_t tlen = v6 ? sizeof n6 : sizeof n4;
        int s = socket(v6 ? AF_INET6 : AF_INET, SOCK_DGRAM, 0);
        show(v6 ? "v6 sendto nobody, unconnected" : "v4 sendto nobody, unconnected", sendto(s, "x", 1, 0, to_nobody, tlen));
        show("  recv", recv(s, buf, sizeof buf, MSG_DONTWAIT));
        show("  connect", connect(s, to_nobody, tlen));
        show("  send", send(s, "x", 1, 0));
        show("  SO_ERROR", opt(s, SOL_SOCKET, SO_ERROR));
        show("  send again", send(s, "x", 1, 0));
        show("  recv", recv(s, buf, sizeof buf, 0));
        show("  recv again", recv(s, buf, sizeof buf, MSG_DONTWAIT));
        close(s);
    }
}

static const char *family(int f) {
    switch (f) {
    case AF_INET: return "inet";
    case AF_INET6: return "inet6";
    case AF_PACKET: return "packet";
    default: return "other";
    }
}

static void ip_of(struct sockaddr *sa, char *out, size_t n) {
    if (!sa) {
        snprintf(out, n, "none");
    } else if (sa->sa_family == AF_INET) {
        inet_ntop(AF_INET, &((struct sockaddr_in *)sa)->sin_addr, out, n);
    } else if (sa->sa_family == AF_INET6) {
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)sa)->sin6_addr, out, n);
    } else if (sa->sa_family == AF_PACKET) {
        struct sockaddr_ll *ll = (void *)sa;
        snprintf(out, n, "hatype %d halen %d", ll->sll_hatype, ll->sll_halen);
    } else {
        snprintf(out, n, "family %d", sa->sa_family);
    }
}

static void interfaces(void) {
    struct ifaddrs *all;
    show("getifaddrs", getifaddrs(&all));
    for (struct ifaddrs *i = all; i; i = i->ifa_next) {
        if (strcmp(i->ifa_name, "lo"))
            continue;
        char addr[64], mask[64];
        ip_of(i->ifa_addr, addr, sizeof addr);
        ip_of(i->ifa_netmask, mask, sizeof mask);
        printf("lo %s %s mask %s flags%s%s%s\n", i->ifa_addr ? family(i->ifa_addr->sa_family) : "none", addr, mask,
               i->ifa_flags & IFF_UP ? " UP" : "", i->ifa_flags & IFF_LOOPBACK ? " LOOPBACK" : "",
               i->ifa_flags & IFF_RUNNING ? " RUNNING" : "");
    }
    freeifaddrs(all);
    struct if_nameindex *ni = if_nameindex();
    for (struct if_nameindex *p = ni; p && p->if_index; p++)
        if (!strcmp(p->if_name, "lo"))
            printf("if_nameindex: lo is %u\n", p->if_index);
    if_freenameindex(ni);
}

static void raw_netlink(void) {
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    show("netlink socket", fd >= 0);
    struct sockaddr_nl me = {.nl_family = AF_NETLINK};
    socklen_t len = sizeof me;
    getsockname(fd, (void *)&me, &len);
    printf("unbound port: %u\n", me.nl_pid);
    show("bind", bind(fd, (void *)&me, sizeof me));
    len = sizeof me;
    getsockname(fd, (void *)&me, &len);
    printf("bound port is the pid: %s, len %u\n", me.nl_pid == (unsigned)getpid() ? "yes" : "no", len);
    int second = socket(AF_NETLINK, SOCK_RAW, NETLINK_ROUTE);
    struct sockaddr_nl taken = {.nl_family = AF_NETLINK, .nl_pid = me.nl_pid};
    show("bind a taken port", bind(second, (void *)&taken, sizeof taken));
    close(second);

    struct {
        struct nlmsghdr h;
        struct ifaddrmsg m;
    } req = {{sizeof req, RTM_GETADDR, NLM_F_REQUEST | NLM_F_DUMP, 7, 0}, {.ifa_family = AF_INET6}};
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    show("sendto the kernel", sendto(fd, &req, sizeof req, 0, (void *)&kernel, sizeof kernel));
    int done = 0;
    while (!done) {
        char buf[8192];
        struct sockaddr_nl from;
        len = sizeof from;
        long n = recvfrom(fd, buf, sizeof buf, 0, (void *)&from, &len);
        if (n <= 0) {
            show("recvfrom", n);
            break;
        }
        if (from.nl_pid != 0)
            printf("from port %u\n", from.nl_pid);
        for (struct nlmsghdr *h = (void *)buf; NLMSG_OK(h, n); h = NLMSG_NEXT(h, n)) {
            if (h->nlmsg_seq != 7 || h->nlmsg_pid != me.nl_pid)
                printf("unexpected seq %u or port\n", h->nlmsg_seq);
            if (h->nlmsg_type == NLMSG_DONE) {
                printf("done, multi %d\n", !!(h->nlmsg_flags & NLM_F_MULTI));
                done = 1;
                break;
            }
            if (h->nlmsg_type != RTM_NEWADDR) {
                printf("message type %d\n", h->nlmsg_type);
                continue;
            }
            struct ifaddrmsg *m = NLMSG_DATA(h);
            if (m->ifa_index != 1)
                continue;
            char ip[INET6_ADDRSTRLEN] = "?";
            int alen = IFA_PAYLOAD(h);
            for (struct rtattr *a = IFA_RTA(m); RTA_OK(a, alen); a = RTA_NEXT(a, alen))
                if (a->rta_type == IFA_ADDRESS)
                    inet_ntop(m->ifa_family, RTA_DATA(a), ip, sizeof ip);
            printf("address of lo: %s/%d family %d scope %d multi %d\n", ip, m->ifa_prefixlen, m->ifa_family,
                   m->ifa_scope, !!(h->nlmsg_flags & NLM_F_MULTI));
        }
    }
    /* One link by index: lo; and one there is not. */
    struct {
        struct nlmsghdr h;
        struct ifinfomsg m;
    } link = {{sizeof link, RTM_GETLINK, NLM_F_REQUEST, 8, 0}, {.ifi_family = AF_UNSPEC, .ifi_index = 1}};
    send(fd, &link, sizeof link, 0);
    char buf[8192];
    long n = recv(fd, buf, sizeof buf, 0);
    struct nlmsghdr *h = (void *)buf;
    if (n > 0 && h->nlmsg_type == RTM_NEWLINK) {
        struct ifinfomsg *m = NLMSG_DATA(h);
        int alen = IFLA_PAYLOAD(h);
        const char *ifname = "?";
        unsigned mtu = 0;
        for (struct rtattr *a = IFLA_RTA(m); RTA_OK(a, alen); a = RTA_NEXT(a, alen)) {
            if (a->rta_type == IFLA_IFNAME)
                ifname = RTA_DATA(a);
            if (a->rta_type == IFLA_MTU)
                mtu = *(unsigned *)RTA_DATA(a);
        }
        printf("link 1: %s type %d mtu %u loopback %d\n", ifname, m->ifi_type, mtu, !!(m->ifi_flags & IFF_LOOPBACK));
    } else {
        printf("link 1: type %d\n", n > 0 ? h->nlmsg_type : -1);
    }
    link.m.ifi_index = 999;
    link.h.nlmsg_seq = 9;
    send(fd, &link, sizeof link, 0);
    n = recv(fd, buf, sizeof buf, 0);
    if (n > 0 && h->nlmsg_type == NLMSG_ERROR) {
        struct nlmsgerr *e = NLMSG_DATA(h);
        printf("link 999: error %s, seq %u\n", strerrorname_np(-e->error), e->msg.nlmsg_seq);
    } else {
        printf("link 999: type %d\n", n > 0 ? h->nlmsg_type : -1);
    }
    /* A short read of a dump truncates its datagram. */
    req.h.nlmsg_seq = 10;
    req.m.ifa_family = AF_INET;
    send(fd, &req, sizeof req, 0);
    n = recv(fd, buf, 8, MSG_TRUNC);
    printf("short read: more than 8: %d\n", n > 8);
    n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    printf("then done: %d\n", n > 0 && h->nlmsg_type == NLMSG_DONE);
    n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    show("then nothing", n);
    struct sockaddr_nl other = {.nl_family = AF_NETLINK, .nl_pid = 12345};
    show("sendto another port", sendto(fd, &req, sizeof req, 0, (void *)&other, sizeof other));
    close(fd);
    show("netlink socket of another protocol", socket(AF_NETLINK, SOCK_RAW, 31));
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    tcp_loopback();
    reset_on_unread();
    dual_stack();
    udp();
    interfaces();
    raw_netlink();
    return 0;
}
