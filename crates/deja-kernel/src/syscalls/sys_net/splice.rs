//! `splice`, `tee` and `vmsplice`: moving bytes between a pipe and another descriptor (a TCP
//! socket, a file, another pipe) without the program copying them.
//!
//! deja copies where Linux moves pages, which no program can tell apart: what leaves one side is
//! what arrives on the other, in order. A call moves what it can now, up to the room the
//! destination has, and never takes from the source more than the destination took; with
//! nothing to move it blocks like a read or a write would, or gives `EAGAIN` when
//! `SPLICE_F_NONBLOCK` is set or either descriptor is non-blocking (Linux's `do_splice`). A
//! Unix-domain socket as the source is `EINVAL`, which callers such as Go's `io.Copy` take as
//! "copy by hand".

use super::*;

const SPLICE_F_NONBLOCK: u64 = 2;
/// `SPLICE_F_MOVE | SPLICE_F_NONBLOCK | SPLICE_F_MORE | SPLICE_F_GIFT`.
const SPLICE_FLAGS: u64 = 0xf;

/// One side of a splice.
#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    /// A pipe or an open FIFO.
    Pipe(u64),
    /// A socket.
    Socket(u64),
    /// Anything with a position or none (a file, the standard streams, `/dev/urandom`).
    File,
}

/// The input and output ends of a call, each with its description's flags.
type Ends = ((End, u32), (End, u32));

impl Kernel {
    /// Which kind of end `fd` is, and its description's flags; `EBADF` unless it reads (or
    /// writes, with `write`).
    fn splice_end(&self, fd: i32, write: bool) -> Result<(End, u32), i32> {
        let f = self.files.fds.get(fd)?;
        if (write && !f.writable()) || (!write && !f.readable()) {
            return Err(EBADF);
        }
        let end = match (f.kind.pipe_end(), object_of(&f.kind)) {
            (Some((obj, _, _)), _) => End::Pipe(obj),
            (None, Some((obj, None))) if f.kind.socket().is_some() => End::Socket(obj),
            (None, Some(_)) => return Err(EINVAL), // eventfd, epoll
            (None, None) => End::File,
        };
        Ok((end, f.flags))
    }

    /// A pipe's bytes, room, readers and writers.
    fn pipe_state(&mut self, obj: u64) -> Result<(&mut VecDeque<u8>, usize, u32, u32), i32> {
        match self.net.objects.get_mut(&obj).map(|o| &mut o.kind) {
            Some(ObjKind::Pipe { buf, readers, writers, cap }) => {
                let room = cap.saturating_sub(buf.len());
                Ok((buf, room, *readers, *writers))
            }
            _ => Err(EBADF),
        }
    }

    /// Waits for a pipe or socket to change, or `EAGAIN` without waiting.
    fn splice_wait(&mut self, nonblock: bool) -> SysResult {
        if nonblock {
            return Err(EAGAIN.into());
        }
        self.block_io(None, Err(EAGAIN.into()))
    }

    /// What `splice` and `tee` check first, in Linux's order: nothing to move (`None`), then
    /// the flags, then the descriptors; the two ends and their description flags.
    fn splice_ends(&self, fd_in: u64, fd_out: u64, len: u64, flags: u64) -> Result<Option<Ends>, i32> {
        if len == 0 {
            return Ok(None);
        }
        if flags & !SPLICE_FLAGS != 0 {
            return Err(EINVAL);
        }
        Ok(Some((self.splice_end(fd_in as i32, false)?, self.splice_end(fd_out as i32, true)?)))
    }

