//! Moving bytes through sockets, pipes and eventfds: the one receive path and the one send
//! path every read, write and socket call goes through, and `sendto`/`recvfrom`/`sendmsg`/
//! `recvmsg` around them.

use super::*;

impl Kernel {
    /// Receives from an object into `iov`: the byte count and, for a datagram, its sender.
    /// Blocks (or `EAGAIN`) when nothing is there.
    pub(crate) fn obj_recv(
        &mut self,
        mem: &mut dyn Memory,
        fd: i32,
        iov: &[(u64, u64)],
        flags: u32,
    ) -> Result<(u64, Option<SockAddr>, bool), SysStop> {
        let (id, end, fl) = self.object(fd)?;
        if end == Some(true) {
            return Err(EBADF.into());
        }
        let want: u64 = iov.iter().map(|&(_, l)| l).sum::<u64>().min(MAX_IO);
        for &(base, len) in iov {
            self.process.mappings.check(base, len.min(MAX_IO), Access::Write)?;
        }
        let nonblock = fl & O_NONBLOCK != 0 || flags & MSG_DONTWAIT != 0;
        let peek = flags & MSG_PEEK != 0;
        if self.unix(id).is_some() {
            let r = self.unix_recv(mem, id, iov, flags, nonblock)?;
            self.unix_fds(&r.fds, None, r.peeked)?; // no room for descriptors: dropped
            return Ok((r.n, None, r.trunc));
        }
        let timeout = self.net.objects.get(&id).map_or(0, |o| o.rcvtimeo);
        let obj = self.net.objects.get_mut(&id).ok_or(EBADF)?;
        let (data, from, trunc): (Vec<u8>, Option<SockAddr>, bool) = match &mut obj.kind {
            ObjKind::Stream(_) => {
                let data = self.stream_take(id, want, flags, nonblock, timeout)?;
                if data.is_empty() {
                    return Ok((0, None, false));
                }
                (data, None, false)
            }
            ObjKind::Netlink(n) => {
                if n.queue.is_empty() {
                    if nonblock {
                        return Err(EAGAIN.into());
                    }
                    return self
                        .block_io((timeout > 0).then_some(timeout), Err(EAGAIN.into()))
                        .map(|v| (v, None, false));
                }
                let mut msg = if peek { n.queue.front().cloned() } else { n.queue.pop_front() }.unwrap_or_default();
                let full = msg.len() as u64;
                let trunc = full > want;
                msg.truncate(want as usize);
                if trunc && flags & MSG_TRUNC != 0 {
                    self.scatter(mem, iov, &msg)?;
                    return Ok((full, None, true));
                }
                (msg, None, trunc)
            }
            ObjKind::Dgram(d) => {
                if d.error != 0 {
                    return Err(core::mem::take(&mut d.error).into());
                }
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
                    self.scatter(mem, iov, &msg)?;
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
            ObjKind::Epoll { .. } | ObjKind::Unix(_) => return Err(EINVAL.into()),
        };
        self.scatter(mem, iov, &data)?;
        if !peek {
            self.net.touch(id); // room for a blocked writer
        }
        Ok((data.len() as u64, from, trunc))
    }

    /// Takes up to `want` bytes a connected TCP socket received and its program has not read
    /// (copies them with `MSG_PEEK`), returning credit to the sender as reading does; empty at
    /// the end of the stream. Blocks (or `EAGAIN`) when nothing is there yet.
    pub(crate) fn stream_take(
        &mut self,
        id: u64,
        want: u64,
        flags: u32,
        nonblock: bool,
        timeout: u64,
    ) -> Result<Vec<u8>, SysStop> {
        let Some(ObjKind::Stream(s)) = self.net.objects.get_mut(&id).map(|o| &mut o.kind) else {
            return Err(EINVAL.into());
        };
        if s.state != StreamState::Connected {
            return Err(ENOTCONN.into());
        }
        let peek = flags & MSG_PEEK != 0;
        let wait =
            |k: &mut Kernel| k.block_io((timeout > 0).then_some(timeout), Err(EAGAIN.into())).map(|_| Vec::new());
        if flags & MSG_WAITALL != 0 && (s.rx.len() as u64) < want && !s.peer_fin && !s.reset && !nonblock {
            return wait(self);
        }
        if s.rx.is_empty() {
            if s.reset {
                if s.error != 0 {
                    s.error = 0;
                    return Err(ECONNRESET.into());
                }
                return Ok(Vec::new());
            }
            if s.peer_fin || s.shut_rd || want == 0 {
                return Ok(Vec::new());
            }
            if nonblock {
                return Err(EAGAIN.into());
            }
            return wait(self);
        }
        let n = (want as usize).min(s.rx.len());
        let data: Vec<u8> = if peek { s.rx.iter().take(n).copied().collect() } else { s.rx.drain(..n).collect() };
        if !peek {
            s.consumed += n as u64;
            if s.consumed >= ACK_EVERY || (s.rx.is_empty() && s.consumed > 0) {
                if let (Some(src), Some(dst)) = (s.local, s.remote) {
                    let credit = core::mem::take(&mut s.consumed);
                    self.net.send(Packet { src, dst, payload: Payload::Ack(credit) });
                }
            }
        }
        Ok(data)
    }

    /// Copies `data` into the buffers of `iov` in order.
    pub(super) fn scatter(&mut self, mem: &mut dyn Memory, iov: &[(u64, u64)], data: &[u8]) -> Result<(), i32> {
        let mut off = 0usize;
        for &(base, len) in iov {
            if off >= data.len() {
                break;
            }
            let n = (len as usize).min(data.len() - off);
            self.process.mappings.copy_out(mem, base, &data[off..off + n])?;
            off += n;
        }
        Ok(())
    }

    /// Sends `data` on an object (to `to` for an unconnected datagram socket). `EPIPE` comes
    /// with SIGPIPE, as in Linux, unless `flags` has `MSG_NOSIGNAL`.
    pub(crate) fn obj_send(&mut self, fd: i32, data: &[u8], flags: u32, to: Option<SockAddr>) -> SysResult {
        let r = self.obj_send_quiet(fd, data, flags, to);
        self.sigpipe(r, flags)
    }

    /// SIGPIPE to the calling thread for a write that failed with `EPIPE` without
    /// `MSG_NOSIGNAL`; the result stays (a handled or ignored SIGPIPE leaves `EPIPE`).
    pub(super) fn sigpipe(&mut self, r: SysResult, flags: u32) -> SysResult {
        if matches!(r, Err(SysStop::Err(EPIPE))) && flags & MSG_NOSIGNAL == 0 {
            self.raise_for_caller(crate::abi::signal::SIGPIPE);
        }
        r
    }

    fn obj_send_quiet(&mut self, fd: i32, data: &[u8], flags: u32, to: Option<SockAddr>) -> SysResult {
        let (id, end, fl) = self.object(fd)?;
        if end == Some(false) {
            return Err(EBADF.into());
        }
        let nonblock = fl & O_NONBLOCK != 0 || flags & MSG_DONTWAIT != 0;
        if self.unix(id).is_some() {
            return self.unix_send(id, data, nonblock, None, &[]);
        }
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
            let dst = self.destination(id, dst)?;
            let local = match local {
                Some(l) => l,
                None => self.autobind_dgram(id)?,
            };
            let src_ip = if local.is_unspecified() { self.net.source_ip(dst.ip) } else { local.ip };
            self.net.send(Packet {
                src: SockAddr::v6(src_ip, local.port),
                dst,
                payload: Payload::Datagram(data.to_vec()),
            });
            return Ok(data.len() as u64);
        }
        if self.netlink(id).is_some() {
            return self.netlink_send(id, data);
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
                // A reset connection reports ECONNRESET once, then EPIPE, as Linux's send does.
                if s.reset && s.error != 0 {
                    return Err(core::mem::take(&mut s.error).into());
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
            ObjKind::Pipe { buf, readers, cap, .. } => {
                if *readers == 0 {
                    return Err(EPIPE.into());
                }
                let room = cap.saturating_sub(buf.len());
                // Up to PIPE_BUF bytes go in whole or wait; more go in as far as there is room.
                if room == 0 || (data.len() <= PIPE_BUF && room < data.len()) {
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
            ObjKind::Epoll { .. } | ObjKind::Unix(_) | ObjKind::Netlink(_) => Err(EINVAL.into()),
        }
    }

    pub(crate) fn sys_sendto(&mut self, mem: &mut dyn Memory, a: [u64; 6]) -> SysResult {
        let [fd, buf, len, flags, addr, alen] = a;
        self.socket(fd)?;
        access_ok_len(buf, len)?;
        let len = len.min(MAX_IO);
        self.process.mappings.check(buf, len, Access::Read)?;
        let mut data = vec![0u8; len as usize];
        self.process.mappings.copy_in(mem, buf, &mut data)?;
        let (id, fl) = self.socket(fd)?;
        if self.unix(id).is_some() {
            let to = if addr != 0 { self.read_sockaddr_un(mem, addr, alen)? } else { None };
            let nonblock = fl & O_NONBLOCK != 0 || flags as u32 & MSG_DONTWAIT != 0;
            let r = self.unix_send(id, &data, nonblock, to.as_deref(), &[]);
            return self.sigpipe(r, flags as u32);
        }
        if self.netlink(id).is_some() {
            if addr != 0 {
                self.netlink_destination(mem, addr, alen)?;
            }
            return self.obj_send(fd as i32, &data, flags as u32, None);
        }
        let to = if addr != 0 { Some(self.read_sockaddr(mem, id, addr, alen)?.1) } else { None };
        self.obj_send(fd as i32, &data, flags as u32, to)
    }

    pub(crate) fn sys_recvfrom(&mut self, mem: &mut dyn Memory, a: [u64; 6]) -> SysResult {
        let [fd, buf, len, flags, addr, lenp] = a;
        self.socket(fd)?;
        access_ok_len(buf, len)?;
        if let Some(r) = self.unix_recv_named(mem, fd, &[(buf, len)], flags, addr, lenp)? {
            self.unix_fds(&r.fds, None, r.peeked)?;
            return Ok(r.n);
        }
        let (n, from, _) = self.obj_recv(mem, fd as i32, &[(buf, len)], flags as u32)?;
        let (id, _) = self.socket(fd)?;
        if let Some(src) = from {
            self.write_sockaddr(mem, id, addr, lenp, src)?;
        } else if self.netlink(id).is_some() {
            self.netlink_source(mem, addr, lenp)?;
        }
        Ok(n)
    }

    /// Reads a `struct msghdr`: name, namelen, iovecs.
    fn msghdr(&self, mem: &mut dyn Memory, msg: u64) -> Result<MsgHdr, i32> {
        let mut b = [0u8; 56];
        self.process.mappings.copy_in(mem, msg, &mut b)?;
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
            self.process.mappings.check(base, n, Access::Read)?;
            let start = data.len();
            data.resize(start + n as usize, 0);
            self.process.mappings.copy_in(mem, base, &mut data[start..])?;
        }
        let (id, fl) = self.socket(fd)?;
        if self.unix(id).is_some() {
            let rights = self.unix_control(mem, msg)?;
            let to = if name != 0 { self.read_sockaddr_un(mem, name, namelen)? } else { None };
            let nonblock = fl & O_NONBLOCK != 0 || flags as u32 & MSG_DONTWAIT != 0;
            let r = self.unix_send(id, &data, nonblock, to.as_deref(), &rights);
            return self.sigpipe(r, flags as u32);
        }
        if self.netlink(id).is_some() {
            if name != 0 {
                self.netlink_destination(mem, name, namelen)?;
            }
            return self.obj_send(fd as i32, &data, flags as u32, None);
        }
        let to = if name != 0 { Some(self.read_sockaddr(mem, id, name, namelen)?.1) } else { None };
        self.obj_send(fd as i32, &data, flags as u32, to)
    }

    pub(crate) fn sys_recvmsg(&mut self, mem: &mut dyn Memory, fd: u64, msg: u64, flags: u64) -> SysResult {
        self.socket(fd)?;
        let (name, _, iov) = self.msghdr(mem, msg)?;
        let (n, trunc) = if let Some(r) = self.unix_recv_named(mem, fd, &iov, flags, name, msg + 8)? {
            let (id, _) = self.socket(fd)?;
            let passcred = self.obj(id)?.options.get(&(SOL_SOCKET, SO_PASSCRED)).is_some_and(|v| *v != 0);
            let ctrunc = self.unix_recv_control(mem, msg, &r, flags as u32, passcred)?;
            let mf = if r.trunc { MSG_TRUNC as i32 } else { 0 } | ctrunc | (flags as u32 & MSG_CMSG_CLOEXEC) as i32;
            self.process.mappings.copy_out(mem, msg + 48, &mf.to_le_bytes())?;
            return Ok(r.n);
        } else {
            let (n, from, trunc) = self.obj_recv(mem, fd as i32, &iov, flags as u32)?;
            let (id, _) = self.socket(fd)?;
            if let (Some(src), true) = (from, name != 0) {
                self.write_sockaddr(mem, id, name, msg + 8, src)?;
            } else if self.netlink(id).is_some() && name != 0 {
                self.netlink_source(mem, name, msg + 8)?;
            } else {
                self.process.mappings.copy_out(mem, msg + 8, &0u32.to_le_bytes())?;
            }
            (n, trunc)
        };
        self.process.mappings.copy_out(mem, msg + 40, &0u64.to_le_bytes())?;
        // Linux hands MSG_CMSG_CLOEXEC back in msg_flags.
        let mf: i32 = if trunc { MSG_TRUNC as i32 } else { 0 } | (flags as u32 & MSG_CMSG_CLOEXEC) as i32;
        self.process.mappings.copy_out(mem, msg + 48, &mf.to_le_bytes())?;
        Ok(n)
    }

    /// `recvfrom`/`recvmsg` on a Unix socket (`None` for other kinds): what it received; the
    /// sender's name goes to `addr`, its length to `lenp` (0 for an unnamed sender, as Linux
    /// reports it).
    fn unix_recv_named(
        &mut self,
        mem: &mut dyn Memory,
        fd: u64,
        iov: &[(u64, u64)],
        flags: u64,
        addr: u64,
        lenp: u64,
    ) -> Result<Option<unix::Received>, SysStop> {
        let (id, fl) = self.socket(fd)?;
        if self.unix(id).is_none() {
            return Ok(None);
        }
        let nonblock = fl & O_NONBLOCK != 0 || flags as u32 & MSG_DONTWAIT != 0;
        let r = self.unix_recv(mem, id, iov, flags as u32, nonblock)?;
        let named = match &r.from {
            Some(name) if addr != 0 => self.write_sockaddr_un(mem, addr, lenp, Some(name)),
            _ if lenp != 0 => self.process.mappings.copy_out(mem, lenp, &0u32.to_le_bytes()),
            _ => Ok(()),
        };
        if let Err(e) = named {
            self.unix_fds(&r.fds, None, r.peeked)?;
            return Err(e.into());
        }
        Ok(Some(r))
    }
}
