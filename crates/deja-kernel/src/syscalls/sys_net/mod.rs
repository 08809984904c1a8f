//! Syscalls on sockets, pipes, eventfds and epoll, and `poll`/`ppoll`/`select`/`pselect6`.
//!
//! The objects and the network model are in [`crate::net`]. A call that cannot complete now on
//! a blocking descriptor blocks its thread ([`Kernel::block_io`]) and is served again whenever
//! an object changes; its timeout (`SO_RCVTIMEO`, `SO_SNDTIMEO`, a poll or epoll timeout) runs
//! on the virtual clock.
//!
//! This module holds the socket calls themselves (create, bind, listen, accept, connect,
//! shutdown, names and options) and the helpers the others share; [`transfer`] moves bytes
//! (`send*`/`recv*` and the shared receive and send paths), [`ready`] holds pipes,
//! eventfds, epoll and the readiness waits (`poll`, `select`), and [`fifo`] opens FIFOs.

use crate::prelude::*;
use alloc::collections::VecDeque;

use crate::abi::epoll::*;
use crate::abi::errno::*;
use crate::abi::file::*;
use crate::files::fd::*;
use crate::kernel::{Kernel, SysResult, SysStop, MAX_IO};
use crate::mm::mappings::Access;
use crate::net::*;
use crate::Memory;

mod fifo;
mod netlink;
mod ready;
mod splice;
mod transfer;
pub(crate) mod unix;

const AF_UNSPEC: u16 = 0;
const AF_INET: u64 = 2;
const AF_INET6: u64 = 10;
const IPPROTO_IPV6: i32 = 41;
const SOCK_STREAM: u64 = 1;
const SOCK_DGRAM: u64 = 2;
const SOCK_NONBLOCK: u64 = 0o4000;
const SOCK_CLOEXEC: u64 = 0o2000000;
const MSG_PEEK: u32 = 0x2;
const MSG_TRUNC: u32 = 0x20;
const MSG_DONTWAIT: u32 = 0x40;
const MSG_WAITALL: u32 = 0x100;
const MSG_CMSG_CLOEXEC: u32 = 0x4000_0000;
const MSG_NOSIGNAL: u32 = 0x4000;
const SOL_SOCKET: i32 = 1;
const SO_TYPE: i32 = 3;
const SO_ERROR: i32 = 4;
const SO_SNDBUF: i32 = 7;
const SO_RCVBUF: i32 = 8;
const SO_LINGER: i32 = 13;
const SO_PASSCRED: i32 = 16;
const SO_RCVTIMEO: i32 = 20;
const SO_SNDTIMEO: i32 = 21;
const SO_ACCEPTCONN: i32 = 30;
const SO_DOMAIN: i32 = 39;
const SO_PROTOCOL: i32 = 38;
const EFD_SEMAPHORE: u64 = 1;
const EPOLL_CTL_ADD: u64 = 1;
const EPOLL_CTL_DEL: u64 = 2;
const EPOLL_CTL_MOD: u64 = 3;
/// Size of `struct sockaddr_in`.
const SOCKADDR_IN: u32 = 16;
/// Size of `struct sockaddr_in6`.
const SOCKADDR_IN6: u32 = 28;
/// The shortest `sockaddr_in6` Linux takes (RFC 2133's, without `sin6_scope_id`).
const SOCKADDR_IN6_MIN: u64 = 24;

/// A timeval (`{sec, usec}`) or timespec in ns, from 16 bytes.
fn duration_ns(b: &[u8; 16], nanos: bool) -> Result<u64, i32> {
    let sec = i64::from_le_bytes(b[..8].try_into().unwrap_or_default());
    let sub = i64::from_le_bytes(b[8..].try_into().unwrap_or_default());
    let limit = if nanos { 1_000_000_000 } else { 1_000_000 };
    if sec < 0 || !(0..limit).contains(&sub) {
        return Err(EINVAL);
    }
    let sub_ns = if nanos { sub as u64 } else { sub as u64 * 1000 };
    Ok((sec as u64).saturating_mul(1_000_000_000).saturating_add(sub_ns))
}

