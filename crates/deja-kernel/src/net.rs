//! In-kernel I/O objects of one node: AF_INET sockets, pipes, eventfds and epoll instances,
//! and the packets a node exchanges with the simulated network.
//!
//! # Model
//!
//! A node owns its sockets. What crosses between sockets is a [`Packet`]: TCP is modelled at
//! the connection level (`Syn`, `SynAck`, `Data`, `Fin`, `Rst`: no sequence numbers, windows or
//! retransmissions: the network delivers a connection's packets in order, exactly once, or
//! resets it), UDP as whole datagrams. A packet for the node itself (`127.0.0.0/8`, the node's
//! own address, `0.0.0.0`) is delivered at once, inside the same syscall; any other packet goes
//! to the node's outbox, which the cluster driver drains ([`crate::Kernel::take_packets`]) and
//! routes through its network model, later handing the receiver its packets with
//! [`crate::Kernel::resume`]. A kernel without a network ([`crate::Kernel::attach_network`]
//! never called) answers `ENETUNREACH` for any other address.
//!
//! Flow control: a sender may have at most [`WINDOW`] bytes that its peer's program has not read
//! yet; a write beyond it is partial, `EAGAIN`, or blocks. The receiver returns credit with an
//! `Ack` each time its program has read [`ACK_EVERY`] bytes (or emptied its buffer after reading
//! some), so a fast writer never loses data to a slow reader. A pipe holds [`PIPE_SIZE`] bytes
//! unless `F_SETPIPE_SZ` changes it; a write of at most [`PIPE_BUF`] bytes goes in whole or
//! waits, a longer one goes in as far as there is room (a blocking one returns then, where
//! Linux's would wait to write the rest: callers write the rest again). Closing a connection whose `SO_LINGER` is on with a zero timeout
//! resets it (`Rst`) instead of finishing it, as in Linux, and so does closing one whose program left
//! received bytes unread. There is no urgent data.
//!
//! IPv6: addresses are kept in IPv6 form ([`SockAddr`]), IPv4 ones IPv4-mapped. `::1` is
//! loopback; a node with address `a.b.c.d` also has `fd00:6465:6a61::a.b.c.d`
//! ([`NODE_PREFIX6`]), which the cluster routes like its IPv4 address. An `AF_INET6` socket
//! bound to `::` takes IPv4 traffic too unless `IPV6_V6ONLY` is set, and sees IPv4 peers as
//! `::ffff:a.b.c.d`.
//!
//! Unix-domain sockets ([`UnixSock`]) never leave the node: a connection is a pair of objects
//! that point at each other, and a write lands in the peer's receive buffer within the same
//! syscall, as in Linux. A name is a path (a [`crate::fs::Kind::Socket`] node) or an abstract
//! name.
//!
//! A FIFO's bytes go through a pipe too ([`Fifo`]): the first opener of a FIFO makes it, later
//! openers share it, and it goes when the last of them closes, as Linux's `fifo_open` keeps
//! one pipe per inode while it is open. Opening for reading waits for a writer and opening for
//! writing for a reader (a count of each that ever opened it moves when one comes), unless
//! the open is `O_RDWR` or does not block.
//!
//! # Readiness
//!
//! Every object carries a generation number bumped whenever its readiness may have grown
//! (data or a connection arrived, a connect finished, a peer closed, an error). Level-triggered
//! `poll`/`select`/`epoll` look at the readiness itself; an edge-triggered (`EPOLLET`) epoll
//! registration reports an object again only when its generation moved since the last report,
//! which is what mio and tokio expect.

use crate::prelude::*;
use alloc::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::persist::{ensure, Persist, RestoreError};

/// Bytes a pipe holds unless `F_SETPIPE_SZ` changes it: Linux's 16 pages.
pub const PIPE_SIZE: usize = 65_536;
/// The most `F_SETPIPE_SZ` gives a program without privileges (Linux's `pipe-max-size`).
pub const PIPE_MAX_SIZE: usize = 1 << 20;
/// A pipe write of at most this many bytes is all or nothing (`PIPE_BUF`).
pub const PIPE_BUF: usize = 4096;
/// Most bytes a connection's sender may have that the receiving program has not read.
pub const WINDOW: u64 = 4 << 20;
/// The receiver returns credit after its program read this many bytes.
pub const ACK_EVERY: u64 = 1 << 20;
/// Most datagrams queued on one UDP socket; more are dropped, like a full receive buffer.
pub const MAX_DATAGRAMS: usize = 1024;
/// Largest UDP payload.
pub const MAX_DATAGRAM: usize = 65_507;
/// First ephemeral port.
pub const EPHEMERAL_FIRST: u16 = 49_152;

/// Most bytes a Unix stream or seqpacket socket holds unread (Linux's default `wmem`).
pub const UNIX_BUFFER: usize = 212_992;
/// What one queued Unix datagram or seqpacket costs beside its bytes.
pub const UNIX_MSG_COST: usize = 512;
/// A Unix datagram socket's queue is full beyond this many datagrams from senders it is not
/// connected to (Linux's `net.unix.max_dgram_qlen`).
pub const UNIX_DGRAM_QLEN: usize = 10;

/// What a Unix socket's name is bound to: a path's inode, or an abstract name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub(crate) enum UnixKey {
    Inode(u64),
    Abstract(Vec<u8>),
}

