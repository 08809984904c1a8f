//! Syscalls on sockets, pipes, eventfds and epoll, and `poll`/`ppoll`/`select`/`pselect6`.
//!
//! The objects and the network model are in [`crate::net`]. A call that cannot complete now on
//! a blocking descriptor blocks its thread ([`Kernel::block_io`]) and is served again whenever
//! an object changes; its timeout (`SO_RCVTIMEO`, `SO_SNDTIMEO`, a poll or epoll timeout) runs
//! on the virtual clock.

use std::collections::VecDeque;

use crate::errno::*;
use crate::fd::*;
use crate::kernel::{Kernel, Stop, SysResult, MAX_IO};
use crate::net::*;
use crate::vm::Access;
use crate::Memory;

const AF_UNSPEC: u16 = 0;
const AF_INET: u64 = 2;
const SOCK_STREAM: u64 = 1;
const SOCK_DGRAM: u64 = 2;
const SOCK_NONBLOCK: u64 = 0o4000;
const SOCK_CLOEXEC: u64 = 0o2000000;
const MSG_PEEK: u32 = 0x2;
const MSG_TRUNC: u32 = 0x20;
const MSG_DONTWAIT: u32 = 0x40;
const MSG_WAITALL: u32 = 0x100;
const SOL_SOCKET: i32 = 1;
const SO_TYPE: i32 = 3;
const SO_ERROR: i32 = 4;
const SO_SNDBUF: i32 = 7;
const SO_RCVBUF: i32 = 8;
const SO_LINGER: i32 = 13;
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
        let f = self.fds.get(fd)?;
        let (o, end) = object_of(&f.kind).ok_or(EINVAL)?;
        Ok((o, end, f.flags))
    }

    /// True if `fd` names a [`crate::net`] object (served by this module's read and write).
    pub(crate) fn is_object(&self, fd: i32) -> bool {
        self.fds.get(fd).is_ok_and(|f| object_of(&f.kind).is_some())
    }

    /// The socket object behind `fd` and the description flags.
    fn socket(&self, fd: u64) -> Result<(u64, u32), i32> {
        let f = self.fds.get(fd as i32)?;
        match f.kind {
            FileKind::Socket(o) => Ok((o, f.flags)),
            _ => Err(ENOTSOCK),
        }
    }

    fn obj(&self, id: u64) -> Result<&Obj, i32> {
        self.net.objects.get(&id).ok_or(EBADF)
    }

    fn obj_mut(&mut self, id: u64) -> Result<&mut Obj, i32> {
        self.net.objects.get_mut(&id).ok_or(EBADF)
    }

    fn read_sockaddr(&self, mem: &mut dyn Memory, addr: u64, len: u64) -> Result<(u16, SockAddr), i32> {
        if (len as i64) < 2 {
            return Err(EINVAL);
        }
        let mut b = [0u8; 16];
        let n = len.min(16) as usize;
        self.vm.copy_in(mem, addr, &mut b[..n])?;
        let family = u16::from_le_bytes([b[0], b[1]]);
        if family == AF_UNSPEC {
            return Ok((family, SockAddr::new([0; 4], 0)));
        }
        if u64::from(family) != AF_INET {
            return Err(EAFNOSUPPORT);
        }
        if len < u64::from(SOCKADDR_IN) {
            return Err(EINVAL);
        }
        Ok((family, SockAddr::new([b[4], b[5], b[6], b[7]], u16::from_be_bytes([b[2], b[3]]))))
    }

    /// Writes `sa` as a `sockaddr_in` to `addr` (truncated to `*lenp`) and sets `*lenp` to 16.
    fn write_sockaddr(&self, mem: &mut dyn Memory, addr: u64, lenp: u64, sa: SockAddr) -> Result<(), i32> {
        if addr == 0 || lenp == 0 {
            return Ok(());
        }
        let len = self.vm.read_u32(mem, lenp)?;
        if (len as i32) < 0 {
            return Err(EINVAL);
        }
        let mut b = [0u8; 16];
        b[..2].copy_from_slice(&(AF_INET as u16).to_le_bytes());
        b[2..4].copy_from_slice(&sa.port.to_be_bytes());
        b[4..8].copy_from_slice(&sa.ip);
        let n = (len as usize).min(16);
        self.vm.copy_out(mem, addr, &b[..n])?;
        self.vm.copy_out(mem, lenp, &SOCKADDR_IN.to_le_bytes())?;
        Ok(())
    }

    pub(crate) fn sys_socket(&mut self, domain: u64, ty: u64, proto: u64) -> SysResult {
        // AF_UNIX, AF_INET6 and every other family.
        if domain != AF_INET {
            return Err(EAFNOSUPPORT.into());
        }
        if ty & !(0xf | SOCK_NONBLOCK | SOCK_CLOEXEC) != 0 {
            return Err(EINVAL.into());
        }
        let kind = match (ty & 0xf, proto) {
            (SOCK_STREAM, 0 | 6) => ObjKind::Stream(StreamSock::new(None, None, StreamState::Fresh)),
            (SOCK_DGRAM, 0 | 17) => ObjKind::Dgram(DgramSock { local: None, remote: None, queue: VecDeque::new() }),
            (SOCK_STREAM | SOCK_DGRAM, _) => return Err(EPROTONOSUPPORT.into()),
            _ => return Err(EINVAL.into()),
        };
        self.new_object(kind, O_RDWR | if ty & SOCK_NONBLOCK != 0 { O_NONBLOCK } else { 0 }, ty & SOCK_CLOEXEC != 0)
    }

    /// Installs a description for a new object.
    fn new_object(&mut self, kind: ObjKind, flags: u32, cloexec: bool) -> SysResult {
        let limit = self.nofile();
        if !self.fds.has_free(limit) {
            return Err(EMFILE.into());
        }
        let id = self.net.add(kind);
        let file = match &self.obj(id)?.kind {
            ObjKind::EventFd { .. } => FileKind::EventFd(id),
            ObjKind::Epoll { .. } => FileKind::Epoll(id),
            _ => FileKind::Socket(id),
        };
        Ok(self.fds.install(OpenFile::new(file, flags), 0, limit, cloexec)? as u64)
    }

    pub(crate) fn sys_bind(&mut self, mem: &mut dyn Memory, fd: u64, addr: u64, len: u64) -> SysResult {
        let (id, _) = self.socket(fd)?;
        if len < u64::from(SOCKADDR_IN) {
            return Err(EINVAL.into());
        }
        let (family, mut sa) = self.read_sockaddr(mem, addr, len)?;
        if family == AF_UNSPEC {
            return Err(EAFNOSUPPORT.into());
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
        } else if self.addr_conflict(sa, stream) {
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

    /// True if binding `sa` would clash with a socket of the same kind.
    fn addr_conflict(&self, sa: SockAddr, stream: bool) -> bool {
        let clash = |a: &SockAddr| a.port == sa.port && (a.ip == sa.ip || a.is_unspecified() || sa.is_unspecified());
        if stream {
            self.net.listeners.keys().chain(self.net.bound_streams.keys()).any(clash)
        } else {
            self.net.dgrams.keys().any(clash)
        }
    }

    pub(crate) fn sys_listen(&mut self, fd: u64, backlog: u64) -> SysResult {
        let (id, _) = self.socket(fd)?;
        let backlog = (backlog as i32).clamp(1, 4096) as u32;
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
            None => SockAddr::new([0; 4], self.net.ephemeral(true).ok_or(EADDRINUSE)?),
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
        let newfd = match self.fds.install(
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
            ObjKind::Stream(s) => s.remote.unwrap_or(SockAddr::new([0; 4], 0)),
            _ => SockAddr::new([0; 4], 0),
        };
        if addr != 0 {
            if let Err(e) = self.write_sockaddr(mem, addr, lenp, peer) {
                let f = self.fds.close(newfd).ok().flatten();
                self.dropped(f);
                return Err(e.into());
            }
        }
        Ok(newfd as u64)
    }

    pub(crate) fn sys_connect(&mut self, mem: &mut dyn Memory, fd: u64, addr: u64, len: u64) -> SysResult {
        let (id, fl) = self.socket(fd)?;
        let (family, mut dst) = self.read_sockaddr(mem, addr, len)?;
        if dst.is_unspecified() {
            dst.ip = [127, 0, 0, 1];
        }
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
                if !self.net.reachable(dst.ip) {
                    return Err(ENETUNREACH.into());
                }
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
        if !self.net.reachable(dst.ip) {
            return Err(ENETUNREACH.into());
        }
        let src_ip = self.net.source_ip(dst.ip);
        let local = match stream.local {
            Some(l) => {
                self.net.bound_streams.remove(&l);
                SockAddr::new(if l.is_unspecified() { src_ip } else { l.ip }, l.port)
            }
            None => SockAddr::new(src_ip, self.net.ephemeral(true).ok_or(EADDRNOTAVAIL)?),
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
        let sa = SockAddr::new([0; 4], self.net.ephemeral(false).ok_or(EAGAIN)?);
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
            local.unwrap_or(SockAddr::new([0; 4], 0))
        };
        access_nonnull(addr)?;
        self.write_sockaddr(mem, addr, lenp, sa)?;
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
            self.vm.copy_in(mem, val, &mut b)?;
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
            self.vm.copy_in(mem, val, &mut b)?;
            let on = i32::from_le_bytes(b[..4].try_into().unwrap_or_default());
            self.obj_mut(id)?.options.insert((level, name), on);
            return Ok(0);
        }
        if len < 4 {
            return Err(EINVAL.into());
        }
        let v = self.vm.read_u32(mem, val)? as i32;
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
        let len = self.vm.read_u32(mem, lenp)? as i32;
        if len < 0 {
            return Err(EINVAL.into());
        }
        let bytes: Vec<u8> = if level == SOL_SOCKET && (name == SO_RCVTIMEO || name == SO_SNDTIMEO) {
            let o = &self.obj(id)?;
            let ns = if name == SO_RCVTIMEO { o.rcvtimeo } else { o.sndtimeo };
            let mut b = (ns / 1_000_000_000).to_le_bytes().to_vec();
            b.extend_from_slice(&((ns % 1_000_000_000) / 1000).to_le_bytes());
            b
        } else if level == SOL_SOCKET && name == SO_LINGER {
            let on = self.obj(id)?.options.get(&(level, name)).copied().unwrap_or(0);
            let mut b = on.to_le_bytes().to_vec();
            b.extend_from_slice(&0i32.to_le_bytes());
            b
        } else {
            let o = &self.obj(id)?;
            let stream = matches!(o.kind, ObjKind::Stream(_));
            let v: i32 = match (level, name) {
                (SOL_SOCKET, SO_ERROR) => {
                    let e = match &mut self.obj_mut(id)?.kind {
                        ObjKind::Stream(s) => std::mem::take(&mut s.error),
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
                (SOL_SOCKET, SO_DOMAIN) => AF_INET as i32,
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
        self.vm.copy_out(mem, val, &bytes[..n])?;
        self.vm.copy_out(mem, lenp, &(n as u32).to_le_bytes())?;
        Ok(0)
    }

    /// Receives from an object into `iov`: the byte count and, for a datagram, its sender.
    /// Blocks (or `EAGAIN`) when nothing is there.
    pub(crate) fn obj_recv(
        &mut self,
        mem: &mut dyn Memory,
        fd: i32,
        iov: &[(u64, u64)],
        flags: u32,
    ) -> Result<(u64, Option<SockAddr>, bool), Stop> {
        let (id, end, fl) = self.object(fd)?;
        if end == Some(true) {
            return Err(EBADF.into());
        }
        let want: u64 = iov.iter().map(|&(_, l)| l).sum::<u64>().min(MAX_IO);
        for &(base, len) in iov {
            self.vm.check(base, len.min(MAX_IO), Access::Write)?;
        }
        let nonblock = fl & O_NONBLOCK != 0 || flags & MSG_DONTWAIT != 0;
        let peek = flags & MSG_PEEK != 0;
        let timeout = self.net.objects.get(&id).map_or(0, |o| o.rcvtimeo);
        let obj = self.net.objects.get_mut(&id).ok_or(EBADF)?;
        let (data, from, trunc): (Vec<u8>, Option<SockAddr>, bool) = match &mut obj.kind {
            ObjKind::Stream(s) => {
                if s.state != StreamState::Connected {
                    return Err(ENOTCONN.into());
                }
                if flags & MSG_WAITALL != 0 && (s.rx.len() as u64) < want && !s.peer_fin && !s.reset && !nonblock {
                    return self
                        .block_io((timeout > 0).then_some(timeout), Err(EAGAIN.into()))
                        .map(|v| (v, None, false));
                }
                if s.rx.is_empty() {
                    if s.reset {
                        if s.error != 0 {
                            s.error = 0;
                            return Err(ECONNRESET.into());
                        }
                        return Ok((0, None, false));
                    }
                    if s.peer_fin || s.shut_rd || want == 0 {
                        return Ok((0, None, false));
                    }
                    if nonblock {
                        return Err(EAGAIN.into());
                    }
                    return self
                        .block_io((timeout > 0).then_some(timeout), Err(EAGAIN.into()))
                        .map(|v| (v, None, false));
                }
                let n = (want as usize).min(s.rx.len());
                let data: Vec<u8> =
                    if peek { s.rx.iter().take(n).copied().collect() } else { s.rx.drain(..n).collect() };
                if !peek {
                    s.consumed += n as u64;
                    if s.consumed >= ACK_EVERY || (s.rx.is_empty() && s.consumed > 0) {
                        if let (Some(src), Some(dst)) = (s.local, s.remote) {
                            let credit = std::mem::take(&mut s.consumed);
                            self.net.send(Packet { src, dst, payload: Payload::Ack(credit) });
                        }
                    }
                }
                (data, None, false)
            }
            ObjKind::Dgram(d) => {
                let Some((src, _)) = d.queue.front() else {
                    if nonblock {
                        return Err(EAGAIN.into());
                    }
                    return self
                        .block_io((timeout > 0).then_some(timeout), Err(EAGAIN.into()))
                        .map(|v| (v, None, false));
                };
                let src = *src;
                let msg = if peek {
                    d.queue.front().map(|m| m.1.clone()).unwrap_or_default()
                } else {
                    d.queue.pop_front().map(|m| m.1).unwrap_or_default()
                };
                let trunc = msg.len() as u64 > want;
                let mut msg = msg;
                let full = msg.len();
                msg.truncate(want as usize);
                if trunc && flags & MSG_TRUNC != 0 {
                    let n = msg.len();
                    self.scatter(mem, iov, &msg)?;
                    let _ = n;
                    return Ok((full as u64, Some(src), true));
                }
                (msg, Some(src), trunc)
            }
            ObjKind::Pipe { buf, writers, .. } => {
                if buf.is_empty() {
                    if *writers == 0 || want == 0 {
                        return Ok((0, None, false));
                    }
                    if nonblock {
                        return Err(EAGAIN.into());
                    }
                    return self.block_io(None, Err(EAGAIN.into())).map(|v| (v, None, false));
                }
                let n = (want as usize).min(buf.len());
                (buf.drain(..n).collect(), None, false)
            }
            ObjKind::EventFd { value, semaphore } => {
                if want < 8 {
                    return Err(EINVAL.into());
                }
                if *value == 0 {
                    if nonblock {
                        return Err(EAGAIN.into());
                    }
                    return self.block_io(None, Err(EAGAIN.into())).map(|v| (v, None, false));
                }
                let v = if *semaphore { 1 } else { *value };
                *value -= v;
                (v.to_le_bytes().to_vec(), None, false)
            }
            ObjKind::Epoll { .. } => return Err(EINVAL.into()),
        };
        self.scatter(mem, iov, &data)?;
        if !peek {
            self.net.touch(id); // room for a blocked writer
        }
        Ok((data.len() as u64, from, trunc))
    }

    /// Copies `data` into the buffers of `iov` in order.
    fn scatter(&mut self, mem: &mut dyn Memory, iov: &[(u64, u64)], data: &[u8]) -> Result<(), i32> {
        let mut off = 0usize;
        for &(base, len) in iov {
            if off >= data.len() {
                break;
            }
            let n = (len as usize).min(data.len() - off);
            self.vm.copy_out(mem, base, &data[off..off + n])?;
            off += n;
        }
        Ok(())
    }

    /// Sends `data` on an object (to `to` for an unconnected datagram socket).
    pub(crate) fn obj_send(&mut self, fd: i32, data: &[u8], flags: u32, to: Option<SockAddr>) -> SysResult {
        let (id, end, fl) = self.object(fd)?;
        if end == Some(false) {
            return Err(EBADF.into());
        }
        let nonblock = fl & O_NONBLOCK != 0 || flags & MSG_DONTWAIT != 0;
        let timeout = self.net.objects.get(&id).map_or(0, |o| o.sndtimeo);
        let dgram_info = match &self.net.objects.get(&id).ok_or(EBADF)?.kind {
            ObjKind::Dgram(d) => Some((d.local, d.remote)),
            _ => None,
        };
        if let Some((local, remote)) = dgram_info {
            let dst = match to.or(remote) {
                Some(d) => d,
                None => return Err(EDESTADDRREQ.into()),
            };
            if data.len() > MAX_DATAGRAM {
                return Err(EMSGSIZE.into());
            }
            let dst = if dst.is_unspecified() { SockAddr::new([127, 0, 0, 1], dst.port) } else { dst };
            if !self.net.reachable(dst.ip) {
                return Err(ENETUNREACH.into());
            }
            let local = match local {
                Some(l) => l,
                None => self.autobind_dgram(id)?,
            };
            let src_ip = if local.is_unspecified() { self.net.source_ip(dst.ip) } else { local.ip };
            self.net.send(Packet {
                src: SockAddr::new(src_ip, local.port),
                dst,
                payload: Payload::Datagram(data.to_vec()),
            });
            return Ok(data.len() as u64);
        }
        let obj = self.net.objects.get_mut(&id).ok_or(EBADF)?;
        match &mut obj.kind {
            ObjKind::Stream(s) => {
                match s.state {
                    StreamState::Connected => {}
                    StreamState::Connecting if !nonblock => {
                        return self.block_io((timeout > 0).then_some(timeout), Err(EAGAIN.into()))
                    }
                    StreamState::Connecting => return Err(EAGAIN.into()),
                    StreamState::Failed(e) => {
                        s.error = 0;
                        return Err(e.into());
                    }
                    _ => return Err(ENOTCONN.into()),
                }
                if s.reset || s.shut_wr {
                    return Err(EPIPE.into());
                }
                let (Some(src), Some(dst)) = (s.local, s.remote) else { return Err(ENOTCONN.into()) };
                if data.is_empty() {
                    return Ok(0);
                }
                let room = WINDOW.saturating_sub(s.inflight);
                if room == 0 {
                    if nonblock {
                        return Err(EAGAIN.into());
                    }
                    return self.block_io((timeout > 0).then_some(timeout), Err(EAGAIN.into()));
                }
                let n = (data.len() as u64).min(room);
                s.inflight += n;
                self.net.send(Packet { src, dst, payload: Payload::Data(data[..n as usize].to_vec()) });
                Ok(n)
            }
            ObjKind::Dgram(_) => Err(EINVAL.into()),
            ObjKind::Pipe { buf, readers, .. } => {
                if *readers == 0 {
                    return Err(EPIPE.into());
                }
                let room = MAX_BUFFERED.saturating_sub(buf.len());
                if room == 0 {
                    if nonblock {
                        return Err(EAGAIN.into());
                    }
                    return self.block_io(None, Err(EAGAIN.into()));
                }
                let n = room.min(data.len());
                buf.extend(&data[..n]);
                self.net.touch(id);
                Ok(n as u64)
            }
            ObjKind::EventFd { value, .. } => {
                if data.len() < 8 {
                    return Err(EINVAL.into());
                }
                let add = u64::from_le_bytes(data[..8].try_into().unwrap_or_default());
                if add == u64::MAX {
                    return Err(EINVAL.into());
                }
                if add > u64::MAX - 1 - *value {
                    if nonblock {
                        return Err(EAGAIN.into());
                    }
                    return self.block_io(None, Err(EAGAIN.into()));
                }
                *value += add;
                self.net.touch(id);
                Ok(8)
            }
            ObjKind::Epoll { .. } => Err(EINVAL.into()),
        }
    }

    pub(crate) fn sys_sendto(&mut self, mem: &mut dyn Memory, a: [u64; 6]) -> SysResult {
        let [fd, buf, len, flags, addr, alen] = a;
        self.socket(fd)?;
        access_ok_len(buf, len)?;
        let len = len.min(MAX_IO);
        self.vm.check(buf, len, Access::Read)?;
        let mut data = vec![0u8; len as usize];
        self.vm.copy_in(mem, buf, &mut data)?;
        let to = if addr != 0 { Some(self.read_sockaddr(mem, addr, alen)?.1) } else { None };
        self.obj_send(fd as i32, &data, flags as u32, to)
    }

    pub(crate) fn sys_recvfrom(&mut self, mem: &mut dyn Memory, a: [u64; 6]) -> SysResult {
        let [fd, buf, len, flags, addr, lenp] = a;
        self.socket(fd)?;
        access_ok_len(buf, len)?;
        let (n, from, _) = self.obj_recv(mem, fd as i32, &[(buf, len)], flags as u32)?;
        if let Some(src) = from {
            self.write_sockaddr(mem, addr, lenp, src)?;
        }
        Ok(n)
    }

    /// Reads a `struct msghdr`: name, namelen, iovecs.
    fn msghdr(&self, mem: &mut dyn Memory, msg: u64) -> Result<MsgHdr, i32> {
        let mut b = [0u8; 56];
        self.vm.copy_in(mem, msg, &mut b)?;
        let w = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default());
        let namelen = u64::from(u32::from_le_bytes(b[8..12].try_into().unwrap_or_default()));
        let iov = self.iovecs(mem, w(16), w(24))?;
        Ok((w(0), namelen, iov))
    }

    pub(crate) fn sys_sendmsg(&mut self, mem: &mut dyn Memory, fd: u64, msg: u64, flags: u64) -> SysResult {
        self.socket(fd)?;
        let (name, namelen, iov) = self.msghdr(mem, msg)?;
        let mut data = Vec::new();
        for (base, len) in iov {
            let n = len.min(MAX_IO - data.len() as u64);
            self.vm.check(base, n, Access::Read)?;
            let start = data.len();
            data.resize(start + n as usize, 0);
            self.vm.copy_in(mem, base, &mut data[start..])?;
        }
        let to = if name != 0 { Some(self.read_sockaddr(mem, name, namelen)?.1) } else { None };
        self.obj_send(fd as i32, &data, flags as u32, to)
    }

    pub(crate) fn sys_recvmsg(&mut self, mem: &mut dyn Memory, fd: u64, msg: u64, flags: u64) -> SysResult {
        self.socket(fd)?;
        let (name, _, iov) = self.msghdr(mem, msg)?;
        let (n, from, trunc) = self.obj_recv(mem, fd as i32, &iov, flags as u32)?;
        if let (Some(src), true) = (from, name != 0) {
            self.write_sockaddr(mem, name, msg + 8, src)?;
        } else {
            self.vm.copy_out(mem, msg + 8, &0u32.to_le_bytes())?;
        }
        self.vm.copy_out(mem, msg + 40, &0u64.to_le_bytes())?;
        let mf: i32 = if trunc { MSG_TRUNC as i32 } else { 0 };
        self.vm.copy_out(mem, msg + 48, &mf.to_le_bytes())?;
        Ok(n)
    }

    pub(crate) fn sys_pipe2(&mut self, mem: &mut dyn Memory, fds: u64, flags: u64) -> SysResult {
        const O_DIRECT: u64 = 0o40000;
        if flags & !(u64::from(O_NONBLOCK | O_CLOEXEC) | O_DIRECT) != 0 {
            return Err(EINVAL.into());
        }
        self.vm.check(fds, 8, Access::Write)?;
        let limit = self.nofile();
        let nb = flags as u32 & O_NONBLOCK;
        let cloexec = flags & u64::from(O_CLOEXEC) != 0;
        let id = self.net.add(ObjKind::Pipe { buf: VecDeque::new(), readers: 1, writers: 1 });
        let r = self.fds.install(OpenFile::new(FileKind::Pipe { obj: id, write: false }, nb), 0, limit, cloexec);
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                self.net.objects.remove(&id);
                return Err(e.into());
            }
        };
        let w = match self.fds.install(
            OpenFile::new(FileKind::Pipe { obj: id, write: true }, O_WRONLY | nb),
            0,
            limit,
            cloexec,
        ) {
            Ok(w) => w,
            Err(e) => {
                let f = self.fds.close(r).ok().flatten();
                self.dropped(f);
                self.net.objects.remove(&id);
                return Err(e.into());
            }
        };
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&r.to_le_bytes());
        b[4..].copy_from_slice(&w.to_le_bytes());
        self.vm.copy_out(mem, fds, &b)?;
        Ok(0)
    }

    pub(crate) fn sys_eventfd2(&mut self, init: u64, flags: u64) -> SysResult {
        if flags & !(EFD_SEMAPHORE | u64::from(O_NONBLOCK | O_CLOEXEC)) != 0 {
            return Err(EINVAL.into());
        }
        let kind = ObjKind::EventFd { value: u64::from(init as u32), semaphore: flags & EFD_SEMAPHORE != 0 };
        self.new_object(kind, O_RDWR | (flags as u32 & O_NONBLOCK), flags & u64::from(O_CLOEXEC) != 0)
    }

    pub(crate) fn sys_epoll_create1(&mut self, flags: u64) -> SysResult {
        if flags & !u64::from(O_CLOEXEC) != 0 {
            return Err(EINVAL.into());
        }
        self.new_object(ObjKind::Epoll { interests: Default::default() }, O_RDWR, flags != 0)
    }

    pub(crate) fn sys_epoll_ctl(&mut self, mem: &mut dyn Memory, epfd: u64, op: u64, fd: u64, ev: u64) -> SysResult {
        let ep = match self.fds.get(epfd as i32)?.kind {
            FileKind::Epoll(o) => o,
            _ => return Err(EINVAL.into()),
        };
        let fd = fd as i32;
        let target = self.fds.entry(fd)?;
        if fd == epfd as i32 {
            return Err(EINVAL.into());
        }
        match self.fds.get(fd)?.kind {
            FileKind::Inode { .. } | FileKind::Dir { .. } | FileKind::Regular { .. } => return Err(EPERM.into()),
            FileKind::Epoll(o) if o == ep => return Err(EINVAL.into()),
            _ => {}
        }
        let (events, data) = if op == EPOLL_CTL_DEL {
            (0, 0)
        } else {
            let mut b = [0u8; 12];
            self.vm.copy_in(mem, ev, &mut b)?;
            (
                u32::from_le_bytes(b[..4].try_into().unwrap_or_default()),
                u64::from_le_bytes(b[4..].try_into().unwrap_or_default()),
            )
        };
        let Some(Obj { kind: ObjKind::Epoll { interests }, .. }) = self.net.objects.get_mut(&ep) else {
            return Err(EINVAL.into());
        };
        let live = interests.get(&fd).is_some_and(|i| i.desc == target.desc);
        match op {
            EPOLL_CTL_ADD => {
                if live {
                    return Err(EEXIST.into());
                }
                interests.insert(fd, Interest { events, data, desc: target.desc, reported: None, disabled: false });
            }
            EPOLL_CTL_MOD => {
                if !live {
                    return Err(ENOENT.into());
                }
                interests.insert(fd, Interest { events, data, desc: target.desc, reported: None, disabled: false });
            }
            EPOLL_CTL_DEL => {
                if !live {
                    return Err(ENOENT.into());
                }
                interests.remove(&fd);
            }
            _ => return Err(EINVAL.into()),
        }
        self.net.touch(ep);
        Ok(0)
    }

    /// The readiness (`EPOLL*`/`POLL*` bits) of `fd`'s description, and the generation of its
    /// object (0 for descriptions that are always ready).
    pub(crate) fn fd_readiness(&self, fd: i32) -> Option<(u32, u64)> {
        let f = self.fds.get(fd).ok()?;
        Some(match object_of(&f.kind) {
            Some((o, end)) => {
                let mut r = self.net.readiness(o, &self.fds);
                match end {
                    Some(true) => r &= EPOLLOUT | EPOLLERR,
                    Some(false) => r &= EPOLLIN | EPOLLHUP,
                    None => {}
                }
                (r, self.net.gen(o))
            }
            None => match &f.kind {
                FileKind::Stdin(d) => {
                    if f.offset < d.len() as u64 {
                        (EPOLLIN, 0)
                    } else {
                        (EPOLLIN | EPOLLHUP, 0)
                    }
                }
                FileKind::Stdout | FileKind::Stderr => (EPOLLOUT, 0),
                _ => (EPOLLIN | EPOLLOUT, 0),
            },
        })
    }

    pub(crate) fn sys_epoll_wait(
        &mut self,
        mem: &mut dyn Memory,
        epfd: u64,
        events: u64,
        max: u64,
        timeout: Option<u64>,
    ) -> SysResult {
        let ep = match self.fds.get(epfd as i32)?.kind {
            FileKind::Epoll(o) => o,
            _ => return Err(EINVAL.into()),
        };
        let max = max as i32;
        if max <= 0 || max > 1 << 20 {
            return Err(EINVAL.into());
        }
        self.vm.check(events, max as u64 * 12, Access::Write)?;
        let Some(Obj { kind: ObjKind::Epoll { interests }, .. }) = self.net.objects.get(&ep) else {
            return Err(EINVAL.into());
        };
        let mut out: Vec<(i32, u32, u64)> = Vec::new();
        let mut fired: Vec<(i32, u64, bool)> = Vec::new();
        for (&fd, i) in interests {
            if out.len() >= max as usize {
                break;
            }
            if i.disabled || self.fds.entry(fd).map(|e| e.desc) != Ok(i.desc) {
                continue;
            }
            let Some((ready, gen)) = self.fd_readiness(fd) else { continue };
            let mask = ready & (i.events | EPOLLERR | EPOLLHUP);
            if mask == 0 {
                continue;
            }
            let et = i.events & EPOLLET != 0;
            if et && i.reported == Some(gen) {
                continue;
            }
            out.push((fd, mask, i.data));
            fired.push((fd, gen, i.events & EPOLLONESHOT != 0));
        }
        if let Some(Obj { kind: ObjKind::Epoll { interests }, .. }) = self.net.objects.get_mut(&ep) {
            for (fd, gen, oneshot) in fired {
                if let Some(i) = interests.get_mut(&fd) {
                    i.reported = Some(gen);
                    i.disabled = oneshot;
                }
            }
        }
        if out.is_empty() {
            if timeout == Some(0) {
                return Ok(0);
            }
            return self.block_io(timeout, Ok(0));
        }
        let mut b = Vec::with_capacity(out.len() * 12);
        for (_, mask, data) in &out {
            b.extend_from_slice(&mask.to_le_bytes());
            b.extend_from_slice(&data.to_le_bytes());
        }
        self.vm.copy_out(mem, events, &b)?;
        Ok(out.len() as u64)
    }

    /// An epoll or poll timeout in ms (negative: none) as ns.
    pub(crate) fn ms_timeout(ms: u64) -> Option<u64> {
        let ms = ms as i32;
        (ms >= 0).then(|| ms as u64 * 1_000_000)
    }

    pub(crate) fn sys_epoll_pwait2(&mut self, mem: &mut dyn Memory, a: [u64; 6]) -> SysResult {
        let timeout = if a[3] == 0 {
            None
        } else {
            let mut b = [0u8; 16];
            self.vm.copy_in(mem, a[3], &mut b)?;
            Some(duration_ns(&b, true)?)
        };
        self.sys_epoll_wait(mem, a[0], a[1], a[2], timeout)
    }

    /// `poll`/`ppoll` over `nfds` `struct pollfd` at `fds`.
    pub(crate) fn do_poll(&mut self, mem: &mut dyn Memory, fds: u64, nfds: u64, timeout: Option<u64>) -> SysResult {
        if nfds > self.nofile() {
            return Err(EINVAL.into());
        }
        let mut raw = vec![0u8; nfds as usize * 8];
        self.vm.copy_in(mem, fds, &mut raw)?;
        let mut ready = 0;
        for c in raw.chunks_exact_mut(8) {
            let fd = i32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            let events = u32::from(u16::from_le_bytes([c[4], c[5]]));
            let rev: u32 = if fd < 0 {
                0
            } else {
                match self.fd_readiness(fd) {
                    None => 0x20, // POLLNVAL
                    Some((r, _)) => {
                        let mut r = r;
                        if r & EPOLLIN != 0 {
                            r |= EPOLLRDNORM;
                        }
                        if r & EPOLLOUT != 0 {
                            r |= EPOLLWRNORM;
                        }
                        r & (events | EPOLLERR | EPOLLHUP)
                    }
                }
            };
            c[6..8].copy_from_slice(&(rev as u16).to_le_bytes());
            if rev != 0 {
                ready += 1;
            }
        }
        self.vm.copy_out(mem, fds, &raw)?;
        if ready > 0 || timeout == Some(0) {
            return Ok(ready);
        }
        self.block_io(timeout, Ok(0))
    }

    /// `select`/`pselect6` over `nfds` descriptors.
    pub(crate) fn do_select(
        &mut self,
        mem: &mut dyn Memory,
        nfds: u64,
        sets: [u64; 3],
        timeout: Option<u64>,
    ) -> SysResult {
        let nfds = nfds as i32;
        if nfds < 0 || nfds as u64 > self.nofile().max(1024) {
            return Err(EINVAL.into());
        }
        let bytes = (nfds as usize).div_ceil(64) * 8;
        let mut input = [vec![0u8; bytes], vec![0u8; bytes], vec![0u8; bytes]];
        for (k, &p) in sets.iter().enumerate() {
            if p != 0 {
                self.vm.copy_in(mem, p, &mut input[k])?;
            }
        }
        let mut output = [vec![0u8; bytes], vec![0u8; bytes], vec![0u8; bytes]];
        let mut count = 0;
        for fd in 0..nfds {
            let (byte, bit) = (fd as usize / 8, 1u8 << (fd % 8));
            let wanted: Vec<bool> = (0..3).map(|k| input[k][byte] & bit != 0).collect();
            if !wanted.iter().any(|&w| w) {
                continue;
            }
            let Some((r, _)) = self.fd_readiness(fd) else { return Err(EBADF.into()) };
            let got = [r & (EPOLLIN | EPOLLHUP | EPOLLERR) != 0, r & (EPOLLOUT | EPOLLERR) != 0, false];
            for k in 0..3 {
                if wanted[k] && got[k] {
                    output[k][byte] |= bit;
                    count += 1;
                }
            }
        }
        for (k, &p) in sets.iter().enumerate() {
            if p != 0 {
                self.vm.copy_out(mem, p, &output[k])?;
            }
        }
        if count > 0 || timeout == Some(0) {
            return Ok(count);
        }
        self.block_io(timeout, Ok(0))
    }

    pub(crate) fn sys_select(&mut self, mem: &mut dyn Memory, a: [u64; 6]) -> SysResult {
        let timeout = if a[4] == 0 {
            None
        } else {
            let mut b = [0u8; 16];
            self.vm.copy_in(mem, a[4], &mut b)?;
            Some(duration_ns(&b, false)?)
        };
        self.do_select(mem, a[0], [a[1], a[2], a[3]], timeout)
    }

    pub(crate) fn sys_pselect6(&mut self, mem: &mut dyn Memory, a: [u64; 6]) -> SysResult {
        let timeout = if a[4] == 0 {
            None
        } else {
            let mut b = [0u8; 16];
            self.vm.copy_in(mem, a[4], &mut b)?;
            Some(duration_ns(&b, true)?)
        };
        self.do_select(mem, a[0], [a[1], a[2], a[3]], timeout)
    }

    /// The node's network attachment: its address, after which packets for other addresses go to
    /// [`Kernel::take_packets`] and a node with nothing to run is idle instead of deadlocked.
    pub fn attach_network(&mut self, address: [u8; 4]) {
        self.net.address = Some(address);
    }

    /// Packets the node sent to the network since the last call, in order.
    pub fn take_packets(&mut self) -> Vec<Packet> {
        std::mem::take(&mut self.net.outbox)
    }

    /// The (local, remote) addresses of the node's open TCP connections.
    pub fn connections(&self) -> Vec<(SockAddr, SockAddr)> {
        self.net.streams.keys().copied().collect()
    }
}

fn access_ok_len(buf: u64, len: u64) -> Result<(), i32> {
    if buf.checked_add(len).is_none_or(|end| end > crate::layout::USER_END) {
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