    /// `splice(fd_in, off_in, fd_out, off_out, len, flags)`.
    pub(crate) fn sys_splice(&mut self, mem: &mut dyn Memory, a: [u64; 6]) -> SysResult {
        let [fd_in, off_in, fd_out, off_out, len, flags] = a;
        let Some(((src, fl_in), (dst, fl_out))) = self.splice_ends(fd_in, fd_out, len, flags)? else { return Ok(0) };
        let (pipe_in, pipe_out) = (matches!(src, End::Pipe(_)), matches!(dst, End::Pipe(_)));
        if (!pipe_in && !pipe_out) || src == dst {
            return Err(EINVAL.into());
        }
        // Only a file has a position to splice at: ESPIPE for a pipe's, EINVAL for a socket's.
        for (off, end) in [(off_in, src), (off_out, dst)] {
            match end {
                End::Pipe(_) if off != 0 => return Err(ESPIPE.into()),
                End::Socket(_) if off != 0 => return Err(EINVAL.into()),
                _ => {}
            }
        }
        if dst == End::File && fl_out & O_APPEND != 0 {
            return Err(EINVAL.into());
        }
        if let End::Socket(id) = src {
            if self.unix(id).is_some() || !matches!(self.obj(id)?.kind, ObjKind::Stream(_)) {
                return Err(EINVAL.into());
            }
        }
        let len = len.min(MAX_IO);
        // SPLICE_F_NONBLOCK and a pipe's O_NONBLOCK keep the call from waiting on the pipe (on
        // either pipe between two); a socket waits as its own O_NONBLOCK says.
        let nb = |fl: u32| fl & O_NONBLOCK != 0;
        let pipe_nb = flags & SPLICE_F_NONBLOCK != 0
            || match (pipe_in, pipe_out) {
                (true, true) => nb(fl_in | fl_out),
                (true, false) => nb(fl_in),
                _ => nb(fl_out),
            };
        let pos_in = if src == End::File { self.offset_arg(mem, off_in)? } else { None };
        let pos_out = if dst == End::File { self.offset_arg(mem, off_out)? } else { None };

        // A pipe to read from must have something in it (Linux looks at the input first).
        if let End::Pipe(p) = src {
            let (buf, _, _, writers) = self.pipe_state(p)?;
            if buf.is_empty() {
                if writers == 0 {
                    return Ok(0);
                }
                return self.splice_wait(pipe_nb);
            }
        }
        // How much the destination takes now.
        let mut want = len;
        if let End::Pipe(p) = dst {
            let (_, room, readers, _) = self.pipe_state(p)?;
            if readers == 0 {
                return self.sigpipe(Err(EPIPE.into()), 0);
            }
            if room == 0 {
                return self.splice_wait(pipe_nb);
            }
            want = want.min(room as u64);
        }

        // What the source gives: a pipe's bytes are only looked at here, and taken below once
        // the destination took them.
        let data: Vec<u8> = match src {
            End::Pipe(p) => {
                let (buf, _, _, _) = self.pipe_state(p)?;
                buf.iter().take(want as usize).copied().collect()
            }
            End::Socket(id) => {
                let timeout = self.obj(id)?.rcvtimeo;
                let data = self.stream_take(id, want, 0, nb(fl_in), timeout)?;
                if !data.is_empty() {
                    self.net.touch(id);
                }
                data
            }
            End::File => self.read_bytes(fd_in, want, pos_in)?,
        };
        if data.is_empty() {
            return Ok(0);
        }

        let n = match dst {
            End::Pipe(p) => {
                let (buf, _, _, _) = self.pipe_state(p)?;
                buf.extend(&data);
                self.net.touch(p);
                data.len() as u64
            }
            End::Socket(_) => {
                let flags = if nb(fl_out) { MSG_DONTWAIT } else { 0 };
                self.obj_send(fd_out as i32, &data, flags, None)?
            }
            End::File => self.do_write(fd_out, &data, pos_out)?,
        };
        match src {
            End::Pipe(p) => {
                let (buf, _, _, _) = self.pipe_state(p)?;
                buf.drain(..n as usize);
                self.net.touch(p);
            }
            End::File => self.moved(mem, fd_in, off_in, pos_in, n)?,
            End::Socket(_) => {}
        }
        // The bytes moved; a position that cannot be written back is EFAULT, as on Linux.
        if let Some(at) = pos_out {
            self.process.mappings.copy_out(mem, off_out, &(at + n).to_le_bytes())?;
        }
        Ok(n)
    }

    /// `tee(fd_in, fd_out, len, flags)`: copies up to `len` bytes from one pipe to another,
    /// leaving them in the first.
    pub(crate) fn sys_tee(&mut self, a: [u64; 4]) -> SysResult {
        let [fd_in, fd_out, len, flags] = a;
        let Some(((src, fl_in), (dst, fl_out))) = self.splice_ends(fd_in, fd_out, len, flags)? else { return Ok(0) };
        let (End::Pipe(from), End::Pipe(to)) = (src, dst) else { return Err(EINVAL.into()) };
        if from == to {
            return Err(EINVAL.into());
        }
        let nonblock = flags & SPLICE_F_NONBLOCK != 0 || (fl_in | fl_out) & O_NONBLOCK != 0;
        // The input first, as Linux's `link_ipipe_prep`.
        let (buf, _, _, writers) = self.pipe_state(from)?;
        if buf.is_empty() {
            if writers == 0 {
                return Ok(0);
            }
            return self.splice_wait(nonblock);
        }
        let (_, room, readers, _) = self.pipe_state(to)?;
        if readers == 0 {
            return self.sigpipe(Err(EPIPE.into()), 0);
        }
        if room == 0 {
            return self.splice_wait(nonblock);
        }
        let want = len.min(MAX_IO).min(room as u64) as usize;
        let (buf, _, _, _) = self.pipe_state(from)?;
        let data: Vec<u8> = buf.iter().take(want).copied().collect();
        let (buf, _, _, _) = self.pipe_state(to)?;
        buf.extend(&data);
        self.net.touch(to);
        Ok(data.len() as u64)
    }

    /// `vmsplice(fd, iov, nr_segs, flags)`: the program's buffers into a pipe it writes, or
    /// out of a pipe it reads, as `writev` and `readv` do (`SPLICE_F_NONBLOCK` as `MSG_DONTWAIT`).
    pub(crate) fn sys_vmsplice(&mut self, mem: &mut dyn Memory, a: [u64; 4]) -> SysResult {
        let [fd, iov, segs, flags] = a;
        let f = self.files.fds.get(fd as i32)?;
        if f.kind.pipe_end().is_none() {
            return Err(EBADF.into());
        }
        if flags & !SPLICE_FLAGS != 0 {
            return Err(EINVAL.into());
        }
        let msg = if flags & SPLICE_F_NONBLOCK != 0 { MSG_DONTWAIT } else { 0 };
        if f.writable() {
            self.writev_flags(mem, fd, iov, segs, msg)
        } else {
            self.readv_flags(mem, fd, iov, segs, msg)
        }
    }
}