/// `(IPPROTO_IPV6, IPV6_V6ONLY)`, as a socket option key.
pub(crate) const IPV6_V6ONLY: (i32, i32) = (41, 26);

/// `RCV_SHUTDOWN`: nothing more will arrive.
pub(crate) const SHUT_RCV: u8 = 1;
/// `SEND_SHUTDOWN`: nothing more may be sent.
pub(crate) const SHUT_SEND: u8 = 2;

/// A Unix-domain socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct UnixSock {
    /// `SOCK_STREAM`, `SOCK_DGRAM` or `SOCK_SEQPACKET`.
    pub ty: u64,
    /// The name it is bound to, as given (`sun_path`; abstract names start with a NUL).
    pub name: Option<Vec<u8>>,
    /// What the name is registered under in [`Net::unix_names`].
    pub key: Option<UnixKey>,
    /// The connected peer (a datagram socket's default destination).
    pub peer: Option<u64>,
    /// `listen`ed: the backlog and the connections waiting for `accept`.
    pub listen: Option<(u32, VecDeque<u64>)>,
    /// Stream bytes not read yet.
    pub bytes: VecDeque<u8>,
    /// Datagrams or seqpackets not read yet.
    pub msgs: VecDeque<UnixMsg>,
    /// Stream bytes ever queued and ever read: the positions [`UnixSock::rights`] refer to.
    pub queued: u64,
    pub taken: u64,
    /// Descriptions in flight with the stream bytes `[start, end)` of one write.
    pub rights: VecDeque<(u64, u64, Vec<u64>)>,
    /// [`SHUT_RCV`] and [`SHUT_SEND`].
    pub shut: u8,
    /// A pending error (`ECONNRESET` when the peer closed with data unread).
    pub error: i32,
}

impl UnixSock {
    pub fn new(ty: u64) -> Self {
        UnixSock {
            ty,
            name: None,
            key: None,
            peer: None,
            listen: None,
            bytes: VecDeque::new(),
            msgs: VecDeque::new(),
            queued: 0,
            taken: 0,
            rights: VecDeque::new(),
            shut: 0,
            error: 0,
        }
    }

    /// True for the connection-oriented types.
    pub fn connection(&self) -> bool {
        self.ty != 2
    }

    /// Bytes held unread; each message also costs [`UNIX_MSG_COST`], as a buffer does in
    /// Linux, so that empty datagrams fill a queue too.
    pub fn held(&self) -> usize {
        self.bytes.len() + self.msgs.iter().map(|m| m.data.len() + UNIX_MSG_COST).sum::<usize>()
    }

    /// True if a message of `len` bytes from `from` (an object id) does not fit now.
    pub fn full(&self, len: usize, from: u64) -> bool {
        if self.ty == 2 && self.peer != Some(from) && self.msgs.len() > UNIX_DGRAM_QLEN {
            return true;
        }
        self.held() > 0 && self.held() + len > UNIX_BUFFER
    }
}

/// One Unix datagram or seqpacket.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct UnixMsg {
    /// The sender's name, if it had one.
    pub from: Option<Vec<u8>>,
    pub data: Vec<u8>,
    /// Descriptions in flight with it (`SCM_RIGHTS`).
    pub fds: Vec<u64>,
}

/// The prefix of a node's IPv6 address on the simulated network: `fd00:6465:6a61::/96` (a
/// unique local prefix, `6465:6a61` spelling "deja") followed by the node's IPv4 address.
pub const NODE_PREFIX6: [u8; 12] = [0xfd, 0, 0x64, 0x65, 0x6a, 0x61, 0, 0, 0, 0, 0, 0];
/// `::ffff:0:0/96`: an IPv4 address as an IPv6 socket sees it.
const MAPPED_PREFIX: [u8; 12] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];
/// `::1`.
pub const LOOPBACK6: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

/// A socket address. Addresses are kept in their IPv6 form, an IPv4 address as its IPv4-mapped
/// IPv6 address (`::ffff:a.b.c.d`), so that a dual-stack IPv6 socket and an IPv4 socket meet
/// in one table, as they do in Linux.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SockAddr {
    /// Address, network order bytes, IPv4 as IPv4-mapped.
    pub ip: [u8; 16],
    /// Port.
    pub port: u16,
}

impl SockAddr {
    /// `a.b.c.d:port`.
    pub fn new(ip: [u8; 4], port: u16) -> Self {
        SockAddr { ip: mapped(ip), port }
    }

    /// `[ip]:port`, an IPv6 address (an IPv4-mapped one is the IPv4 address).
    pub fn v6(ip: [u8; 16], port: u16) -> Self {
        SockAddr { ip, port }
    }

    /// The IPv4 address, if this is one.
    pub fn v4(&self) -> Option<[u8; 4]> {
        self.ip.starts_with(&MAPPED_PREFIX).then(|| last4(&self.ip))
    }

    /// The IPv4 address of the node this address names on the simulated network: an IPv4
    /// address, or a node's IPv6 address ([`NODE_PREFIX6`]).
    pub fn node_v4(&self) -> Option<[u8; 4]> {
        (self.ip.starts_with(&MAPPED_PREFIX) || self.ip.starts_with(&NODE_PREFIX6)).then(|| last4(&self.ip))
    }

