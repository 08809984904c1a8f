//! `AF_NETLINK` route sockets, as far as a program asks what its interfaces and routes are:
//! the `RTM_GETLINK` and `RTM_GETADDR` dumps glibc's `getifaddrs`, Go's `net.Interfaces` and
//! `ip addr` send, and the `RTM_GETROUTE` dump of `ip route` and of Go programs that look for
//! the default route (etcd's default host), answered from the node's own addresses.
//!
//! A node has `lo` (index 1: `127.0.0.1/8` and `::1/128`) and, when it is on a cluster's
//! network, `eth0` (index 2: its IPv4 address as a `/24`, and its IPv6 address
//! `fd00:6465:6a61::a.b.c.d/96`, with the MAC address `02:00:a:b:c:d`). A dump comes back as
//! Linux sends it: the messages in one datagram (`NLM_F_MULTI`), then `NLMSG_DONE` in the next.
//!
//! Its routes are those Linux makes for these addresses, in the order Linux dumps them (the
//! main table, then the local one; by destination within a table; IPv4 before IPv6):
//!
//! ```text
//! default dev eth0 proto boot scope link                      (main)
//! a.b.c.0/24 dev eth0 proto kernel scope link src a.b.c.d
//! local a.b.c.d dev eth0 proto kernel scope host src a.b.c.d  (local)
//! broadcast a.b.c.255 dev eth0 proto kernel scope link src a.b.c.d
//! local 127.0.0.0/8 dev lo proto kernel scope host src 127.0.0.1
//! local 127.0.0.1 dev lo proto kernel scope host src 127.0.0.1
//! broadcast 127.255.255.255 dev lo proto kernel scope link src 127.0.0.1
//! ::1 dev lo proto kernel metric 256                          (main)
//! fd00:6465:6a61::/96 dev eth0 proto kernel metric 256
//! default dev eth0 proto boot metric 1024
//! local ::1 dev lo proto kernel metric 0                      (local)
//! local fd00:6465:6a61::a.b.c.d dev eth0 proto kernel metric 0
//! ```
//!
//! The default routes have no gateway: deja's network delivers every address it knows
//! directly, whatever the prefix, so the honest description is a default route on the link
//! (`ip route add default dev eth0`), and no address stands for a router that does not exist
//! (the subnet's first address is often a node's own). A node without a network has only
//! `lo`'s routes, and no default route, as a Linux host without one. Dumps filter by family
//! only (not by table or interface, as Linux does for a socket with `NETLINK_GET_STRICT_CHK`).
//!
//! Any other request (a single route, `RTM_GETROUTE` without `NLM_F_DUMP`, neighbours, rules,
//! any change) gets `NLMSG_ERROR` with `EOPNOTSUPP`. No notifications are ever sent to
//! multicast groups.

use super::*;

pub(super) const AF_NETLINK: u64 = 16;
const SOCK_RAW: u64 = 3;
const NETLINK_ROUTE: u64 = 0;
/// Size of `struct sockaddr_nl`.
const SOCKADDR_NL: u32 = 12;
/// Size of `struct nlmsghdr`.
const NLMSG_HDR: usize = 16;

const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_MULTI: u16 = 0x2;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
const RTM_NEWADDR: u16 = 20;
const RTM_GETADDR: u16 = 22;
const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;

const IFLA_ADDRESS: u16 = 1;
const IFLA_BROADCAST: u16 = 2;
const IFLA_IFNAME: u16 = 3;
const IFLA_MTU: u16 = 4;
const IFLA_OPERSTATE: u16 = 16;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const IFA_LABEL: u16 = 3;
const IFA_BROADCAST: u16 = 4;
const IFA_F_PERMANENT: u8 = 0x80;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_PRIORITY: u16 = 6;
const RTA_PREFSRC: u16 = 7;
const RTA_CACHEINFO: u16 = 12;
const RTA_TABLE: u16 = 15;
const RTA_PREF: u16 = 20;
const RT_TABLE_MAIN: u8 = 254;
const RT_TABLE_LOCAL: u8 = 255;
const RTPROT_KERNEL: u8 = 2;
const RTPROT_BOOT: u8 = 3;
const RTN_UNICAST: u8 = 1;
const RTN_LOCAL: u8 = 2;
const RTN_BROADCAST: u8 = 3;
const RT_SCOPE_UNIVERSE: u8 = 0;
const RT_SCOPE_LINK: u8 = 253;
const RT_SCOPE_HOST: u8 = 254;
/// Size of `struct rta_cacheinfo`.
const RTA_CACHEINFO_LEN: usize = 32;
const AF_INET_BYTE: u8 = 2;
const AF_INET6_BYTE: u8 = 10;

