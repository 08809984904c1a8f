//! The poll readiness of each I/O object of [`Net`], as `poll`, `select` and `epoll` see it.
//!
//! Here and not in [`crate::net`] because an epoll instance is ready when any description it
//! watches is, which it finds through the fd table: the objects' own readiness needs only
//! the network, an epoll instance's needs the files too. [`OpenFile::readiness`] limits an
//! object's readiness to the end a description holds.
//!
//! [`OpenFile::readiness`]: super::fd::OpenFile::readiness

use super::fd::{object_of, FdTable};
use crate::abi::epoll::{EPOLLERR, EPOLLHUP, EPOLLIN, EPOLLOUT, EPOLLRDHUP};
use crate::net::{Net, ObjKind, StreamState, UnixSock, SHUT_RCV, SHUT_SEND, WINDOW};

impl Net {
    /// Readiness of object `id` as `EPOLL*` bits (`EPOLLIN` 1, `EPOLLOUT` 4, `EPOLLERR` 8,
    /// `EPOLLHUP` 0x10, `EPOLLRDHUP` 0x2000); `epoll` instances of this node are ready
    /// when any of their registrations is (level-triggered view).
    pub(crate) fn readiness(&self, id: u64, fds: &FdTable) -> u32 {
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
                        Some(f) => match object_of(&f.kind) {
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