    /// True for `0.0.0.0` and `::`.
    pub fn is_unspecified(&self) -> bool {
        self.ip == [0; 16] || self.v4() == Some([0; 4])
    }

    /// True for an IPv6 address that is not IPv4-mapped.
    pub fn is_v6(&self) -> bool {
        self.v4().is_none()
    }
}

/// `::ffff:a.b.c.d`.
pub fn mapped(ip: [u8; 4]) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..12].copy_from_slice(&MAPPED_PREFIX);
    b[12..].copy_from_slice(&ip);
    b
}

/// A node's IPv6 address on the simulated network.
pub fn node_v6(ip: [u8; 4]) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..12].copy_from_slice(&NODE_PREFIX6);
    b[12..].copy_from_slice(&ip);
    b
}

fn last4(b: &[u8; 16]) -> [u8; 4] {
    [b[12], b[13], b[14], b[15]]
}

impl core::fmt::Display for SockAddr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.v4() {
            Some(ip) => write!(f, "{}:{}", core::net::Ipv4Addr::from(ip), self.port),
            None => write!(f, "[{}]:{}", core::net::Ipv6Addr::from(self.ip), self.port),
        }
    }
}

/// What a packet carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Payload {
    /// Open a connection.
    Syn,
    /// The listener accepted it.
    SynAck,
    /// Stream bytes.
    Data(Vec<u8>),
    /// The receiving program read this many more bytes: credit for the sender.
    Ack(u64),
    /// The sender will send no more.
    Fin,
    /// The connection is gone (refused, reset, peer dead, partition outlasted the timeout).
    Rst,
    /// The network gave up delivering a `Syn`: the connect times out.
    ConnectTimeout,
    /// A UDP datagram.
    Datagram(Vec<u8>),
}

impl Payload {
    /// True for the packets of a TCP connection.
    pub fn is_stream(&self) -> bool {
        !matches!(self, Payload::Datagram(_))
    }
}

/// One packet between two sockets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Packet {
    /// Sender.
    pub src: SockAddr,
    /// Receiver.
    pub dst: SockAddr,
    /// Contents.
    pub payload: Payload,
}

/// Where a stream socket is in its life.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum StreamState {
    /// Created, maybe bound.
    Fresh,
    /// `listen`ed: accepted connections wait in `queue`.
    Listening { backlog: u32, queue: VecDeque<u64> },
    /// `Syn` sent.
    Connecting,
    /// Established (possibly half closed, reset or failed: see the flags).
    Connected,
    /// A connect failed with this errno (reported once by the blocked `connect` or `SO_ERROR`).
    Failed(i32),
}

/// A TCP socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StreamSock {
    pub local: Option<SockAddr>,
    pub remote: Option<SockAddr>,
    pub state: StreamState,
    pub rx: VecDeque<u8>,
    /// The peer sent `Fin`.
    pub peer_fin: bool,
    /// `shutdown(SHUT_WR)`: we sent `Fin`.
    pub shut_wr: bool,
    /// `shutdown(SHUT_RD)`.
    pub shut_rd: bool,
    /// The connection was reset; reads report `ECONNRESET` once, then end of file.
    pub reset: bool,
    /// Pending `SO_ERROR`.
    pub error: i32,
    /// Bytes sent that the peer's program has not read (as far as its acks say).
    pub inflight: u64,
    /// Bytes the program read that were not acknowledged to the peer yet.
    pub consumed: u64,
}

impl StreamSock {
    /// A stream socket in `state`.
    pub fn new(local: Option<SockAddr>, remote: Option<SockAddr>, state: StreamState) -> Self {
        StreamSock {
            local,
            remote,
            state,
            rx: VecDeque::new(),
            peer_fin: false,
            shut_wr: false,
            shut_rd: false,
            reset: false,
            error: 0,
            inflight: 0,
            consumed: 0,
        }
    }
}

/// A UDP socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DgramSock {
    pub local: Option<SockAddr>,
    pub remote: Option<SockAddr>,
    pub queue: VecDeque<(SockAddr, Vec<u8>)>,
    /// A pending error: `ECONNREFUSED` once a datagram it sent to its connected peer on this
    /// node found no socket (Linux's ICMP port unreachable).
    #[serde(default)]
    pub error: i32,
}

/// An `AF_NETLINK` route socket (see `sys_net::netlink`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct NetlinkSock {
    /// Its port id (0: not bound yet).
    pub port: u32,
    /// The multicast groups it joined (nothing is ever sent to them).
    pub groups: u32,
    /// Datagrams from the kernel not read yet.
    pub queue: VecDeque<Vec<u8>>,
}

/// One epoll registration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Interest {
    pub events: u32,
    pub data: u64,
    /// The open file description registered (a reused fd number is another registration).
    pub desc: u64,
    /// Generation of the object at the last edge-triggered report.
    pub reported: Option<u64>,
    /// `EPOLLONESHOT` fired: disabled until `EPOLL_CTL_MOD`.
    pub disabled: bool,
}

/// What an object is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum ObjKind {
    Stream(StreamSock),
    Dgram(DgramSock),
    Pipe {
        buf: VecDeque<u8>,
        readers: u32,
        writers: u32,
        /// How many bytes it holds at most ([`PIPE_SIZE`], or what `F_SETPIPE_SZ` set).
        #[serde(default = "pipe_size")]
        cap: usize,
    },
    EventFd {
        value: u64,
        semaphore: bool,
    },
    Epoll {
        interests: BTreeMap<i32, Interest>,
    },
    Unix(UnixSock),
    Netlink(NetlinkSock),
}

