//! Unix-domain sockets: `socket(AF_UNIX)` and `socketpair` of the stream, datagram and
//! seqpacket types, names in the file system and in the abstract namespace, and the same
//! calls as for AF_INET sockets (the common entry points in [`super`] and [`super::transfer`]
//! hand a Unix socket to this module).
//!
//! The model is Linux's: a connection is two objects that point at each other; `connect`
//! completes at once while the listener's backlog has room; a write lands in the peer's
//! receive buffer ([`UNIX_BUFFER`] bytes at most) and a full buffer blocks the writer; a
//! datagram socket's queue holds [`UNIX_DGRAM_QLEN`] datagrams from senders it is not
//! connected to.
//!
//! Descriptors passed with `SCM_RIGHTS` travel as copies of their open file descriptions
//! (the same description, as in Linux: the offset and flags are shared). A copy in flight
//! keeps its description open until a `recvmsg` installs it, or until the message is dropped
//! (read without room for it, or its socket closed). At most the `RLIMIT_NOFILE` of copies are
//! in flight at once (`ETOOMANYREFS`), and at most [`SCM_MAX_FD`] go in one message.

use super::*;
use crate::fs::Kind;

/// `AF_UNIX`.
pub(super) const AF_UNIX: u64 = 1;
const SOCK_SEQPACKET: u64 = 5;
const SOCK_RAW: u64 = 3;
const SO_PEERCRED: i32 = 17;
const SCM_RIGHTS: i32 = 1;
const SCM_CREDENTIALS: i32 = 2;
/// Most descriptors in one `SCM_RIGHTS` message.
pub(super) const SCM_MAX_FD: usize = 253;
/// `MSG_CTRUNC`.
const MSG_CTRUNC: i32 = 8;

/// Size of `struct sockaddr_un`.
const SOCKADDR_UN: u64 = 110;

/// What one receive on a Unix socket gave.
#[derive(Debug, Default)]
pub(super) struct Received {
    /// The count the call returns.
    pub n: u64,
    /// The sender's name (datagrams from a named socket).
    pub from: Option<Vec<u8>>,
    /// The message did not fit.
    pub trunc: bool,
    /// Descriptions that came with it, still in flight.
    pub fds: Vec<u64>,
    /// `MSG_PEEK`: they stay in flight.
    pub peeked: bool,
}

/// What the socket types give: Linux makes `SOCK_RAW` a datagram socket.
fn unix_type(ty: u64, proto: u64) -> Result<u64, i32> {
    if ty & !(0xf | SOCK_NONBLOCK | SOCK_CLOEXEC) != 0 {
        return Err(EINVAL);
    }
    if proto != 0 && proto != AF_UNIX {
        return Err(EPROTONOSUPPORT);
    }
    match ty & 0xf {
        SOCK_STREAM | SOCK_DGRAM | SOCK_SEQPACKET => Ok(ty & 0xf),
        SOCK_RAW => Ok(SOCK_DGRAM),
        _ => Err(ESOCKTNOSUPPORT),
    }
}

fn desc_flags(ty: u64) -> u32 {
    O_RDWR | if ty & SOCK_NONBLOCK != 0 { O_NONBLOCK } else { 0 }
}

impl Kernel {
    /// The Unix socket `id`, if it is one.
    pub(super) fn unix(&self, id: u64) -> Option<&UnixSock> {
        match self.net.objects.get(&id).map(|o| &o.kind) {
            Some(ObjKind::Unix(u)) => Some(u),
            _ => None,
        }
    }

    fn unix_mut(&mut self, id: u64) -> Result<&mut UnixSock, i32> {
        match self.net.objects.get_mut(&id).map(|o| &mut o.kind) {
            Some(ObjKind::Unix(u)) => Ok(u),
            _ => Err(ENOTSOCK),
        }
    }

    pub(super) fn unix_socket(&mut self, ty: u64, proto: u64) -> SysResult {
        let kind = unix_type(ty, proto)?;
        self.new_object(ObjKind::Unix(UnixSock::new(kind)), desc_flags(ty), ty & SOCK_CLOEXEC != 0)
    }

