//! Readiness: what `poll`, `select` and `epoll` see of an object, as `EPOLL*` bits, and an epoll
//! instance's registrations.

use serde::{Deserialize, Serialize};

use super::{Net, ObjKind, StreamState, UnixSock, SHUT_RCV, SHUT_SEND, WINDOW};

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

impl Net {
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
}