/// A `struct msghdr`'s name address, name length and iovecs.
type MsgHdr = (u64, u64, Vec<(u64, u64)>);

impl Kernel {
    /// The object behind `fd`, its pipe end and the description's flags.
    fn object(&self, fd: i32) -> Result<(u64, Option<bool>, u32), i32> {
        let f = self.files.fds.get(fd)?;
        let (o, end) = object_of(&f.kind).ok_or(EINVAL)?;
        Ok((o, end, f.flags))
    }

    /// True if `fd` names a [`crate::net`] object (served by this module's read and write).
    pub(crate) fn is_object(&self, fd: i32) -> bool {
        self.files.fds.get(fd).is_ok_and(|f| object_of(&f.kind).is_some())
    }

    /// The socket object behind `fd` and the description flags.
    fn socket(&self, fd: u64) -> Result<(u64, u32), i32> {
        let f = self.files.fds.get(fd as i32)?;
        Ok((f.kind.socket().ok_or(ENOTSOCK)?, f.flags))
    }

    fn obj(&self, id: u64) -> Result<&Obj, i32> {
        self.net.objects.get(&id).ok_or(EBADF)
    }

    fn obj_mut(&mut self, id: u64) -> Result<&mut Obj, i32> {
        self.net.objects.get_mut(&id).ok_or(EBADF)
    }

    /// True if object `id` is an `AF_INET6` socket.
    fn inet6(&self, id: u64) -> bool {
        self.net.objects.get(&id).is_some_and(|o| o.inet6)
    }

    /// The unspecified address of the family of socket `id`, at `port`.
    fn any_addr(&self, id: u64, port: u16) -> SockAddr {
        if self.inet6(id) {
            SockAddr::v6([0; 16], port)
        } else {
            SockAddr::new([0; 4], port)
        }
    }

    /// Reads the address a program gives socket `id`: a `sockaddr_in` for an `AF_INET` socket,
    /// a `sockaddr_in6` for an `AF_INET6` one; `AF_UNSPEC` is returned as such for the callers
    /// that give it a meaning.
    fn read_sockaddr(&self, mem: &mut dyn Memory, id: u64, addr: u64, len: u64) -> Result<(u16, SockAddr), i32> {
        if (len as i64) < 2 {
            return Err(EINVAL);
        }
        let mut b = [0u8; SOCKADDR_IN6 as usize];
        let n = len.min(u64::from(SOCKADDR_IN6)) as usize;
        self.process.mappings.copy_in(mem, addr, &mut b[..n])?;
        let family = u16::from_le_bytes([b[0], b[1]]);
        let port = u16::from_be_bytes([b[2], b[3]]);
        if family == AF_UNSPEC {
            return Ok((family, self.any_addr(id, 0)));
        }
        if self.inet6(id) {
            if u64::from(family) != AF_INET6 {
                return Err(EAFNOSUPPORT);
            }
            if len < SOCKADDR_IN6_MIN {
                return Err(EINVAL);
            }
            let mut ip = [0u8; 16];
            ip.copy_from_slice(&b[8..24]);
            return Ok((family, SockAddr::v6(ip, port)));
        }
        if u64::from(family) != AF_INET {
            return Err(EAFNOSUPPORT);
        }
        if len < u64::from(SOCKADDR_IN) {
            return Err(EINVAL);
        }
        Ok((family, SockAddr::new([b[4], b[5], b[6], b[7]], port)))
    }