/// The first port id Linux gives a process's second and later netlink sockets (`-4096`).
const ROVER_FIRST: u32 = 0xffff_f000;

/// One network interface of a node.
struct Link {
    index: i32,
    name: &'static str,
    /// `ARPHRD_*`.
    ty: u16,
    /// `IFF_*`.
    flags: u32,
    mtu: u32,
    /// `IF_OPER_*`.
    oper: u8,
    mac: [u8; 6],
    broadcast: [u8; 6],
}

/// One address of an interface.
struct Address {
    index: i32,
    label: &'static str,
    prefix: u8,
    scope: u8,
    ip: Vec<u8>,
    broadcast: Option<[u8; 4]>,
}

/// One route of a node.
struct Route {
    /// `RT_TABLE_*`.
    table: u8,
    /// `RTN_*`.
    ty: u8,
    /// `RTPROT_*`.
    protocol: u8,
    /// `RT_SCOPE_*`.
    scope: u8,
    /// The destination: 4 bytes (IPv4) or 16 (IPv6), and its prefix length.
    dst: Vec<u8>,
    dst_len: u8,
    /// The preferred source address (IPv4 routes to the node's own subnets).
    prefsrc: Option<[u8; 4]>,
    /// The interface's index.
    oif: i32,
    /// The metric (IPv6 routes always have one; deja's IPv4 routes none).
    priority: Option<u32>,
}

/// Appends a route attribute, padded to 4 bytes.
fn attr(out: &mut Vec<u8>, ty: u16, data: &[u8]) {
    out.extend_from_slice(&((4 + data.len()) as u16).to_le_bytes());
    out.extend_from_slice(&ty.to_le_bytes());
    out.extend_from_slice(data);
    out.resize(out.len().next_multiple_of(4), 0);
}

/// A whole netlink message: the header and `body`, padded to 4 bytes.
fn message(ty: u16, flags: u16, seq: u32, port: u32, body: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(NLMSG_HDR + body.len() + 3);
    m.extend_from_slice(&((NLMSG_HDR + body.len()) as u32).to_le_bytes());
    m.extend_from_slice(&ty.to_le_bytes());
    m.extend_from_slice(&flags.to_le_bytes());
    m.extend_from_slice(&seq.to_le_bytes());
    m.extend_from_slice(&port.to_le_bytes());
    m.extend_from_slice(body);
    m.resize(m.len().next_multiple_of(4), 0);
    m
}

fn name(s: &str) -> Vec<u8> {
    let mut b = s.as_bytes().to_vec();
    b.push(0);
    b
}

impl Link {
    fn new_link(&self) -> Vec<u8> {
        let mut b = vec![0u8, 0];
        b.extend_from_slice(&self.ty.to_le_bytes());
        b.extend_from_slice(&self.index.to_le_bytes());
        b.extend_from_slice(&self.flags.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        attr(&mut b, IFLA_IFNAME, &name(self.name));
        attr(&mut b, IFLA_OPERSTATE, &[self.oper]);
        attr(&mut b, IFLA_MTU, &self.mtu.to_le_bytes());
        attr(&mut b, IFLA_ADDRESS, &self.mac);
        attr(&mut b, IFLA_BROADCAST, &self.broadcast);
        b
    }
}

impl Address {
    fn family(&self) -> u8 {
        if self.ip.len() == 4 {
            AF_INET_BYTE
        } else {
            AF_INET6_BYTE
        }
    }