    pub(crate) fn sys_socketpair(
        &mut self,
        mem: &mut dyn Memory,
        domain: u64,
        ty: u64,
        proto: u64,
        sv: u64,
    ) -> SysResult {
        match domain {
            AF_UNIX => {}
            AF_INET => return Err(EOPNOTSUPP.into()),
            _ => return Err(EAFNOSUPPORT.into()),
        }
        let kind = unix_type(ty, proto)?;
        self.process.mappings.check(sv, 8, Access::Write)?;
        let limit = self.nofile();
        let a = self.net.add(ObjKind::Unix(UnixSock::new(kind)));
        let b = self.net.add(ObjKind::Unix(UnixSock::new(kind)));
        self.unix_mut(a)?.peer = Some(b);
        self.unix_mut(b)?.peer = Some(a);
        let cloexec = ty & SOCK_CLOEXEC != 0;
        let mut fds = [0i32; 2];
        for (i, id) in [a, b].into_iter().enumerate() {
            match self.files.fds.install(OpenFile::new(FileKind::Socket(id), desc_flags(ty)), 0, limit, cloexec) {
                Ok(fd) => fds[i] = fd,
                Err(e) => {
                    if i == 1 {
                        let f = self.files.fds.close(fds[0]).ok().flatten();
                        self.dropped(f);
                    }
                    self.net.objects.remove(&a);
                    self.net.objects.remove(&b);
                    return Err(e.into());
                }
            }
        }
        let mut out = [0u8; 8];
        out[..4].copy_from_slice(&fds[0].to_le_bytes());
        out[4..].copy_from_slice(&fds[1].to_le_bytes());
        self.process.mappings.copy_out(mem, sv, &out)?;
        Ok(0)
    }

    /// A `sockaddr_un`: the name as given (abstract names keep their leading NUL, paths end at
    /// their first NUL), or `None` for the bare family (`bind`: an automatic name).
    pub(super) fn read_sockaddr_un(&self, mem: &mut dyn Memory, addr: u64, len: u64) -> Result<Option<Vec<u8>>, i32> {
        if !(2..=SOCKADDR_UN).contains(&len) {
            return Err(EINVAL);
        }
        let mut b = vec![0u8; len as usize];
        self.process.mappings.copy_in(mem, addr, &mut b)?;
        if u64::from(u16::from_le_bytes([b[0], b[1]])) != AF_UNIX {
            return Err(EINVAL);
        }
        let path = &b[2..];
        match path.first() {
            None => Ok(None),
            Some(0) => Ok(Some(path.to_vec())),
            Some(_) => Ok(Some(path[..path.iter().position(|&c| c == 0).unwrap_or(path.len())].to_vec())),
        }
    }

    /// Writes a `sockaddr_un` for `name` (`None`: unnamed, the family alone) to `addr`, truncated
    /// to `*lenp`, and sets `*lenp` to its full length.
    pub(super) fn write_sockaddr_un(
        &self,
        mem: &mut dyn Memory,
        addr: u64,
        lenp: u64,
        name: Option<&[u8]>,
    ) -> Result<(), i32> {
        if addr == 0 || lenp == 0 {
            return Ok(());
        }
        let len = self.process.mappings.read_u32(mem, lenp)?;
        if (len as i32) < 0 {
            return Err(EINVAL);
        }
        let mut b = (AF_UNIX as u16).to_le_bytes().to_vec();
        if let Some(n) = name {
            b.extend_from_slice(n);
            if n.first() != Some(&0) {
                b.push(0);
            }
        }
        let n = (len as usize).min(b.len());
        self.process.mappings.copy_out(mem, addr, &b[..n])?;
        self.process.mappings.copy_out(mem, lenp, &(b.len() as u32).to_le_bytes())?;
        Ok(())
    }