    /// Writes `sa` as socket `id`'s family gives it (a `sockaddr_in`, or a `sockaddr_in6` with
    /// IPv4 addresses IPv4-mapped) to `addr`, truncated to `*lenp`, and sets `*lenp` to its size.
    fn write_sockaddr(&self, mem: &mut dyn Memory, id: u64, addr: u64, lenp: u64, sa: SockAddr) -> Result<(), i32> {
        if addr == 0 || lenp == 0 {
            return Ok(());
        }
        let len = self.process.mappings.read_u32(mem, lenp)?;
        if (len as i32) < 0 {
            return Err(EINVAL);
        }
        let mut b = [0u8; SOCKADDR_IN6 as usize];
        b[2..4].copy_from_slice(&sa.port.to_be_bytes());
        let size = if self.inet6(id) {
            b[..2].copy_from_slice(&(AF_INET6 as u16).to_le_bytes());
            b[8..24].copy_from_slice(&sa.ip);
            SOCKADDR_IN6
        } else {
            b[..2].copy_from_slice(&(AF_INET as u16).to_le_bytes());
            b[4..8].copy_from_slice(&sa.v4().unwrap_or_default());
            SOCKADDR_IN
        };
        let n = (len as usize).min(size as usize);
        self.process.mappings.copy_out(mem, addr, &b[..n])?;
        self.process.mappings.copy_out(mem, lenp, &size.to_le_bytes())?;
        Ok(())
    }

    /// Where a packet for `dst` from socket `id` goes: the unspecified address is loopback of
    /// its family; an IPv4 address is unreachable from an `IPV6_V6ONLY` socket.
    fn destination(&self, id: u64, dst: SockAddr) -> Result<SockAddr, i32> {
        let dst = match dst.v4() {
            Some([0, 0, 0, 0]) => SockAddr::new([127, 0, 0, 1], dst.port),
            None if dst.ip == [0; 16] => SockAddr::v6(LOOPBACK6, dst.port),
            _ => dst,
        };
        if dst.v4().is_some() && self.net.v6only(id) {
            return Err(ENETUNREACH);
        }
        if !self.net.reachable(dst.ip) {
            return Err(ENETUNREACH);
        }
        Ok(dst)
    }

    pub(crate) fn sys_socket(&mut self, domain: u64, ty: u64, proto: u64) -> SysResult {
        if domain == unix::AF_UNIX {
            return self.unix_socket(ty, proto);
        }
        if domain == netlink::AF_NETLINK {
            return self.netlink_socket(ty, proto);
        }
        if domain != AF_INET && domain != AF_INET6 {
            return Err(EAFNOSUPPORT.into());
        }
        if ty & !(0xf | SOCK_NONBLOCK | SOCK_CLOEXEC) != 0 {
            return Err(EINVAL.into());
        }
        let kind = match (ty & 0xf, proto) {
            (SOCK_STREAM, 0 | 6) => ObjKind::Stream(StreamSock::new(None, None, StreamState::Fresh)),
            (SOCK_DGRAM, 0 | 17) => {
                ObjKind::Dgram(DgramSock { local: None, remote: None, queue: VecDeque::new(), error: 0 })
            }
            (SOCK_STREAM | SOCK_DGRAM, _) => return Err(EPROTONOSUPPORT.into()),
            _ => return Err(EINVAL.into()),
        };
        let fd = self.new_object(
            kind,
            O_RDWR | if ty & SOCK_NONBLOCK != 0 { O_NONBLOCK } else { 0 },
            ty & SOCK_CLOEXEC != 0,
        )?;
        let (id, _) = self.socket(fd)?;
        self.obj_mut(id)?.inet6 = domain == AF_INET6;
        Ok(fd)
    }

    /// Installs a description for a new object.
    fn new_object(&mut self, kind: ObjKind, flags: u32, cloexec: bool) -> SysResult {
        let limit = self.nofile();
        if !self.files.fds.has_free(limit) {
            return Err(EMFILE.into());
        }
        let id = self.net.add(kind);
        let file = match &self.obj(id)?.kind {
            ObjKind::EventFd { .. } => FileKind::EventFd(id),
            ObjKind::Epoll { .. } => FileKind::Epoll(id),
            _ => FileKind::Socket(id),
        };
        Ok(self.files.fds.install(OpenFile::new(file, flags), 0, limit, cloexec)? as u64)
    }