/// A FIFO while it is open (or being opened), by its inode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Fifo {
    /// The pipe its openers share ([`ObjKind::Pipe`], whose counts of readers and writers
    /// include the opens still waiting).
    pub obj: u64,
    /// How many readers and how many writers ever opened it, from 1 (Linux's `r_counter` and
    /// `w_counter`): a waiting open is done once the other side's count moved.
    pub opened: [u64; 2],
    /// The threads blocked opening it: tid → whether it waits for a writer (else for a
    /// reader), and that side's count when it began.
    pub waiting: BTreeMap<u64, (bool, u64)>,
}

fn pipe_size() -> usize {
    PIPE_SIZE
}

/// An object and its options.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Obj {
    pub kind: ObjKind,
    pub gen: u64,
    /// Integer socket options by (level, name), as last set.
    pub options: BTreeMap<(i32, i32), i32>,
    /// `SO_RCVTIMEO` and `SO_SNDTIMEO` in ns (0: none).
    pub rcvtimeo: u64,
    pub sndtimeo: u64,
    /// `SO_LINGER`: its timeout in seconds when on.
    pub linger: Option<u32>,
    /// An `AF_INET6` socket: its addresses are `sockaddr_in6`, IPv4 ones as IPv4-mapped.
    #[serde(default)]
    pub inet6: bool,
}

impl Obj {
    pub fn new(kind: ObjKind) -> Self {
        Obj { kind, gen: 1, options: BTreeMap::new(), rcvtimeo: 0, sndtimeo: 0, linger: None, inet6: false }
    }
}

/// The I/O objects of one node and its attachment to the network.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Net {
    /// The node's address (`None`: no network, loopback only).
    pub(crate) address: Option<[u8; 4]>,
    pub(crate) objects: BTreeMap<u64, Obj>,
    pub(crate) next_obj: u64,
    pub(crate) next_port: u16,
    /// Listening stream sockets by bound address.
    pub(crate) listeners: BTreeMap<SockAddr, u64>,
    /// Connected or connecting stream sockets by (local, remote).
    pub(crate) streams: BTreeMap<(SockAddr, SockAddr), u64>,
    /// Bound stream sockets that are not listening yet (for `EADDRINUSE`).
    pub(crate) bound_streams: BTreeMap<SockAddr, u64>,
    /// Bound UDP sockets.
    pub(crate) dgrams: BTreeMap<SockAddr, u64>,
    /// Bound Unix sockets by name.
    pub(crate) unix_names: BTreeMap<UnixKey, u64>,
    /// Open FIFOs by inode id.
    pub(crate) fifos: BTreeMap<u64, Fifo>,
    /// The next abstract name an autobind gives.
    pub(crate) next_autobind: u32,
    /// Descriptions in flight in messages that were dropped unread: for the kernel to let go.
    pub(crate) orphans: Vec<u64>,
    /// Packets for the network.
    pub(crate) outbox: Vec<Packet>,
    /// Packets for this node not yet delivered (loopback, within one syscall).
    pub(crate) local: VecDeque<Packet>,
    /// Some object's readiness may have grown since blocked calls were last retried.
    pub(crate) dirty: bool,
    /// Virtual time at which the shell should stop after a syscall (see
    /// [`crate::Kernel::yield_due`]).
    pub(crate) yield_at: Option<u64>,
}

impl Persist for Net {
    /// Nothing: the checks need no other part.
    type Context = ();

    /// Checks the invariants of restored I/O objects: every object's id was handed out.
    fn validate(&self, _: &()) -> Result<(), RestoreError> {
        let last = self.objects.keys().next_back().copied();
        ensure(last.is_none_or(|id| id < self.next_obj), || {
            format!("object {last:?} not below the next id {}", self.next_obj)
        })?;
        for (key, id) in &self.unix_names {
            let ok =
                matches!(&self.objects.get(id).map(|o| &o.kind), Some(ObjKind::Unix(u)) if u.key.as_ref() == Some(key));
            ensure(ok, || format!("the Unix name {key:?} names object {id}, which is not bound to it"))?;
        }
        let mut pipes = alloc::collections::BTreeSet::new();
        for (inode, f) in &self.fifos {
            let ok = matches!(self.objects.get(&f.obj).map(|o| &o.kind), Some(ObjKind::Pipe { .. }));
            ensure(ok && pipes.insert(f.obj), || {
                format!("FIFO {inode} names object {}, not a pipe of its own", f.obj)
            })?;
            ensure(f.opened.iter().all(|&n| n >= 1), || format!("FIFO {inode} counts no opener"))?;
        }
        Ok(())
    }
}

impl Net {
    /// Adds an object; its id.
    pub(crate) fn add(&mut self, kind: ObjKind) -> u64 {
        let id = self.next_obj;
        self.next_obj += 1;
        self.objects.insert(id, Obj::new(kind));
        id
    }

    /// Bumps an object's generation (its readiness may have grown).
    pub(crate) fn touch(&mut self, id: u64) {
        if let Some(o) = self.objects.get_mut(&id) {
            o.gen += 1;
        }
        self.dirty = true;
    }

