//! Pipes, eventfds and epoll instances, and the waits on readiness: `epoll_wait` and its
//! variants, `poll`/`ppoll` and `select`/`pselect6`.

use super::*;

impl Kernel {
    pub(crate) fn sys_pipe2(&mut self, mem: &mut dyn Memory, fds: u64, flags: u64) -> SysResult {
        const O_DIRECT: u64 = 0o40000;
        if flags & !(u64::from(O_NONBLOCK | O_CLOEXEC) | O_DIRECT) != 0 {
            return Err(EINVAL.into());
        }
        self.process.mappings.check(fds, 8, Access::Write)?;
        let limit = self.nofile();
        let nb = flags as u32 & O_NONBLOCK;
        let cloexec = flags & u64::from(O_CLOEXEC) != 0;
        let id = self.net.add(ObjKind::Pipe { buf: VecDeque::new(), readers: 1, writers: 1, cap: PIPE_SIZE });
        let r = self.files.fds.install(OpenFile::new(FileKind::Pipe { obj: id, write: false }, nb), 0, limit, cloexec);
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                self.net.objects.remove(&id);
                return Err(e.into());
            }
        };
        let w = match self.files.fds.install(
            OpenFile::new(FileKind::Pipe { obj: id, write: true }, O_WRONLY | nb),
            0,
            limit,
            cloexec,
        ) {
            Ok(w) => w,
            Err(e) => {
                let f = self.files.fds.close(r).ok().flatten();
                self.dropped(f);
                self.net.objects.remove(&id);
                return Err(e.into());
            }
        };
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&r.to_le_bytes());
        b[4..].copy_from_slice(&w.to_le_bytes());
        self.process.mappings.copy_out(mem, fds, &b)?;
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

    /// `epoll_create`: `epoll_create1(0)`; the size is a hint that must be positive.
    pub(crate) fn sys_epoll_create(&mut self, size: u64) -> SysResult {
        if (size as i32) <= 0 {
            return Err(EINVAL.into());
        }
        self.sys_epoll_create1(0)
    }

    pub(crate) fn sys_epoll_ctl(&mut self, mem: &mut dyn Memory, epfd: u64, op: u64, fd: u64, ev: u64) -> SysResult {
        let ep = self.files.fds.get(epfd as i32)?.kind.epoll().ok_or(EINVAL)?;
        let fd = fd as i32;
        let target = self.files.fds.entry(fd)?;
        if fd == epfd as i32 {
            return Err(EINVAL.into());
        }
        self.files.fds.get(fd)?.kind.watchable_by(ep)?;
        let (events, data) = if op == EPOLL_CTL_DEL {
            (0, 0)
        } else {
            let mut b = [0u8; 12];
            self.process.mappings.copy_in(mem, ev, &mut b)?;
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
        Some(self.files.fds.get(fd).ok()?.readiness(&self.net, &self.files.fds))
    }

    pub(crate) fn sys_epoll_wait(
        &mut self,
        mem: &mut dyn Memory,
        epfd: u64,
        events: u64,
        max: u64,
        timeout: Option<u64>,
    ) -> SysResult {
        let ep = self.files.fds.get(epfd as i32)?.kind.epoll().ok_or(EINVAL)?;
        let max = max as i32;
        if max <= 0 || max > 1 << 20 {
            return Err(EINVAL.into());
        }
        self.process.mappings.check(events, max as u64 * 12, Access::Write)?;
        let Some(Obj { kind: ObjKind::Epoll { interests }, .. }) = self.net.objects.get(&ep) else {
            return Err(EINVAL.into());
        };
        let mut out: Vec<(i32, u32, u64)> = Vec::new();
        let mut fired: Vec<(i32, u64, bool)> = Vec::new();
        for (&fd, i) in interests {
            if out.len() >= max as usize {
                break;
            }
            if i.disabled || self.files.fds.entry(fd).map(|e| e.desc) != Ok(i.desc) {
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
        self.process.mappings.copy_out(mem, events, &b)?;
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
            self.process.mappings.copy_in(mem, a[3], &mut b)?;
            Some(duration_ns(&b, true)?)
        };
        if a[4] != 0 && a[5] != 8 {
            return Err(EINVAL.into());
        }
        self.with_wait_mask(mem, a[4], |k, mem| k.sys_epoll_wait(mem, a[0], a[1], a[2], timeout))
    }

    /// `epoll_pwait`: `epoll_wait` with a temporary signal mask.
    pub(crate) fn sys_epoll_pwait(&mut self, mem: &mut dyn Memory, a: [u64; 6]) -> SysResult {
        if a[4] != 0 && a[5] != 8 {
            return Err(EINVAL.into());
        }
        let timeout = Kernel::ms_timeout(a[3]);
        self.with_wait_mask(mem, a[4], |k, mem| k.sys_epoll_wait(mem, a[0], a[1], a[2], timeout))
    }

    /// `poll`/`ppoll` over `nfds` `struct pollfd` at `fds`.
    pub(crate) fn do_poll(&mut self, mem: &mut dyn Memory, fds: u64, nfds: u64, timeout: Option<u64>) -> SysResult {
        if nfds > self.nofile() {
            return Err(EINVAL.into());
        }
        let mut raw = vec![0u8; nfds as usize * 8];
        self.process.mappings.copy_in(mem, fds, &mut raw)?;
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
        self.process.mappings.copy_out(mem, fds, &raw)?;
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
                self.process.mappings.copy_in(mem, p, &mut input[k])?;
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
                self.process.mappings.copy_out(mem, p, &output[k])?;
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
            self.process.mappings.copy_in(mem, a[4], &mut b)?;
            Some(duration_ns(&b, false)?)
        };
        self.do_select(mem, a[0], [a[1], a[2], a[3]], timeout)
    }

    pub(crate) fn sys_pselect6(&mut self, mem: &mut dyn Memory, a: [u64; 6]) -> SysResult {
        let timeout = if a[4] == 0 {
            None
        } else {
            let mut b = [0u8; 16];
            self.process.mappings.copy_in(mem, a[4], &mut b)?;
            Some(duration_ns(&b, true)?)
        };
        // The sixth argument: { const sigset_t *ss; size_t ss_len }.
        let mut sigmask = 0;
        if a[5] != 0 {
            let ss = self.process.mappings.read_u64(mem, a[5])?;
            let len = self.process.mappings.read_u64(mem, a[5] + 8)?;
            if ss != 0 && len != 8 {
                return Err(EINVAL.into());
            }
            sigmask = ss;
        }
        self.with_wait_mask(mem, sigmask, |k, mem| k.do_select(mem, a[0], [a[1], a[2], a[3]], timeout))
    }
}
