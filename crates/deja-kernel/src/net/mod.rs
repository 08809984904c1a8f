//! In-kernel I/O objects of one node: AF_INET sockets, pipes, eventfds and epoll instances,
//! and the packets a node exchanges with the simulated network.
//!
//! Owns [`Net`], the node's one table of objects: sockets, pipes and FIFOs, eventfds and epoll
//! instances share it (one id space, one generation per object), which is why they are all
//! here. Uses only [`crate::abi`] and [`crate::persist`]; the fd table, what a description does
//! and each object's poll readiness are above it, in [`crate::files`], and the syscalls in
//! `syscalls/sys_net/`.
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
//!
//! # Layout
//!
//! This module holds the node's table of objects (`Net`), what an object is and the options it
//! carries, their checks when restored, and what happens when an object's last description
//! closes; `addr.rs` holds the socket addresses, `inet.rs` the TCP and UDP sockets, the packets
//! between them and their delivery, `unix.rs` the Unix-domain sockets, `pipe.rs` pipes and
//! FIFOs, and `epoll.rs` epoll's registrations. The readiness `poll`, `select` and `epoll` see
//! of each object is in `files/readiness.rs` (an epoll instance's needs the fd table), the
//! `EPOLL*` bits in [`crate::abi::epoll`].

use crate::prelude::*;
use alloc::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::persist::{ensure, Persist, RestoreError};

mod addr;
mod epoll;
mod inet;
mod pipe;
mod unix;

pub use addr::{mapped, node_v6, SockAddr, LOOPBACK6, NODE_PREFIX6};
pub(crate) use epoll::Interest;
pub(crate) use inet::{DgramSock, StreamSock, StreamState, IPV6_V6ONLY};
pub use inet::{Packet, Payload, ACK_EVERY, EPHEMERAL_FIRST, MAX_DATAGRAM, MAX_DATAGRAMS, WINDOW};
pub(crate) use pipe::Fifo;
pub use pipe::{PIPE_BUF, PIPE_MAX_SIZE, PIPE_SIZE};
pub(crate) use unix::{UnixKey, UnixMsg, UnixSock, SHUT_RCV, SHUT_SEND};
pub use unix::{UNIX_BUFFER, UNIX_DGRAM_QLEN, UNIX_MSG_COST};

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

    /// The generation of object `id` (0 if gone).
    pub(crate) fn gen(&self, id: u64) -> u64 {
        self.objects.get(&id).map_or(0, |o| o.gen)
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
                                pu.error = crate::abi::errno::ECONNRESET;
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
}