    /// The socket bound to `name`: `ENOENT` for a missing path, `EACCES` for a path the program
    /// may not write (Linux's `unix_find_bsd` asks that of any file first), `ECONNREFUSED` for a
    /// path that is not a socket or a name nothing is bound to.
    fn unix_lookup(&self, name: &[u8]) -> Result<u64, i32> {
        let key = if name.first() == Some(&0) {
            UnixKey::Abstract(name.to_vec())
        } else {
            let w = self.files.fs.walk_checked(self.files.cwd, name, true)?;
            let id = w.id.ok_or(ENOENT)?;
            if self.files.fs.get(id).is_some_and(|n| n.mode & 0o200 == 0) {
                return Err(EACCES);
            }
            if !matches!(self.files.fs.get(id).map(|n| &n.kind), Some(Kind::Socket)) {
                return Err(ECONNREFUSED);
            }
            UnixKey::Inode(id)
        };
        self.net.unix_names.get(&key).copied().ok_or(ECONNREFUSED)
    }

    pub(super) fn unix_bind(&mut self, mem: &mut dyn Memory, id: u64, addr: u64, len: u64) -> SysResult {
        let name = self.read_sockaddr_un(mem, addr, len)?;
        let named = self.unix(id).is_some_and(|u| u.name.is_some());
        // Linux makes a path's node first, so an existing path wins over a second bind.
        if named && name.as_ref().is_none_or(|n| n.first() == Some(&0)) {
            return Err(EINVAL.into());
        }
        let (name, key) = match name {
            None => loop {
                let n = self.net.next_autobind & 0xf_ffff;
                self.net.next_autobind = self.net.next_autobind.wrapping_add(1);
                let mut name = vec![0u8];
                name.extend_from_slice(format!("{n:05x}").as_bytes());
                let key = UnixKey::Abstract(name.clone());
                if !self.net.unix_names.contains_key(&key) {
                    break (name, key);
                }
            },
            Some(n) if n.first() == Some(&0) => {
                let key = UnixKey::Abstract(n.clone());
                if self.net.unix_names.contains_key(&key) {
                    return Err(EADDRINUSE.into());
                }
                (n, key)
            }
            Some(n) => {
                let w = self.files.fs.walk_checked(self.files.cwd, &n, false)?;
                if w.trailing {
                    return Err(if w.id.is_some() { EADDRINUSE } else { ENOENT }.into());
                }
                if w.id.is_some() {
                    return Err(EADDRINUSE.into());
                }
                if named {
                    return Err(EINVAL.into());
                }
                let now = self.sched.clock.realtime_ns();
                let node = self.files.fs.socket_node(&w, 0o777 & !self.process.umask, now)?;
                (n, UnixKey::Inode(node))
            }
        };
        self.net.unix_names.insert(key.clone(), id);
        let u = self.unix_mut(id)?;
        u.name = Some(name);
        u.key = Some(key);
        Ok(0)
    }

    pub(super) fn unix_listen(&mut self, id: u64, backlog: u32) -> SysResult {
        let u = self.unix_mut(id)?;
        if !u.connection() {
            return Err(EOPNOTSUPP.into());
        }
        if u.peer.is_some() || u.name.is_none() {
            return Err(EINVAL.into());
        }
        match &mut u.listen {
            Some((b, _)) => *b = backlog,
            None => u.listen = Some((backlog, VecDeque::new())),
        }
        self.net.touch(id);
        Ok(0)
    }