    pub(crate) fn sys_bind(&mut self, mem: &mut dyn Memory, fd: u64, addr: u64, len: u64) -> SysResult {
        let (id, _) = self.socket(fd)?;
        if self.unix(id).is_some() {
            return self.unix_bind(mem, id, addr, len);
        }
        if self.netlink(id).is_some() {
            return self.netlink_bind(mem, id, addr, len);
        }
        if len < if self.inet6(id) { SOCKADDR_IN6_MIN } else { u64::from(SOCKADDR_IN) } {
            return Err(EINVAL.into());
        }
        let (family, mut sa) = self.read_sockaddr(mem, id, addr, len)?;
        if family == AF_UNSPEC {
            return Err(EAFNOSUPPORT.into());
        }
        if sa.v4().is_some() && self.net.v6only(id) {
            return Err(EINVAL.into());
        }
        if !self.net.is_local(sa.ip) {
            return Err(EADDRNOTAVAIL.into());
        }
        let stream = matches!(self.obj(id)?.kind, ObjKind::Stream(_));
        let bound = match &self.obj(id)?.kind {
            ObjKind::Stream(s) => s.local.is_some() || s.state != StreamState::Fresh,
            ObjKind::Dgram(d) => d.local.is_some(),
            _ => true,
        };
        if bound {
            return Err(EINVAL.into());
        }
        if sa.port == 0 {
            sa.port = self.net.ephemeral(stream).ok_or(EADDRINUSE)?;
        } else if self.addr_conflict(sa, self.net.v6only(id), stream) {
            return Err(EADDRINUSE.into());
        }
        match &mut self.obj_mut(id)?.kind {
            ObjKind::Stream(s) => s.local = Some(sa),
            ObjKind::Dgram(d) => d.local = Some(sa),
            _ => {}
        }
        if stream {
            self.net.bound_streams.insert(sa, id);
        } else {
            self.net.dgrams.insert(sa, id);
        }
        Ok(0)
    }

    /// True if binding `sa` (`only6`: from an `IPV6_V6ONLY` socket) would clash with a socket
    /// of the same kind: their sets of addresses meet on the same port.
    fn addr_conflict(&self, sa: SockAddr, only6: bool, stream: bool) -> bool {
        let clash = |(a, id): (&SockAddr, &u64)| a.port == sa.port && overlap(*a, self.net.v6only(*id), sa, only6);
        if stream {
            self.net.listeners.iter().chain(self.net.bound_streams.iter()).any(clash)
        } else {
            self.net.dgrams.iter().any(clash)
        }
    }

    pub(crate) fn sys_listen(&mut self, fd: u64, backlog: u64) -> SysResult {
        let (id, _) = self.socket(fd)?;
        let backlog = (backlog as i32).clamp(1, 4096) as u32;
        if self.unix(id).is_some() {
            return self.unix_listen(id, backlog);
        }
        let local = match &self.obj(id)?.kind {
            ObjKind::Stream(s) => match s.state {
                StreamState::Fresh => s.local,
                StreamState::Listening { .. } => {
                    if let ObjKind::Stream(StreamSock { state: StreamState::Listening { backlog: b, .. }, .. }) =
                        &mut self.obj_mut(id)?.kind
                    {
                        *b = backlog;
                    }
                    return Ok(0);
                }
                _ => return Err(EINVAL.into()),
            },
            _ => return Err(EOPNOTSUPP.into()),
        };
        let local = match local {
            Some(l) => l,
            None => {
                let port = self.net.ephemeral(true).ok_or(EADDRINUSE)?;
                self.any_addr(id, port)
            }
        };
        self.net.bound_streams.remove(&local);
        self.net.listeners.insert(local, id);
        if let ObjKind::Stream(s) = &mut self.obj_mut(id)?.kind {
            s.local = Some(local);
            s.state = StreamState::Listening { backlog, queue: VecDeque::new() };
        }
        Ok(0)
    }