    /// True if `ip` names this node: loopback (`127.0.0.0/8`, `::1`), unspecified, or its own
    /// address (IPv4, or IPv6 under [`NODE_PREFIX6`]).
    pub(crate) fn is_local(&self, ip: [u8; 16]) -> bool {
        let sa = SockAddr::v6(ip, 0);
        match sa.v4() {
            Some(v4) => v4[0] == 127 || v4 == [0; 4] || Some(v4) == self.address,
            None => ip == LOOPBACK6 || ip == [0; 16] || self.address.is_some_and(|a| ip == node_v6(a)),
        }
    }

    /// True if a packet to `ip` can leave: the node itself, or once it has a network, any IPv4
    /// address and the IPv6 addresses of nodes.
    pub(crate) fn reachable(&self, ip: [u8; 16]) -> bool {
        self.is_local(ip) || (self.address.is_some() && SockAddr::v6(ip, 0).node_v4().is_some())
    }

    /// The address this node sends from towards `dst`.
    pub(crate) fn source_ip(&self, dst: [u8; 16]) -> [u8; 16] {
        match SockAddr::v6(dst, 0).v4() {
            Some(d) if d[0] == 127 || d == [0; 4] => mapped([127, 0, 0, 1]),
            Some(_) => mapped(self.address.unwrap_or([127, 0, 0, 1])),
            None if dst == LOOPBACK6 || dst == [0; 16] => LOOPBACK6,
            None => self.address.map_or(LOOPBACK6, node_v6),
        }
    }

    /// True if object `id` is an IPv6 socket that takes IPv6 traffic only (`IPV6_V6ONLY`).
    pub(crate) fn v6only(&self, id: u64) -> bool {
        self.objects.get(&id).is_some_and(|o| o.inet6 && o.options.get(&IPV6_V6ONLY).is_some_and(|v| *v != 0))
    }

    /// The socket bound in `table` that takes packets for `dst`: the exact address first, then
    /// the wildcard of its family, then for IPv4 a dual-stack IPv6 wildcard.
    fn bound_for(&self, table: &BTreeMap<SockAddr, u64>, dst: SockAddr) -> Option<u64> {
        if let Some(id) = table.get(&dst) {
            return Some(*id);
        }
        let any6 = table.get(&SockAddr::v6([0; 16], dst.port)).copied();
        if dst.v4().is_some() {
            let any4 = table.get(&SockAddr::new([0; 4], dst.port)).copied();
            any4.or(any6.filter(|id| !self.v6only(*id)))
        } else {
            any6
        }
    }

    /// A free ephemeral port for `ip` (for stream or datagram use).
    pub(crate) fn ephemeral(&mut self, stream: bool) -> Option<u16> {
        if self.next_port < EPHEMERAL_FIRST {
            self.next_port = EPHEMERAL_FIRST;
        }
        for _ in 0..(u16::MAX - EPHEMERAL_FIRST) {
            let p = self.next_port;
            self.next_port = if p == u16::MAX { EPHEMERAL_FIRST } else { p + 1 };
            if !self.port_in_use(p, stream) {
                return Some(p);
            }
        }
        None
    }

    /// True if some socket of the kind holds `port`.
    pub(crate) fn port_in_use(&self, port: u16, stream: bool) -> bool {
        if stream {
            self.listeners.keys().chain(self.bound_streams.keys()).any(|a| a.port == port)
                || self.streams.keys().any(|(l, _)| l.port == port)
        } else {
            self.dgrams.keys().any(|a| a.port == port)
        }
    }

    /// Sends a packet: to this node's own queue or to the network.
    pub(crate) fn send(&mut self, p: Packet) {
        if self.is_local(p.dst.ip) {
            self.local.push_back(p);
        } else if self.address.is_some() {
            self.outbox.push(p);
        }
    }

    /// The listener for `dst`.
    fn listener(&self, dst: SockAddr) -> Option<u64> {
        self.bound_for(&self.listeners, dst)
    }

    /// The UDP socket for `dst`.
    fn dgram_for(&self, dst: SockAddr) -> Option<u64> {
        self.bound_for(&self.dgrams, dst)
    }

    fn stream_mut(&mut self, id: u64) -> Option<&mut StreamSock> {
        match self.objects.get_mut(&id).map(|o| &mut o.kind) {
            Some(ObjKind::Stream(s)) => Some(s),
            _ => None,
        }
    }