    pub(super) fn unix_connect(&mut self, mem: &mut dyn Memory, id: u64, fl: u32, addr: u64, len: u64) -> SysResult {
        let (ty, connected, listening) = {
            let u = self.unix(id).ok_or(ENOTSOCK)?;
            (u.ty, u.peer.is_some(), u.listen.is_some())
        };
        if ty == SOCK_DGRAM && len >= 2 {
            let mut b = [0u8; 2];
            self.process.mappings.copy_in(mem, addr, &mut b)?;
            let family = u16::from_le_bytes(b);
            if family == AF_UNSPEC {
                self.unix_mut(id)?.peer = None;
                self.net.touch(id);
                return Ok(0);
            }
        }
        let name = self.read_sockaddr_un(mem, addr, len)?.ok_or(EINVAL)?;
        if ty != SOCK_DGRAM && connected {
            return Err(EISCONN.into());
        }
        if listening {
            return Err(EINVAL.into());
        }
        let target = self.unix_lookup(&name)?;
        let t = self.unix(target).ok_or(ECONNREFUSED)?;
        if t.ty != ty {
            return Err(EPROTOTYPE.into());
        }
        if ty == SOCK_DGRAM {
            self.unix_mut(id)?.peer = Some(target);
            self.net.touch(id);
            return Ok(0);
        }
        let Some((backlog, queue)) = &t.listen else { return Err(ECONNREFUSED.into()) };
        if queue.len() as u32 > *backlog {
            if fl & O_NONBLOCK != 0 {
                return Err(EAGAIN.into());
            }
            let timeout = self.obj(id)?.sndtimeo;
            return self.block_io((timeout > 0).then_some(timeout), Err(EAGAIN.into()));
        }
        let mut server = UnixSock::new(ty);
        server.name = t.name.clone();
        server.peer = Some(id);
        let conn = self.net.add(ObjKind::Unix(server));
        if let Some((_, queue)) = &mut self.unix_mut(target)?.listen {
            queue.push_back(conn);
        }
        self.unix_mut(id)?.peer = Some(conn);
        self.net.touch(target);
        self.net.touch(id);
        Ok(0)
    }

    pub(super) fn unix_accept(
        &mut self,
        mem: &mut dyn Memory,
        id: u64,
        fl: u32,
        addr: u64,
        lenp: u64,
        flags: u64,
    ) -> SysResult {
        let u = self.unix_mut(id)?;
        if !u.connection() {
            return Err(EOPNOTSUPP.into());
        }
        let Some((_, queue)) = &mut u.listen else { return Err(EINVAL.into()) };
        let Some(conn) = queue.pop_front() else {
            if fl & O_NONBLOCK != 0 {
                return Err(EAGAIN.into());
            }
            let timeout = self.obj(id)?.rcvtimeo;
            return self.block_io((timeout > 0).then_some(timeout), Err(EAGAIN.into()));
        };
        let limit = self.nofile();
        let file = OpenFile::new(FileKind::Socket(conn), desc_flags(flags));
        let newfd = match self.files.fds.install(file, 0, limit, flags & SOCK_CLOEXEC != 0) {
            Ok(f) => f,
            Err(e) => {
                if let Ok(UnixSock { listen: Some((_, queue)), .. }) = self.unix_mut(id) {
                    queue.push_front(conn);
                }
                return Err(e.into());
            }
        };
        let peer = self.unix(conn).and_then(|c| c.peer).and_then(|p| self.unix(p)).and_then(|p| p.name.clone());
        if let Err(e) = self.write_sockaddr_un(mem, addr, lenp, peer.as_deref()) {
            let f = self.files.fds.close(newfd).ok().flatten();
            self.dropped(f);
            return Err(e.into());
        }
        Ok(newfd as u64)
    }

    pub(super) fn unix_shutdown(&mut self, id: u64, how: u64) -> SysResult {
        let mode = how as u8 + 1; // SHUT_RD: RCV, SHUT_WR: SEND, SHUT_RDWR: both
        let u = self.unix_mut(id)?;
        u.shut |= mode;
        let peer = u.peer.filter(|_| u.connection());
        self.net.touch(id);
        if let Some(p) = peer {
            let mirrored = ((mode & SHUT_RCV) << 1) | ((mode & SHUT_SEND) >> 1);
            if let Ok(pu) = self.unix_mut(p) {
                pu.shut |= mirrored;
            }
            self.net.touch(p);
        }
        Ok(0)
    }