    pub(crate) fn sys_accept4(&mut self, mem: &mut dyn Memory, fd: u64, addr: u64, lenp: u64, flags: u64) -> SysResult {
        if flags & !(SOCK_NONBLOCK | SOCK_CLOEXEC) != 0 {
            return Err(EINVAL.into());
        }
        let (id, fl) = self.socket(fd)?;
        if self.unix(id).is_some() {
            return self.unix_accept(mem, id, fl, addr, lenp, flags);
        }
        let timeout = self.obj(id)?.rcvtimeo;
        let conn = match &mut self.obj_mut(id)?.kind {
            ObjKind::Stream(StreamSock { state: StreamState::Listening { queue, .. }, .. }) => queue.pop_front(),
            ObjKind::Stream(_) => return Err(EINVAL.into()),
            _ => return Err(EOPNOTSUPP.into()),
        };
        let Some(conn) = conn else {
            if fl & O_NONBLOCK != 0 {
                return Err(EAGAIN.into());
            }
            return self.block_io((timeout > 0).then_some(timeout), Err(EAGAIN.into()));
        };
        let limit = self.nofile();
        let nb = if flags & SOCK_NONBLOCK != 0 { O_NONBLOCK } else { 0 };
        let newfd = match self.files.fds.install(
            OpenFile::new(FileKind::Socket(conn), O_RDWR | nb),
            0,
            limit,
            flags & SOCK_CLOEXEC != 0,
        ) {
            Ok(f) => f,
            Err(e) => {
                // Put it back: the connection stays queued.
                if let ObjKind::Stream(StreamSock { state: StreamState::Listening { queue, .. }, .. }) =
                    &mut self.obj_mut(id)?.kind
                {
                    queue.push_front(conn);
                }
                return Err(e.into());
            }
        };
        let peer = match &self.obj(conn)?.kind {
            ObjKind::Stream(StreamSock { remote: Some(r), .. }) => *r,
            _ => self.any_addr(conn, 0),
        };
        if addr != 0 {
            if let Err(e) = self.write_sockaddr(mem, conn, addr, lenp, peer) {
                let f = self.files.fds.close(newfd).ok().flatten();
                self.dropped(f);
                return Err(e.into());
            }
        }
        Ok(newfd as u64)
    }

    pub(crate) fn sys_connect(&mut self, mem: &mut dyn Memory, fd: u64, addr: u64, len: u64) -> SysResult {
        let (id, fl) = self.socket(fd)?;
        if self.unix(id).is_some() {
            return self.unix_connect(mem, id, fl, addr, len);
        }
        let (family, dst) = self.read_sockaddr(mem, id, addr, len)?;
        let retry = self.retrying();
        let obj = self.net.objects.get(&id).ok_or(EBADF)?;
        let stream = match &obj.kind {
            ObjKind::Stream(s) => s.clone(),
            ObjKind::Dgram(d) => {
                let local = d.local;
                if family == AF_UNSPEC {
                    if let ObjKind::Dgram(d) = &mut self.obj_mut(id)?.kind {
                        d.remote = None;
                    }
                    return Ok(0);
                }
                let dst = self.destination(id, dst)?;
                if local.is_none() {
                    self.autobind_dgram(id)?;
                }
                if let ObjKind::Dgram(d) = &mut self.obj_mut(id)?.kind {
                    d.remote = Some(dst);
                }
                return Ok(0);
            }
            _ => return Err(ENOTSOCK.into()),
        };
        match stream.state {
            StreamState::Connected if retry => return Ok(0),
            StreamState::Connected => return Err(EISCONN.into()),
            StreamState::Connecting if retry => return self.block_io(None, Err(ETIMEDOUT.into())),
            StreamState::Connecting => return Err(EALREADY.into()),
            StreamState::Failed(e) => {
                self.reset_failed(id);
                return Err(e.into());
            }
            StreamState::Listening { .. } => return Err(EISCONN.into()),
            StreamState::Fresh => {}
        }
        if family == AF_UNSPEC {
            return Ok(0);
        }
        let dst = self.destination(id, dst)?;
        let src_ip = self.net.source_ip(dst.ip);
        let local = match stream.local {
            Some(l) => {
                self.net.bound_streams.remove(&l);
                SockAddr::v6(if l.is_unspecified() { src_ip } else { l.ip }, l.port)
            }
            None => SockAddr::v6(src_ip, self.net.ephemeral(true).ok_or(EADDRNOTAVAIL)?),
        };
        if self.net.streams.contains_key(&(local, dst)) {
            return Err(EADDRINUSE.into());
        }
        if let ObjKind::Stream(s) = &mut self.obj_mut(id)?.kind {
            s.local = Some(local);
            s.remote = Some(dst);
            s.state = StreamState::Connecting;
        }
        self.net.streams.insert((local, dst), id);
        self.net.send(Packet { src: local, dst, payload: Payload::Syn });
        self.net.flush_local();
        match &self.obj(id)?.kind {
            ObjKind::Stream(StreamSock { state: StreamState::Connected, .. }) => Ok(0),
            ObjKind::Stream(StreamSock { state: StreamState::Failed(e), .. }) => {
                let e = *e;
                self.reset_failed(id);
                Err(e.into())
            }
            _ if fl & O_NONBLOCK != 0 => Err(EINPROGRESS.into()),
            _ => self.block_io(None, Err(ETIMEDOUT.into())),
        }
    }