    /// Delivers one packet to this node.
    pub(crate) fn receive(&mut self, p: Packet) {
        let key = (p.dst, p.src);
        match p.payload {
            Payload::Syn => {
                let Some(lid) = self.listener(p.dst) else {
                    self.send(Packet { src: p.dst, dst: p.src, payload: Payload::Rst });
                    return;
                };
                if self.streams.contains_key(&key) {
                    return; // a duplicate
                }
                let full = match self.objects.get(&lid).map(|o| &o.kind) {
                    Some(ObjKind::Stream(StreamSock { state: StreamState::Listening { backlog, queue }, .. })) => {
                        queue.len() as u32 > *backlog
                    }
                    _ => true,
                };
                if full {
                    self.send(Packet { src: p.dst, dst: p.src, payload: Payload::Rst });
                    return;
                }
                let conn = self.add(ObjKind::Stream(StreamSock::new(Some(p.dst), Some(p.src), StreamState::Connected)));
                let inet6 = self.objects.get(&lid).is_some_and(|o| o.inet6);
                if let Some(o) = self.objects.get_mut(&conn) {
                    o.inet6 = inet6;
                }
                self.streams.insert(key, conn);
                if let Some(StreamSock { state: StreamState::Listening { queue, .. }, .. }) = self.stream_mut(lid) {
                    queue.push_back(conn);
                }
                self.touch(lid);
                self.send(Packet { src: p.dst, dst: p.src, payload: Payload::SynAck });
            }
            Payload::SynAck => match self.streams.get(&key).copied() {
                Some(id) => {
                    if let Some(s) = self.stream_mut(id) {
                        if s.state == StreamState::Connecting {
                            s.state = StreamState::Connected;
                        }
                    }
                    self.touch(id);
                }
                None => self.send(Packet { src: p.dst, dst: p.src, payload: Payload::Rst }),
            },
            Payload::Data(bytes) => match self.streams.get(&key).copied() {
                Some(id) => {
                    if let Some(s) = self.stream_mut(id) {
                        // The sender's window bounds what can arrive unread.
                        if !s.reset && !s.shut_rd {
                            s.rx.extend(bytes);
                        }
                    }
                    self.touch(id);
                }
                None => self.send(Packet { src: p.dst, dst: p.src, payload: Payload::Rst }),
            },
            Payload::Ack(n) => {
                if let Some(id) = self.streams.get(&key).copied() {
                    if let Some(s) = self.stream_mut(id) {
                        s.inflight = s.inflight.saturating_sub(n);
                    }
                    self.touch(id);
                }
            }
            Payload::Fin => {
                if let Some(id) = self.streams.get(&key).copied() {
                    if let Some(s) = self.stream_mut(id) {
                        s.peer_fin = true;
                    }
                    self.touch(id);
                }
            }
            Payload::Rst | Payload::ConnectTimeout => {
                let Some(id) = self.streams.remove(&key) else { return };
                let timeout = p.payload == Payload::ConnectTimeout;
                if let Some(s) = self.stream_mut(id) {
                    match s.state {
                        StreamState::Connecting => {
                            let e = if timeout { crate::errno::ETIMEDOUT } else { crate::errno::ECONNREFUSED };
                            s.state = StreamState::Failed(e);
                            s.error = e;
                        }
                        StreamState::Connected if !timeout => {
                            s.reset = true;
                            s.error = crate::errno::ECONNRESET;
                        }
                        _ => {}
                    }
                }
                self.touch(id);
            }
            Payload::Datagram(bytes) => {
                let Some(id) = self.dgram_for(p.dst) else {
                    if self.is_local(p.src.ip) {
                        self.port_unreachable(p.src, p.dst);
                    }
                    return;
                };
                if let Some(ObjKind::Dgram(d)) = self.objects.get_mut(&id).map(|o| &mut o.kind) {
                    if d.remote.is_some_and(|r| r != p.src) || d.queue.len() >= MAX_DATAGRAMS {
                        return;
                    }
                    d.queue.push_back((p.src, bytes));
                }
                self.touch(id);
            }
        }
    }

    /// A datagram from `src` on this node found no socket at `dst`: a sender connected to
    /// `dst` learns it (`ECONNREFUSED`), as Linux tells it through ICMP; an unconnected one
    /// does not. Across nodes the datagram is lost without a word, as behind a firewall.
    fn port_unreachable(&mut self, src: SockAddr, dst: SockAddr) {
        let Some(id) = self.dgram_for(src) else { return };
        if let Some(ObjKind::Dgram(d)) = self.objects.get_mut(&id).map(|o| &mut o.kind) {
            if d.remote == Some(dst) {
                d.error = crate::errno::ECONNREFUSED;
                self.touch(id);
            }
        }
    }

    /// Delivers the node's own packets until none is left.
    pub(crate) fn flush_local(&mut self) {
        while let Some(p) = self.local.pop_front() {
            self.receive(p);
        }
    }

    /// The pipe of the FIFO whose inode is `inode`, made for its first opener.
    pub(crate) fn fifo_pipe(&mut self, inode: u64) -> u64 {
        if let Some(f) = self.fifos.get(&inode) {
            return f.obj;
        }
        let obj = self.add(ObjKind::Pipe { buf: VecDeque::new(), readers: 0, writers: 0, cap: PIPE_SIZE });
        self.fifos.insert(inode, Fifo { obj, opened: [1, 1], waiting: BTreeMap::new() });
        obj
    }

    /// The readers and writers a pipe has now (a FIFO's that is not open: none).
    pub(crate) fn pipe_ends(&self, obj: u64) -> (u32, u32) {
        match self.objects.get(&obj).map(|o| &o.kind) {
            Some(ObjKind::Pipe { readers, writers, .. }) => (*readers, *writers),
            _ => (0, 0),
        }
    }

    /// Whether a read-only FIFO description opened with `quiet` holds back its hang-up: no
    /// writer is there and none came since it opened.
    pub(crate) fn fifo_quiet(&self, inode: u64, quiet: u64) -> bool {
        self.fifos.get(&inode).is_some_and(|f| f.opened[1] == quiet && self.pipe_ends(f.obj).1 == 0)
    }