    pub(super) fn unix_getname(
        &mut self,
        mem: &mut dyn Memory,
        id: u64,
        addr: u64,
        lenp: u64,
        peer: bool,
    ) -> SysResult {
        let u = self.unix(id).ok_or(ENOTSOCK)?;
        let name = if peer {
            let p = u.peer.and_then(|p| self.unix(p)).ok_or(ENOTCONN)?;
            p.name.clone()
        } else {
            u.name.clone()
        };
        access_nonnull(addr)?;
        self.write_sockaddr_un(mem, addr, lenp, name.as_deref())?;
        Ok(0)
    }

    /// The `SOL_SOCKET` options a Unix socket answers itself.
    pub(super) fn unix_sockopt(&mut self, id: u64, name: i32) -> Result<Option<Vec<u8>>, i32> {
        let u = self.unix_mut(id)?;
        let v: i32 = match name {
            SO_TYPE => u.ty as i32,
            SO_DOMAIN => AF_UNIX as i32,
            SO_PROTOCOL => 0,
            SO_ACCEPTCONN => i32::from(u.listen.is_some()),
            SO_ERROR => core::mem::take(&mut u.error),
            SO_PEERCRED => {
                // `struct ucred` of the peer: this process, or nobody before a connection.
                let (pid, id) = if u.peer.is_some() {
                    (self.pid() as u32, crate::mm::stack::GUEST_UID as u32)
                } else {
                    (0, 65_534)
                };
                return Ok(Some([pid, id, id].iter().flat_map(|v| v.to_le_bytes()).collect()));
            }
            _ => return Ok(None),
        };
        Ok(Some(v.to_le_bytes().to_vec()))
    }

    /// The descriptors a `sendmsg`'s control messages pass (`SCM_RIGHTS`). `SCM_CREDENTIALS`
    /// is checked as Linux checks it for a program without privileges (its own pid, uid and
    /// gid, or `EPERM`; a short one is `EINVAL`) and has no other effect; other control
    /// messages are ignored.
    pub(super) fn unix_control(&self, mem: &mut dyn Memory, msg: u64) -> Result<Vec<i32>, i32> {
        let mut fds = Vec::new();
        let mut b = [0u8; 16];
        self.process.mappings.copy_in(mem, msg + 32, &mut b)?;
        let (mut at, len) = (
            u64::from_le_bytes(b[..8].try_into().unwrap_or_default()),
            u64::from_le_bytes(b[8..].try_into().unwrap_or_default()),
        );
        let end = at.saturating_add(len.min(1 << 16));
        while at.saturating_add(16) <= end {
            let mut h = [0u8; 16];
            self.process.mappings.copy_in(mem, at, &mut h)?;
            let clen = u64::from_le_bytes(h[..8].try_into().unwrap_or_default());
            let (level, ty) = (
                i32::from_le_bytes(h[8..12].try_into().unwrap_or_default()),
                i32::from_le_bytes(h[12..].try_into().unwrap_or_default()),
            );
            if clen < 16 || clen > end - at {
                return Err(EINVAL);
            }
            if level == SOL_SOCKET && ty == SCM_RIGHTS {
                let n = ((clen - 16) / 4) as usize;
                if fds.len() + n > SCM_MAX_FD {
                    return Err(EINVAL);
                }
                let mut b = vec![0u8; n * 4];
                self.process.mappings.copy_in(mem, at + 16, &mut b)?;
                for c in b.chunks_exact(4) {
                    let fd = i32::from_le_bytes(c.try_into().unwrap_or_default());
                    self.files.fds.entry(fd)?;
                    fds.push(fd);
                }
            }
            if level == SOL_SOCKET && ty == SCM_CREDENTIALS {
                if clen < 16 + 12 {
                    return Err(EINVAL);
                }
                let mut c = [0u8; 12];
                self.process.mappings.copy_in(mem, at + 16, &mut c)?;
                let word = |i: usize| u32::from_le_bytes(c[i..i + 4].try_into().unwrap_or_default());
                let own = u64::from(word(0)) == self.pid()
                    && u64::from(word(4)) == crate::mm::stack::GUEST_UID
                    && u64::from(word(8)) == crate::mm::stack::GUEST_UID;
                if !own {
                    return Err(EPERM);
                }
            }
            at = at.saturating_add((clen + 7) & !7);
        }
        Ok(fds)
    }