    /// After a failed connect has been reported: the socket can connect again.
    fn reset_failed(&mut self, id: u64) {
        if let Some(Obj { kind: ObjKind::Stream(s), .. }) = self.net.objects.get_mut(&id) {
            s.state = StreamState::Fresh;
            s.error = 0;
            s.local = None;
            s.remote = None;
        }
    }

    /// Binds an unbound UDP socket to an ephemeral port on every address.
    fn autobind_dgram(&mut self, id: u64) -> Result<SockAddr, i32> {
        let port = self.net.ephemeral(false).ok_or(EAGAIN)?;
        let sa = self.any_addr(id, port);
        if let ObjKind::Dgram(d) = &mut self.obj_mut(id)?.kind {
            d.local = Some(sa);
        }
        self.net.dgrams.insert(sa, id);
        Ok(sa)
    }

    pub(crate) fn sys_shutdown(&mut self, fd: u64, how: u64) -> SysResult {
        let (id, _) = self.socket(fd)?;
        if how > 2 {
            return Err(EINVAL.into());
        }
        if self.unix(id).is_some() {
            return self.unix_shutdown(id, how);
        }
        let mut fin = None;
        match &mut self.obj_mut(id)?.kind {
            ObjKind::Stream(s) if s.state == StreamState::Connected => {
                if how != 1 {
                    s.shut_rd = true;
                }
                if how != 0 && !s.shut_wr {
                    s.shut_wr = true;
                    if !s.reset {
                        fin = s.local.zip(s.remote);
                    }
                }
            }
            ObjKind::Stream(_) | ObjKind::Dgram(_) => return Err(ENOTCONN.into()),
            _ => return Err(ENOTSOCK.into()),
        }
        if let Some((src, dst)) = fin {
            self.net.send(Packet { src, dst, payload: Payload::Fin });
        }
        self.net.touch(id);
        Ok(0)
    }

    pub(crate) fn sys_getsockname(
        &mut self,
        mem: &mut dyn Memory,
        fd: u64,
        addr: u64,
        lenp: u64,
        peer: bool,
    ) -> SysResult {
        let (id, _) = self.socket(fd)?;
        if self.unix(id).is_some() {
            return self.unix_getname(mem, id, addr, lenp, peer);
        }
        if self.netlink(id).is_some() {
            return self.netlink_getname(mem, id, addr, lenp, peer);
        }
        let (local, remote, connected) = match &self.obj(id)?.kind {
            ObjKind::Stream(s) => (s.local, s.remote, s.state == StreamState::Connected),
            ObjKind::Dgram(d) => (d.local, d.remote, d.remote.is_some()),
            _ => return Err(ENOTSOCK.into()),
        };
        let sa = if peer {
            match remote {
                Some(r) if connected => r,
                _ => return Err(ENOTCONN.into()),
            }
        } else {
            local.unwrap_or(self.any_addr(id, 0))
        };
        access_nonnull(addr)?;
        self.write_sockaddr(mem, id, addr, lenp, sa)?;
        Ok(0)
    }