    /// A pipe gains a reader and/or a writer (a FIFO's opener, who may be waiting).
    pub(crate) fn join_pipe(&mut self, inode: u64, obj: u64, read: bool, write: bool) {
        if let Some(Obj { kind: ObjKind::Pipe { readers, writers, .. }, .. }) = self.objects.get_mut(&obj) {
            *readers += u32::from(read);
            *writers += u32::from(write);
        }
        if let Some(f) = self.fifos.get_mut(&inode) {
            f.opened[0] += u64::from(read);
            f.opened[1] += u64::from(write);
        }
        self.touch(obj);
    }

    /// An anonymous pipe gains a reader or a writer (an end opened again through
    /// `/proc/self/fd`).
    pub(crate) fn reopen_pipe(&mut self, obj: u64, write: bool) {
        if let Some(Obj { kind: ObjKind::Pipe { readers, writers, .. }, .. }) = self.objects.get_mut(&obj) {
            *readers += u32::from(!write);
            *writers += u32::from(write);
        }
        self.touch(obj);
    }

    /// A pipe loses a reader and/or a writer (a description of one end closed, or of a FIFO);
    /// with neither left it goes, and a FIFO's next opener gets a new one.
    pub(crate) fn leave_pipe(&mut self, obj: u64, read: bool, write: bool) {
        let Some(Obj { kind: ObjKind::Pipe { readers, writers, .. }, .. }) = self.objects.get_mut(&obj) else {
            return;
        };
        *readers = readers.saturating_sub(u32::from(read));
        *writers = writers.saturating_sub(u32::from(write));
        let gone = *readers == 0 && *writers == 0;
        self.touch(obj);
        if gone {
            self.objects.remove(&obj);
            self.fifos.retain(|_, f| f.obj != obj);
        }
    }

    /// Releases an object whose last description was closed (a pipe: see
    /// [`Net::leave_pipe`]).
    pub(crate) fn release(&mut self, id: u64) {
        let Some(obj) = self.objects.remove(&id) else { return };
        let abort = obj.linger == Some(0);
        match obj.kind {
            ObjKind::Stream(s) => {
                if let Some(l) = s.local {
                    if self.listeners.get(&l) == Some(&id) {
                        self.listeners.remove(&l);
                    }
                    if self.bound_streams.get(&l) == Some(&id) {
                        self.bound_streams.remove(&l);
                    }
                }
                if let StreamState::Listening { queue, .. } = &s.state {
                    for c in queue.clone() {
                        self.release(c);
                    }
                }
                if let (Some(l), Some(r)) = (s.local, s.remote) {
                    if self.streams.get(&(l, r)) == Some(&id) {
                        self.streams.remove(&(l, r));
                        // Linux resets a connection closed with data its program never read
                        // (RFC 2525, 2.17), as it does one closed with a zero linger.
                        let payload = match s.state {
                            StreamState::Connected if (abort || !s.rx.is_empty()) && !s.reset => Some(Payload::Rst),
                            StreamState::Connected if !s.reset && !s.shut_wr => Some(Payload::Fin),
                            StreamState::Connecting => Some(Payload::Rst),
                            _ => None,
                        };
                        if let Some(payload) = payload {
                            self.send(Packet { src: l, dst: r, payload });
                        }
                    }
                }
            }
            ObjKind::Dgram(d) => {
                if let Some(l) = d.local {
                    if self.dgrams.get(&l) == Some(&id) {
                        self.dgrams.remove(&l);
                    }
                }
            }
            ObjKind::Unix(u) => {
                self.orphans.extend(u.msgs.iter().flat_map(|m| m.fds.iter().copied()));
                self.orphans.extend(u.rights.iter().flat_map(|r| r.2.iter().copied()));
                if let Some(k) = &u.key {
                    if self.unix_names.get(k) == Some(&id) {
                        self.unix_names.remove(k);
                    }
                }
                if let Some((_, queue)) = &u.listen {
                    for c in queue.clone() {
                        self.release(c);
                    }
                }
                // The peer of a connection sees both directions shut, and a reset if this end
                // closed with data unread (as Linux does).
                let unread = u.held() > 0;
                if let (true, Some(p)) = (u.connection(), u.peer) {
                    if let Some(Obj { kind: ObjKind::Unix(pu), .. }) = self.objects.get_mut(&p) {
                        if pu.peer == Some(id) {
                            pu.shut = SHUT_RCV | SHUT_SEND;
                            if unread {
                                pu.error = crate::errno::ECONNRESET;
                            }
                        }
                    }
                    self.touch(p);
                }
            }
            _ => {}
        }
        self.dirty = true;
    }