    /// Puts copies of the descriptions of `fds` in flight.
    fn hold_all(&mut self, fds: &[i32]) -> Result<Vec<u64>, i32> {
        if self.files.fds.in_flight() + fds.len() as u64 > self.nofile() {
            return Err(ETOOMANYREFS);
        }
        fds.iter().map(|&fd| self.files.fds.hold(fd)).collect()
    }

    /// Sends `data` on the Unix socket `id` (to the socket named `to`, for a datagram socket).
    /// `rights` are the descriptors passed with it.
    pub(super) fn unix_send(
        &mut self,
        id: u64,
        data: &[u8],
        nonblock: bool,
        to: Option<&[u8]>,
        rights: &[i32],
    ) -> SysResult {
        let u = self.unix(id).ok_or(ENOTSOCK)?;
        let (ty, peer, shut, from) = (u.ty, u.peer, u.shut, u.name.clone());
        let timeout = self.obj(id)?.sndtimeo;
        let block = |k: &mut Kernel| -> SysResult {
            if nonblock {
                return Err(EAGAIN.into());
            }
            k.block_io((timeout > 0).then_some(timeout), Err(EAGAIN.into()))
        };
        if ty == SOCK_DGRAM {
            let target = match to {
                Some(n) => self.unix_lookup(n)?,
                None => peer.ok_or(ENOTCONN)?,
            };
            let Some(t) = self.unix(target) else {
                // The socket it was connected to is gone.
                self.unix_mut(id)?.peer = None;
                return Err(ECONNREFUSED.into());
            };
            if t.ty != SOCK_DGRAM {
                return Err(EPROTOTYPE.into());
            }
            if t.peer.is_some_and(|p| p != id) {
                return Err(EPERM.into());
            }
            if shut & SHUT_SEND != 0 || t.shut & SHUT_RCV != 0 {
                return Err(EPIPE.into());
            }
            if data.len() > UNIX_BUFFER {
                return Err(EMSGSIZE.into());
            }
            if t.full(data.len(), id) {
                return block(self);
            }
            let fds = self.hold_all(rights)?;
            self.unix_mut(target)?.msgs.push_back(UnixMsg { from, data: data.to_vec(), fds });
            self.net.touch(target);
            return Ok(data.len() as u64);
        }
        if to.is_some() && ty == SOCK_STREAM {
            return Err(if peer.is_some() { EISCONN } else { EOPNOTSUPP }.into());
        }
        let Some(p) = peer else { return Err(ENOTCONN.into()) };
        if shut & SHUT_SEND != 0 {
            return Err(EPIPE.into());
        }
        let Some(t) = self.unix(p).filter(|t| t.shut & SHUT_RCV == 0) else { return Err(EPIPE.into()) };
        let n = if ty == SOCK_STREAM {
            if data.is_empty() {
                return Ok(0);
            }
            let room = UNIX_BUFFER.saturating_sub(t.held());
            if room == 0 {
                return block(self);
            }
            let n = room.min(data.len());
            let fds = self.hold_all(rights)?;
            let t = self.unix_mut(p)?;
            t.bytes.extend(&data[..n]);
            if !fds.is_empty() {
                t.rights.push_back((t.queued, t.queued + n as u64, fds));
            }
            t.queued += n as u64;
            n
        } else {
            if data.len() > UNIX_BUFFER {
                return Err(EMSGSIZE.into());
            }
            if t.full(data.len(), id) {
                return block(self);
            }
            let fds = self.hold_all(rights)?;
            self.unix_mut(p)?.msgs.push_back(UnixMsg { from: None, data: data.to_vec(), fds });
            data.len()
        };
        self.net.touch(p);
        Ok(n as u64)
    }

