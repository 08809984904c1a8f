//! Unix-domain sockets: a connection is a pair of objects that point at each other, a write lands
//! in the peer's receive buffer within the same syscall, and a name is a path's inode or an
//! abstract name.

use crate::prelude::*;
use alloc::collections::VecDeque;

use serde::{Deserialize, Serialize};

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
    /// What the name is registered under in [`Net::unix_names`](super::Net::unix_names).
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