    pub(crate) fn sys_setsockopt(
        &mut self,
        mem: &mut dyn Memory,
        fd: u64,
        level: u64,
        name: u64,
        val: u64,
        len: u64,
    ) -> SysResult {
        let (id, _) = self.socket(fd)?;
        let (level, name) = (level as i32, name as i32);
        if (len as i32) < 0 {
            return Err(EINVAL.into());
        }
        if level == SOL_SOCKET && (name == SO_RCVTIMEO || name == SO_SNDTIMEO) {
            if len < 16 {
                return Err(EINVAL.into());
            }
            let mut b = [0u8; 16];
            self.process.mappings.copy_in(mem, val, &mut b)?;
            let ns = duration_ns(&b, false)?;
            let o = self.obj_mut(id)?;
            if name == SO_RCVTIMEO {
                o.rcvtimeo = ns;
            } else {
                o.sndtimeo = ns;
            }
            return Ok(0);
        }
        if level == SOL_SOCKET && name == SO_LINGER {
            if len < 8 {
                return Err(EINVAL.into());
            }
            let mut b = [0u8; 8];
            self.process.mappings.copy_in(mem, val, &mut b)?;
            let on = i32::from_le_bytes(b[..4].try_into().unwrap_or_default());
            let secs = i32::from_le_bytes(b[4..].try_into().unwrap_or_default());
            let o = self.obj_mut(id)?;
            o.linger = (on != 0).then_some(secs.max(0) as u32);
            return Ok(0);
        }
        if len < 4 {
            return Err(EINVAL.into());
        }
        if level == IPPROTO_IPV6 && self.unix(id).is_none() {
            if !self.inet6(id) {
                return Err(ENOPROTOOPT.into());
            }
            let bound = match &self.obj(id)?.kind {
                ObjKind::Stream(s) => s.local.is_some(),
                ObjKind::Dgram(d) => d.local.is_some(),
                _ => false,
            };
            // Linux: a socket's family of addresses is fixed once it has a port.
            if (level, name) == IPV6_V6ONLY && bound {
                return Err(EINVAL.into());
            }
        }
        let v = self.process.mappings.read_u32(mem, val)? as i32;
        self.obj_mut(id)?.options.insert((level, name), v);
        Ok(0)
    }

    pub(crate) fn sys_getsockopt(
        &mut self,
        mem: &mut dyn Memory,
        fd: u64,
        level: u64,
        name: u64,
        val: u64,
        lenp: u64,
    ) -> SysResult {
        let (id, _) = self.socket(fd)?;
        let (level, name) = (level as i32, name as i32);
        let len = self.process.mappings.read_u32(mem, lenp)? as i32;
        if len < 0 {
            return Err(EINVAL.into());
        }
        let unix = match level {
            SOL_SOCKET if self.unix(id).is_some() => self.unix_sockopt(id, name)?,
            _ => None,
        };
        let bytes: Vec<u8> = if let Some(b) = unix {
            b
        } else if level == SOL_SOCKET && (name == SO_RCVTIMEO || name == SO_SNDTIMEO) {
            let o = &self.obj(id)?;
            let ns = if name == SO_RCVTIMEO { o.rcvtimeo } else { o.sndtimeo };
            let mut b = (ns / 1_000_000_000).to_le_bytes().to_vec();
            b.extend_from_slice(&((ns % 1_000_000_000) / 1000).to_le_bytes());
            b
        } else if level == SOL_SOCKET && name == SO_LINGER {
            let linger = self.obj(id)?.linger;
            let mut b = i32::from(linger.is_some()).to_le_bytes().to_vec();
            b.extend_from_slice(&(linger.unwrap_or(0) as i32).to_le_bytes());
            b
        } else {
            let o = &self.obj(id)?;
            let stream = matches!(o.kind, ObjKind::Stream(_));
            let v: i32 = match (level, name) {
                (SOL_SOCKET, SO_ERROR) => {
                    let e = match &mut self.obj_mut(id)?.kind {
                        ObjKind::Stream(s) => core::mem::take(&mut s.error),
                        ObjKind::Dgram(d) => core::mem::take(&mut d.error),
                        _ => 0,
                    };
                    e
                }
                (SOL_SOCKET, SO_TYPE) => {
                    if stream {
                        SOCK_STREAM as i32
                    } else {
                        SOCK_DGRAM as i32
                    }
                }
                (SOL_SOCKET, SO_DOMAIN) => {
                    if o.inet6 {
                        AF_INET6 as i32
                    } else {
                        AF_INET as i32
                    }
                }
                (IPPROTO_IPV6, _) if !o.inet6 => return Err(ENOPROTOOPT.into()),
                (SOL_SOCKET, SO_PROTOCOL) => {
                    if stream {
                        6
                    } else {
                        17
                    }
                }
                (SOL_SOCKET, SO_ACCEPTCONN) => i32::from(matches!(
                    o.kind,
                    ObjKind::Stream(StreamSock { state: StreamState::Listening { .. }, .. })
                )),
                (SOL_SOCKET, SO_SNDBUF | SO_RCVBUF) => {
                    o.options.get(&(level, name)).map_or(212_992, |v| v.saturating_mul(2).max(4608))
                }
                _ => o.options.get(&(level, name)).copied().unwrap_or(0),
            };
            v.to_le_bytes().to_vec()
        };
        let n = (len as usize).min(bytes.len());
        self.process.mappings.copy_out(mem, val, &bytes[..n])?;
        self.process.mappings.copy_out(mem, lenp, &(n as u32).to_le_bytes())?;
        Ok(0)
    }