    /// Receives from the Unix socket `id` into `iov`: the byte count (the whole message's with
    /// `MSG_TRUNC`), the sender's name, whether the message was truncated, and the
    /// descriptions in flight that came with it (still in flight: see [`Kernel::unix_fds`]).
    pub(super) fn unix_recv(
        &mut self,
        mem: &mut dyn Memory,
        id: u64,
        iov: &[(u64, u64)],
        flags: u32,
        nonblock: bool,
    ) -> Result<Received, SysStop> {
        let want: u64 = iov.iter().map(|&(_, l)| l).sum::<u64>().min(MAX_IO);
        let peek = flags & MSG_PEEK != 0;
        let timeout = self.obj(id)?.rcvtimeo;
        let u = self.unix_mut(id)?;
        let (ty, peer) = (u.ty, u.peer);
        if u.connection() && (u.listen.is_some() || (peer.is_none() && u.held() == 0 && u.shut == 0)) {
            return Err(if ty == SOCK_STREAM { EINVAL } else { ENOTCONN }.into());
        }
        let empty = if ty == SOCK_STREAM { u.bytes.is_empty() } else { u.msgs.is_empty() };
        // MSG_WAITALL waits for the whole count while the buffer can still grow towards it.
        let waitall = ty == SOCK_STREAM
            && flags & MSG_WAITALL != 0
            && (u.bytes.len() as u64) < want
            && u.bytes.len() < UNIX_BUFFER;
        if empty || (waitall && u.shut & SHUT_RCV == 0 && !nonblock) {
            if empty && u.error != 0 {
                return Err(core::mem::take(&mut u.error).into());
            }
            if empty && (u.shut & SHUT_RCV != 0 || (want == 0 && ty == SOCK_STREAM)) {
                return Ok(Received::default());
            }
            if nonblock {
                return Err(EAGAIN.into());
            }
            return self
                .block_io((timeout > 0).then_some(timeout), Err(EAGAIN.into()))
                .map(|n| Received { n, ..Default::default() });
        }
        let (data, from, full, fds) = if ty == SOCK_STREAM {
            let mut n = (want as usize).min(u.bytes.len());
            // A read stops at the end of a write that passed descriptors, and takes them.
            let mut fds = Vec::new();
            if let Some((_, end, _)) = u.rights.front().filter(|r| r.0 < u.taken + n as u64) {
                n = n.min((end - u.taken) as usize);
                fds = if peek {
                    u.rights.front().map(|r| r.2.clone()).unwrap_or_default()
                } else {
                    u.rights.pop_front().map(|r| r.2).unwrap_or_default()
                };
            }
            let data: Vec<u8> =
                if peek { u.bytes.iter().take(n).copied().collect() } else { u.bytes.drain(..n).collect() };
            if !peek {
                u.taken += n as u64;
            }
            let len = data.len();
            (data, None, len, fds)
        } else {
            let m =
                if peek { u.msgs.front().cloned().unwrap_or_default() } else { u.msgs.pop_front().unwrap_or_default() };
            let mut data = m.data;
            let full = data.len();
            data.truncate(want as usize);
            (data, m.from, full, m.fds)
        };
        if let Err(e) = self.scatter(mem, iov, &data) {
            self.unix_fds(&fds, None, peek)?;
            return Err(e.into());
        }
        if !peek {
            self.net.touch(id);
            if let Some(p) = peer {
                self.net.touch(p); // room for a blocked writer
            }
        }
        let trunc = full > data.len();
        let n = if trunc && flags & MSG_TRUNC != 0 { full } else { data.len() };
        Ok(Received { n: n as u64, from, trunc, fds, peeked: peek })
    }