    fn new_addr(&self) -> Vec<u8> {
        let mut b = vec![self.family(), self.prefix, IFA_F_PERMANENT, self.scope];
        b.extend_from_slice(&self.index.to_le_bytes());
        attr(&mut b, IFA_ADDRESS, &self.ip);
        if self.family() == AF_INET_BYTE {
            attr(&mut b, IFA_LOCAL, &self.ip);
            if let Some(bc) = self.broadcast {
                attr(&mut b, IFA_BROADCAST, &bc);
            }
            attr(&mut b, IFA_LABEL, &name(self.label));
        }
        b
    }
}

impl Route {
    fn family(&self) -> u8 {
        if self.dst.len() == 4 {
            AF_INET_BYTE
        } else {
            AF_INET6_BYTE
        }
    }

    /// The body of its `RTM_NEWROUTE`: `struct rtmsg`, then the attributes in the order Linux's
    /// `fib_dump_info` (IPv4) and `rt6_fill_node` (IPv6) put them.
    fn new_route(&self) -> Vec<u8> {
        // family, dst_len, src_len, tos, table, protocol, scope, type; flags.
        let mut b = vec![self.family(), self.dst_len, 0, 0, self.table, self.protocol, self.scope, self.ty];
        b.extend_from_slice(&0u32.to_le_bytes());
        attr(&mut b, RTA_TABLE, &u32::from(self.table).to_le_bytes());
        if self.dst_len > 0 {
            attr(&mut b, RTA_DST, &self.dst);
        }
        if self.family() == AF_INET_BYTE {
            if let Some(p) = self.priority {
                attr(&mut b, RTA_PRIORITY, &p.to_le_bytes());
            }
            if let Some(src) = self.prefsrc {
                attr(&mut b, RTA_PREFSRC, &src);
            }
            attr(&mut b, RTA_OIF, &self.oif.to_le_bytes());
        } else {
            attr(&mut b, RTA_PRIORITY, &self.priority.unwrap_or(0).to_le_bytes());
            attr(&mut b, RTA_OIF, &self.oif.to_le_bytes());
            attr(&mut b, RTA_CACHEINFO, &[0; RTA_CACHEINFO_LEN]);
            attr(&mut b, RTA_PREF, &[0]); // ICMPV6_ROUTER_PREF_MEDIUM
        }
        b
    }
}

impl Net {
    /// The node's interfaces, by index.
    fn links(&self) -> Vec<Link> {
        let mut links = vec![Link {
            index: 1,
            name: "lo",
            ty: 772,
            flags: 0x1 | 0x8 | 0x40 | 0x1_0000,
            mtu: 65_536,
            oper: 0,
            mac: [0; 6],
            broadcast: [0; 6],
        }];
        if let Some([a, b, c, d]) = self.address {
            links.push(Link {
                index: 2,
                name: "eth0",
                ty: 1,
                flags: 0x1 | 0x2 | 0x40 | 0x1000 | 0x1_0000,
                mtu: 1500,
                oper: 6,
                mac: [2, 0, a, b, c, d],
                broadcast: [0xff; 6],
            });
        }
        links
    }

    /// The node's addresses, IPv4 before IPv6 as Linux dumps them.
    fn addresses(&self) -> Vec<Address> {
        let lo4 =
            Address { index: 1, label: "lo", prefix: 8, scope: RT_SCOPE_HOST, ip: vec![127, 0, 0, 1], broadcast: None };
        let lo6 = Address {
            index: 1,
            label: "lo",
            prefix: 128,
            scope: RT_SCOPE_HOST,
            ip: LOOPBACK6.to_vec(),
            broadcast: None,
        };
        let Some(v4) = self.address else { return vec![lo4, lo6] };
        let [a, b, c, _] = v4;
        vec![
            lo4,
            Address {
                index: 2,
                label: "eth0",
                prefix: 24,
                scope: RT_SCOPE_UNIVERSE,
                ip: v4.to_vec(),
                broadcast: Some([a, b, c, 255]),
            },
            lo6,
            Address {
                index: 2,
                label: "eth0",
                prefix: 96,
                scope: RT_SCOPE_UNIVERSE,
                ip: node_v6(v4).to_vec(),
                broadcast: None,
            },
        ]
    }