    /// The node's network attachment: its address, after which packets for other addresses go to
    /// [`Kernel::take_packets`] and a node with nothing to run is idle instead of deadlocked.
    pub fn attach_network(&mut self, address: [u8; 4]) {
        self.net.address = Some(address);
    }

    /// Packets the node sent to the network since the last call, in order.
    pub fn take_packets(&mut self) -> Vec<Packet> {
        core::mem::take(&mut self.net.outbox)
    }

    /// The (local, remote) addresses of the node's open TCP connections.
    pub fn connections(&self) -> Vec<(SockAddr, SockAddr)> {
        self.net.streams.keys().copied().collect()
    }
}

/// The addresses a bound socket takes: every one, every IPv6 one, every IPv4 one, or one.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Takes {
    All,
    All6,
    All4,
    One([u8; 16]),
}

fn takes(a: SockAddr, only6: bool) -> Takes {
    match a.v4() {
        Some([0, 0, 0, 0]) => Takes::All4,
        Some(_) => Takes::One(a.ip),
        None if a.ip == [0; 16] && only6 => Takes::All6,
        None if a.ip == [0; 16] => Takes::All,
        None => Takes::One(a.ip),
    }
}

/// True if two bound addresses share an address (their ports aside), as Linux decides whether
/// two binds clash: `::` without `IPV6_V6ONLY` holds `0.0.0.0` too.
fn overlap(a: SockAddr, a_only6: bool, b: SockAddr, b_only6: bool) -> bool {
    let v6 = |ip: &[u8; 16]| SockAddr::v6(*ip, 0).is_v6();
    match (takes(a, a_only6), takes(b, b_only6)) {
        (Takes::All, _) | (_, Takes::All) => true,
        (Takes::All6, Takes::All6) | (Takes::All4, Takes::All4) => true,
        (Takes::All6, Takes::All4) | (Takes::All4, Takes::All6) => false,
        (Takes::All6, Takes::One(ip)) | (Takes::One(ip), Takes::All6) => v6(&ip),
        (Takes::All4, Takes::One(ip)) | (Takes::One(ip), Takes::All4) => !v6(&ip),
        (Takes::One(x), Takes::One(y)) => x == y,
    }
}

fn access_ok_len(buf: u64, len: u64) -> Result<(), i32> {
    if buf.checked_add(len).is_none_or(|end| end > crate::mm::user_layout::USER_END) {
        return Err(EFAULT);
    }
    Ok(())
}

fn access_nonnull(addr: u64) -> Result<(), i32> {
    if addr == 0 {
        return Err(EFAULT);
    }
    Ok(())
}