    /// Installs received descriptions as fds, as many as `room` (`None`: none) allows, and
    /// drops the rest: the fds, and whether some were dropped (`MSG_CTRUNC`).
    pub(super) fn unix_fds(
        &mut self,
        fds: &[u64],
        room: Option<(usize, bool)>,
        peeked: bool,
    ) -> Result<(Vec<i32>, bool), i32> {
        let (fit, cloexec) = room.unwrap_or((0, false));
        let limit = self.nofile();
        let mut got = Vec::new();
        let mut dropped = false;
        for &desc in fds {
            if got.len() < fit {
                if let Ok(fd) = self.files.fds.receive(desc, limit, cloexec, peeked) {
                    got.push(fd);
                    continue;
                }
            }
            dropped = true;
            if !peeked {
                let f = self.files.fds.unhold(desc);
                self.dropped(f);
            }
        }
        Ok((got, dropped))
    }

    /// Writes the control message of a `recvmsg` on a Unix socket: the `SCM_RIGHTS` of the
    /// descriptions received, installed as fds, or none; sets `msg_controllen` and returns the
    /// `MSG_CTRUNC` flag if some did not fit.
    pub(super) fn unix_recv_control(
        &mut self,
        mem: &mut dyn Memory,
        msg: u64,
        r: &Received,
        flags: u32,
        passcred: bool,
    ) -> Result<i32, i32> {
        let mut b = [0u8; 16];
        self.process.mappings.copy_in(mem, msg + 32, &mut b)?;
        let ctl = u64::from_le_bytes(b[..8].try_into().unwrap_or_default());
        let space = u64::from_le_bytes(b[8..].try_into().unwrap_or_default());
        // SO_PASSCRED: the sender's credentials come first (`SCM_CREDENTIALS`, a `struct
        // ucred`): in deja every sender is the one process, pid 1, uid and gid 1000.
        let mut creds_trunc = false;
        let (ctl, space, creds) = if passcred {
            if ctl != 0 && space >= 28 {
                let mut c = 28u64.to_le_bytes().to_vec();
                c.extend_from_slice(&SOL_SOCKET.to_le_bytes());
                c.extend_from_slice(&SCM_CREDENTIALS.to_le_bytes());
                c.extend_from_slice(&(self.pid() as u32).to_le_bytes());
                c.extend_from_slice(&(crate::mm::stack::GUEST_UID as u32).to_le_bytes());
                c.extend_from_slice(&(crate::mm::stack::GUEST_UID as u32).to_le_bytes());
                self.process.mappings.copy_out(mem, ctl, &c)?;
                let used = 32u64.min(space);
                (ctl + used, space - used, used)
            } else {
                creds_trunc = true;
                (ctl, space, 0)
            }
        } else {
            (ctl, space, 0)
        };
        let trunc_flag = if creds_trunc { MSG_CTRUNC } else { 0 };
        if r.fds.is_empty() {
            self.process.mappings.copy_out(mem, msg + 40, &creds.to_le_bytes())?;
            return Ok(trunc_flag);
        }
        let fit = if ctl == 0 { 0 } else { (space.saturating_sub(16) / 4).min(r.fds.len() as u64) as usize };
        if fit > 0 {
            self.process.mappings.check(ctl, 16 + 4 * fit as u64, Access::Write)?;
        }
        let (got, dropped) = self.unix_fds(&r.fds, Some((fit, flags & MSG_CMSG_CLOEXEC != 0)), r.peeked)?;
        let used = if got.is_empty() {
            0
        } else {
            let len = 16 + 4 * got.len() as u64;
            let mut c = len.to_le_bytes().to_vec();
            c.extend_from_slice(&SOL_SOCKET.to_le_bytes());
            c.extend_from_slice(&SCM_RIGHTS.to_le_bytes());
            for fd in &got {
                c.extend_from_slice(&fd.to_le_bytes());
            }
            self.process.mappings.copy_out(mem, ctl, &c)?;
            ((len + 7) & !7).min(space)
        };
        self.process.mappings.copy_out(mem, msg + 40, &(creds + used).to_le_bytes())?;
        Ok(if dropped { MSG_CTRUNC } else { trunc_flag })
    }
}