    /// The node's routes, in the order Linux dumps them (see the module's doc).
    fn routes(&self) -> Vec<Route> {
        let v4 = |table, ty, protocol, scope, dst: [u8; 4], dst_len, prefsrc, oif| Route {
            table,
            ty,
            protocol,
            scope,
            dst: dst.to_vec(),
            dst_len,
            prefsrc,
            oif,
            priority: None,
        };
        let v6 = |table, ty, protocol, dst: [u8; 16], dst_len, oif, metric| Route {
            table,
            ty,
            protocol,
            scope: RT_SCOPE_UNIVERSE,
            dst: dst.to_vec(),
            dst_len,
            prefsrc: None,
            oif,
            priority: Some(metric),
        };
        let lo = Some([127, 0, 0, 1]);
        let mut local4 = vec![
            v4(RT_TABLE_LOCAL, RTN_LOCAL, RTPROT_KERNEL, RT_SCOPE_HOST, [127, 0, 0, 0], 8, lo, 1),
            v4(RT_TABLE_LOCAL, RTN_LOCAL, RTPROT_KERNEL, RT_SCOPE_HOST, [127, 0, 0, 1], 32, lo, 1),
            v4(RT_TABLE_LOCAL, RTN_BROADCAST, RTPROT_KERNEL, RT_SCOPE_LINK, [127, 255, 255, 255], 32, lo, 1),
        ];
        let mut main6 = vec![v6(RT_TABLE_MAIN, RTN_UNICAST, RTPROT_KERNEL, LOOPBACK6, 128, 1, 256)];
        let mut local6 = vec![v6(RT_TABLE_LOCAL, RTN_LOCAL, RTPROT_KERNEL, LOOPBACK6, 128, 1, 0)];
        let mut main4 = Vec::new();
        if let Some(me @ [a, b, c, _]) = self.address {
            let src = Some(me);
            main4.push(v4(RT_TABLE_MAIN, RTN_UNICAST, RTPROT_BOOT, RT_SCOPE_LINK, [0; 4], 0, None, 2));
            main4.push(v4(RT_TABLE_MAIN, RTN_UNICAST, RTPROT_KERNEL, RT_SCOPE_LINK, [a, b, c, 0], 24, src, 2));
            local4.push(v4(RT_TABLE_LOCAL, RTN_LOCAL, RTPROT_KERNEL, RT_SCOPE_HOST, me, 32, src, 2));
            local4.push(v4(RT_TABLE_LOCAL, RTN_BROADCAST, RTPROT_KERNEL, RT_SCOPE_LINK, [a, b, c, 255], 32, src, 2));
            // The /96 prefix route: the node's address with its last 32 bits cleared.
            let mut net6 = node_v6(me);
            net6[12..].fill(0);
            main6.push(v6(RT_TABLE_MAIN, RTN_UNICAST, RTPROT_KERNEL, net6, 96, 2, 256));
            main6.push(v6(RT_TABLE_MAIN, RTN_UNICAST, RTPROT_BOOT, [0; 16], 0, 2, 1024));
            local6.push(v6(RT_TABLE_LOCAL, RTN_LOCAL, RTPROT_KERNEL, node_v6(me), 128, 2, 0));
        }
        // Linux's IPv4 tables are tries: a dump walks each in the order of its keys.
        local4.sort_by_key(|r| (u32::from_be_bytes([r.dst[0], r.dst[1], r.dst[2], r.dst[3]]), r.dst_len));
        [main4, local4, main6, local6].into_iter().flatten().collect()
    }