    /// Readiness of object `id` as `EPOLL*` bits (`EPOLLIN` 1, `EPOLLOUT` 4, `EPOLLERR` 8,
    /// `EPOLLHUP` 0x10, `EPOLLRDHUP` 0x2000); `epoll` instances of this node are ready
    /// when any of their registrations is (level-triggered view).
    pub(crate) fn readiness(&self, id: u64, fds: &crate::fd::FdTable) -> u32 {
        let Some(o) = self.objects.get(&id) else { return EPOLLERR | EPOLLHUP };
        match &o.kind {
            ObjKind::Stream(s) => match &s.state {
                StreamState::Fresh => EPOLLOUT | EPOLLHUP,
                StreamState::Listening { queue, .. } => {
                    if queue.is_empty() {
                        0
                    } else {
                        EPOLLIN
                    }
                }
                StreamState::Connecting => 0,
                StreamState::Failed(_) => EPOLLOUT | EPOLLERR | EPOLLHUP,
                StreamState::Connected => {
                    let mut r = 0;
                    if !s.rx.is_empty() || s.peer_fin || s.reset || s.shut_rd {
                        r |= EPOLLIN;
                    }
                    if s.peer_fin {
                        r |= EPOLLRDHUP;
                    }
                    if s.reset {
                        r |= EPOLLERR | EPOLLHUP | EPOLLRDHUP;
                    } else if s.peer_fin && s.shut_wr {
                        r |= EPOLLHUP;
                    }
                    if (!s.shut_wr && s.inflight < WINDOW) || s.reset {
                        r |= EPOLLOUT;
                    }
                    r
                }
            },
            ObjKind::Dgram(d) => {
                EPOLLOUT | if d.queue.is_empty() { 0 } else { EPOLLIN } | if d.error != 0 { EPOLLERR } else { 0 }
            }
            ObjKind::Netlink(n) => EPOLLOUT | if n.queue.is_empty() { 0 } else { EPOLLIN },
            ObjKind::Unix(u) => self.unix_readiness(id, u),
            ObjKind::Pipe { buf, readers, writers, cap } => {
                // Linux's `pipe_poll`: readable with bytes in it, hung up without writers.
                let mut r = 0;
                if !buf.is_empty() {
                    r |= EPOLLIN;
                }
                if *writers == 0 {
                    r |= EPOLLHUP;
                }
                if buf.len() < *cap {
                    r |= EPOLLOUT;
                }
                if *readers == 0 {
                    r |= EPOLLERR;
                }
                r
            }
            ObjKind::EventFd { value, .. } => {
                let mut r = 0;
                if *value > 0 {
                    r |= EPOLLIN;
                }
                if *value < u64::MAX - 1 {
                    r |= EPOLLOUT;
                }
                r
            }
            ObjKind::Epoll { interests } => {
                let any = interests.iter().any(|(&fd, i)| {
                    if i.disabled {
                        return false;
                    }
                    match fds.entry(fd).ok().filter(|e| e.desc == i.desc).and_then(|_| fds.get(fd).ok()) {
                        Some(f) => match crate::fd::object_of(&f.kind) {
                            Some((obj, _)) if obj != id => {
                                self.readiness(obj, fds) & (i.events | EPOLLERR | EPOLLHUP) != 0
                            }
                            Some(_) => false,
                            None => i.events & (EPOLLIN | EPOLLOUT) != 0,
                        },
                        None => false,
                    }
                });
                if any {
                    EPOLLIN
                } else {
                    0
                }
            }
        }
    }

    /// Readiness of the Unix socket `id`, as Linux's `unix_poll` and `unix_dgram_poll` give it.
    fn unix_readiness(&self, id: u64, u: &UnixSock) -> u32 {
        if let Some((_, queue)) = &u.listen {
            return if queue.is_empty() { 0 } else { EPOLLIN };
        }
        let mut r = 0;
        if u.held() > 0 || u.error != 0 {
            r |= EPOLLIN;
        }
        if u.error != 0 {
            r |= EPOLLERR;
        }
        if u.shut & SHUT_RCV != 0 {
            r |= EPOLLIN | EPOLLRDHUP;
        }
        // Linux: a connection-type socket not connected yet hangs up.
        if u.shut == SHUT_RCV | SHUT_SEND || (u.connection() && u.peer.is_none()) {
            r |= EPOLLHUP;
        }
        let peer = u.peer.and_then(|p| match self.objects.get(&p).map(|o| &o.kind) {
            Some(ObjKind::Unix(pu)) => Some(pu),
            _ => None,
        });
        if peer.is_none_or(|pu| !pu.full(1, id)) {
            r |= EPOLLOUT;
        }
        r
    }

    /// The generation of object `id` (0 if gone).
    pub(crate) fn gen(&self, id: u64) -> u64 {
        self.objects.get(&id).map_or(0, |o| o.gen)
    }
}

/// `EPOLLIN`.
pub const EPOLLIN: u32 = 0x1;
/// `EPOLLPRI`.
pub const EPOLLPRI: u32 = 0x2;
/// `EPOLLOUT`.
pub const EPOLLOUT: u32 = 0x4;
/// `EPOLLERR`.
pub const EPOLLERR: u32 = 0x8;
/// `EPOLLHUP`.
pub const EPOLLHUP: u32 = 0x10;
/// `EPOLLRDNORM`.
pub const EPOLLRDNORM: u32 = 0x40;
/// `EPOLLWRNORM`.
pub const EPOLLWRNORM: u32 = 0x100;
/// `EPOLLRDHUP`.
pub const EPOLLRDHUP: u32 = 0x2000;
/// `EPOLLEXCLUSIVE`.
pub const EPOLLEXCLUSIVE: u32 = 1 << 28;
/// `EPOLLWAKEUP`.
pub const EPOLLWAKEUP: u32 = 1 << 29;
/// `EPOLLONESHOT`.
pub const EPOLLONESHOT: u32 = 1 << 30;
/// `EPOLLET`.
pub const EPOLLET: u32 = 1 << 31;
