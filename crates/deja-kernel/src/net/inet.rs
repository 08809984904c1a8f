//! AF_INET and AF_INET6 sockets: TCP at the connection level and UDP datagrams, the packets
//! between sockets, and how a node sends, routes to itself and receives them (flow control by
//! the sender's window, ports, the dual-stack wildcard).

use crate::prelude::*;
use alloc::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::{mapped, node_v6, Net, ObjKind, SockAddr, LOOPBACK6};

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

/// `(IPPROTO_IPV6, IPV6_V6ONLY)`, as a socket option key.
pub(crate) const IPV6_V6ONLY: (i32, i32) = (41, 26);

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

impl Net {
    /// True if `ip` names this node: loopback (`127.0.0.0/8`, `::1`), unspecified, or its own
    /// address (IPv4, or IPv6 under [`NODE_PREFIX6`](super::NODE_PREFIX6)).
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
                            let e =
                                if timeout { crate::abi::errno::ETIMEDOUT } else { crate::abi::errno::ECONNREFUSED };
                            s.state = StreamState::Failed(e);
                            s.error = e;
                        }
                        StreamState::Connected if !timeout => {
                            s.reset = true;
                            s.error = crate::abi::errno::ECONNRESET;
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
                d.error = crate::abi::errno::ECONNREFUSED;
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
}