    /// The answers to one datagram of requests sent to the kernel by the socket with port id
    /// `port`: the datagrams to queue for it.
    fn answer(&self, port: u32, data: &[u8]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut at = 0;
        while data.len() - at >= NLMSG_HDR {
            let h = &data[at..];
            let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
            if len < NLMSG_HDR || len > h.len() {
                break;
            }
            let ty = u16::from_le_bytes([h[4], h[5]]);
            let flags = u16::from_le_bytes([h[6], h[7]]);
            let seq = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
            let body = &h[NLMSG_HDR..len];
            at += len.next_multiple_of(4).min(data.len() - at);
            if flags & NLM_F_REQUEST == 0 {
                continue;
            }
            let dump = flags & NLM_F_DUMP == NLM_F_DUMP;
            // The family a dump asks for: the first byte of its `rtgenmsg`/`ifaddrmsg`.
            let family = body.first().copied().unwrap_or(0);
            let new = match ty {
                RTM_GETLINK => RTM_NEWLINK,
                RTM_GETROUTE => RTM_NEWROUTE,
                _ => RTM_NEWADDR,
            };
            let parts: Vec<Vec<u8>> = match ty {
                RTM_GETLINK if dump => self.links().iter().map(|l| l.new_link()).collect(),
                RTM_GETADDR if dump => self
                    .addresses()
                    .iter()
                    .filter(|a| family == 0 || a.family() == family)
                    .map(|a| a.new_addr())
                    .collect(),
                RTM_GETROUTE if dump => self
                    .routes()
                    .iter()
                    .filter(|r| family == 0 || r.family() == family)
                    .map(|r| r.new_route())
                    .collect(),
                RTM_GETLINK if body.len() >= 8 => {
                    let index = i32::from_le_bytes([body[4], body[5], body[6], body[7]]);
                    match self.links().iter().find(|l| l.index == index) {
                        Some(l) => {
                            out.push(message(RTM_NEWLINK, 0, seq, port, &l.new_link()));
                            if flags & NLM_F_ACK != 0 {
                                out.push(error(0, h, len, seq, port));
                            }
                        }
                        None => out.push(error(ENODEV, h, len, seq, port)),
                    }
                    continue;
                }
                _ => {
                    out.push(error(EOPNOTSUPP, h, len, seq, port));
                    continue;
                }
            };
            let batch: Vec<u8> = parts.iter().flat_map(|p| message(new, NLM_F_MULTI, seq, port, p)).collect();
            if !batch.is_empty() {
                out.push(batch);
            }
            out.push(message(NLMSG_DONE, NLM_F_MULTI, seq, port, &0i32.to_le_bytes()));
        }
        out
    }

    /// A free port id: the process's pid (1) first, then Linux's rover downwards.
    fn free_port(&self) -> u32 {
        let used = |p: u32| self.objects.values().any(|o| matches!(&o.kind, ObjKind::Netlink(n) if n.port == p));
        core::iter::once(1).chain((0..u32::MAX).map(|i| ROVER_FIRST.wrapping_sub(i))).find(|p| !used(*p)).unwrap_or(1)
    }
}

/// `NLMSG_ERROR` for the request `h` (`len` bytes): the negated errno and the request's header
/// (`0`: an acknowledgement).
fn error(errno: i32, h: &[u8], len: usize, seq: u32, port: u32) -> Vec<u8> {
    let mut b = (-errno).to_le_bytes().to_vec();
    b.extend_from_slice(&h[..NLMSG_HDR.min(len)]);
    message(NLMSG_ERROR, 0, seq, port, &b)
}

impl Kernel {
    /// The netlink socket `id`, if it is one.
    pub(super) fn netlink(&self, id: u64) -> Option<&NetlinkSock> {
        match self.net.objects.get(&id).map(|o| &o.kind) {
            Some(ObjKind::Netlink(n)) => Some(n),
            _ => None,
        }
    }

    fn netlink_mut(&mut self, id: u64) -> Result<&mut NetlinkSock, i32> {
        match self.net.objects.get_mut(&id).map(|o| &mut o.kind) {
            Some(ObjKind::Netlink(n)) => Ok(n),
            _ => Err(ENOTSOCK),
        }
    }

    pub(super) fn netlink_socket(&mut self, ty: u64, proto: u64) -> SysResult {
        if ty & !(0xf | SOCK_NONBLOCK | SOCK_CLOEXEC) != 0 {
            return Err(EINVAL.into());
        }
        if !matches!(ty & 0xf, SOCK_RAW | SOCK_DGRAM) {
            return Err(ESOCKTNOSUPPORT.into());
        }
        if proto != NETLINK_ROUTE {
            return Err(EPROTONOSUPPORT.into());
        }
        let nb = if ty & SOCK_NONBLOCK != 0 { O_NONBLOCK } else { 0 };
        self.new_object(ObjKind::Netlink(NetlinkSock::default()), O_RDWR | nb, ty & SOCK_CLOEXEC != 0)
    }

    /// Reads a `sockaddr_nl`: its port id and groups.
    fn read_sockaddr_nl(&self, mem: &mut dyn Memory, addr: u64, len: u64) -> Result<(u32, u32), i32> {
        if len < u64::from(SOCKADDR_NL) {
            return Err(EINVAL);
        }
        let mut b = [0u8; SOCKADDR_NL as usize];
        self.process.mappings.copy_in(mem, addr, &mut b)?;
        if u64::from(u16::from_le_bytes([b[0], b[1]])) != AF_NETLINK {
            return Err(EINVAL);
        }
        Ok((u32::from_le_bytes([b[4], b[5], b[6], b[7]]), u32::from_le_bytes([b[8], b[9], b[10], b[11]])))
    }

    /// Writes a `sockaddr_nl` naming `port`.
    fn write_sockaddr_nl(&self, mem: &mut dyn Memory, addr: u64, lenp: u64, port: u32) -> Result<(), i32> {
        if addr == 0 || lenp == 0 {
            return Ok(());
        }
        let len = self.process.mappings.read_u32(mem, lenp)?;
        if (len as i32) < 0 {
            return Err(EINVAL);
        }
        let mut b = [0u8; SOCKADDR_NL as usize];
        b[..2].copy_from_slice(&(AF_NETLINK as u16).to_le_bytes());
        b[4..8].copy_from_slice(&port.to_le_bytes());
        let n = (len as usize).min(b.len());
        self.process.mappings.copy_out(mem, addr, &b[..n])?;
        self.process.mappings.copy_out(mem, lenp, &SOCKADDR_NL.to_le_bytes())?;
        Ok(())
    }

    /// Gives an unbound netlink socket a port id.
    fn netlink_autobind(&mut self, id: u64) -> Result<u32, i32> {
        let port = self.netlink(id).ok_or(ENOTSOCK)?.port;
        if port != 0 {
            return Ok(port);
        }
        let port = self.net.free_port();
        self.netlink_mut(id)?.port = port;
        Ok(port)
    }

    pub(super) fn netlink_bind(&mut self, mem: &mut dyn Memory, id: u64, addr: u64, len: u64) -> SysResult {
        let (port, groups) = self.read_sockaddr_nl(mem, addr, len)?;
        let current = self.netlink(id).ok_or(ENOTSOCK)?.port;
        if port != 0 && current != 0 && port != current {
            return Err(EINVAL.into());
        }
        if port != 0 && current == 0 {
            let taken = self.net.objects.values().any(|o| matches!(&o.kind, ObjKind::Netlink(n) if n.port == port));
            if taken {
                return Err(EADDRINUSE.into());
            }
            self.netlink_mut(id)?.port = port;
        } else {
            self.netlink_autobind(id)?;
        }
        self.netlink_mut(id)?.groups = groups;
        Ok(0)
    }

    pub(super) fn netlink_getname(
        &mut self,
        mem: &mut dyn Memory,
        id: u64,
        addr: u64,
        lenp: u64,
        peer: bool,
    ) -> SysResult {
        // The peer of a netlink socket is the kernel (port 0).
        let port = if peer { 0 } else { self.netlink(id).ok_or(ENOTSOCK)?.port };
        access_nonnull(addr)?;
        self.write_sockaddr_nl(mem, addr, lenp, port)?;
        Ok(0)
    }

    /// Checks where a program sends a netlink message: only the kernel (port 0) listens.
    pub(super) fn netlink_destination(&self, mem: &mut dyn Memory, addr: u64, len: u64) -> Result<(), i32> {
        let (dst, _) = self.read_sockaddr_nl(mem, addr, len)?;
        if dst != 0 {
            // Another socket's port: deja's programs have no netlink peers.
            return Err(ECONNREFUSED);
        }
        Ok(())
    }

    /// Sends requests to the kernel: the answers are queued on the socket.
    pub(super) fn netlink_send(&mut self, id: u64, data: &[u8]) -> SysResult {
        let port = self.netlink_autobind(id)?;
        let answers = self.net.answer(port, data);
        self.netlink_mut(id)?.queue.extend(answers);
        self.net.touch(id);
        Ok(data.len() as u64)
    }

    /// Writes where a received netlink message came from: the kernel.
    pub(super) fn netlink_source(&self, mem: &mut dyn Memory, addr: u64, lenp: u64) -> Result<(), i32> {
        self.write_sockaddr_nl(mem, addr, lenp, 0)
    }
}
