//! Opening a FIFO: the pipe its openers share ([`crate::net::Fifo`]), and the wait for the
//! other side, as Linux's `fifo_open` does it.
//!
//! - `O_RDONLY` waits until a writer has opened the FIFO, `O_WRONLY` until a reader has (one
//!   that came and already left counts: each side's count of openers moved). A waiting open
//!   counts as a reader or a writer already, so the other side does not wait for it.
//! - `O_RDONLY | O_NONBLOCK` succeeds at once; reads then see the end of the file while no
//!   writer is there, and no hang-up is reported until a writer has come.
//! - `O_WRONLY | O_NONBLOCK` with no reader is `ENXIO`.
//! - `O_RDWR` succeeds at once, as a reader and a writer.
//!
//! A waiting open blocks its thread like any other I/O wait ([`Kernel::block_io`]): it is
//! served again whenever an object changes, and when no thread can ever open the other side
//! the program ends with a deadlock. A signal interrupts it as it does other I/O waits
//! ([`crate::syscalls::sys_signal`]): the open gives its side back ([`Kernel::abandon_fifo_wait`]) and
//! ends with `EINTR`, or runs again after a handler with `SA_RESTART`.
//! Once open, reads and writes are the pipe's ([`super::transfer`]): end of file once every
//! writer closed, `EPIPE` and SIGPIPE once every reader did. When the last opener closes, the
//! pipe and whatever it still held go, and the next opener gets an empty one.

use super::*;

impl Kernel {
    /// Opens the FIFO whose inode is `id` with `flags` (at most `limit` fds): a new fd, or a
    /// wait for the other side.
    pub(crate) fn open_fifo(&mut self, id: u64, flags: u32, limit: u64) -> SysResult {
        let (read, write) = fifo_sides(flags);
        let nonblock = flags & O_NONBLOCK != 0;
        let obj = self.net.fifos.get(&id).map(|f| f.obj);
        let (readers, writers) = obj.map_or((0, 0), |o| self.net.pipe_ends(o));
        if write && !read && nonblock && readers == 0 {
            return Err(ENXIO.into());
        }
        let obj = self.net.fifo_pipe(id);
        self.net.join_pipe(id, obj, read, write);
        let opened = self.net.fifos.get(&id).map_or([1, 1], |f| f.opened);
        let wait = match (read, write) {
            (true, false) if writers == 0 && !nonblock => Some((true, opened[1])),
            (false, true) if readers == 0 => Some((false, opened[0])),
            _ => None,
        };
        if let Some(w) = wait {
            let tid = self.caller();
            if let Some(f) = self.net.fifos.get_mut(&id) {
                f.waiting.insert(tid, w);
            }
            return self.block_io(None, Err(EAGAIN.into()));
        }
        let quiet = if read && !write && writers == 0 { opened[1] } else { 0 };
        self.install_fifo(id, obj, flags, quiet, limit)
    }

    /// The FIFO whose open the thread whose call is served again waits in, if any.
    pub(crate) fn fifo_waited(&self) -> Option<u64> {
        let tid = self.sched.threads.retrying?.0;
        self.net.fifos.iter().find(|(_, f)| f.waiting.contains_key(&tid)).map(|(&id, _)| id)
    }

    /// Serves again the open of the FIFO `id` that the thread waits in: done once the side
    /// it waits for has had an opener.
    pub(crate) fn fifo_open_again(&mut self, id: u64, flags: u32, limit: u64) -> SysResult {
        let tid = self.caller();
        let Some(f) = self.net.fifos.get(&id) else { return Err(ENXIO.into()) };
        let Some(&(for_writer, since)) = f.waiting.get(&tid) else { return Err(ENXIO.into()) };
        let obj = f.obj;
        if f.opened[usize::from(for_writer)] == since {
            return self.block_io(None, Err(EAGAIN.into()));
        }
        if let Some(f) = self.net.fifos.get_mut(&id) {
            f.waiting.remove(&tid);
        }
        self.install_fifo(id, obj, flags, 0, limit)
    }

    /// Thread `tid` no longer waits to open a FIFO (a signal ended its wait): its side of
    /// the pipe, counted while it waited, is given back.
    pub(crate) fn abandon_fifo_wait(&mut self, tid: u64) {
        let Some((obj, for_writer)) =
            self.net.fifos.values_mut().find_map(|f| f.waiting.remove(&tid).map(|(for_writer, _)| (f.obj, for_writer)))
        else {
            return;
        };
        // One that waits for a writer is a reader, and the other way round.
        self.net.leave_pipe(obj, for_writer, !for_writer);
    }

    /// The fd of a FIFO opened: the description holds the inode and its side of the pipe.
    /// With no fd free any more (a wait ended after other opens), or the inode gone, the open
    /// gives its side back.
    fn install_fifo(&mut self, id: u64, obj: u64, flags: u32, quiet: u64, limit: u64) -> SysResult {
        let (read, write) = fifo_sides(flags);
        if self.files.fs.get(id).is_none() {
            self.net.leave_pipe(obj, read, write);
            return Err(ENOENT.into());
        }
        let keep = !(O_CREAT | O_EXCL | O_TRUNC | O_CLOEXEC | 0o400);
        let file = OpenFile::new(FileKind::Fifo { id, obj, read, write, quiet }, (flags & keep) | O_LARGEFILE);
        match self.files.fds.install(file, 0, limit, flags & O_CLOEXEC != 0) {
            Ok(fd) => {
                self.files.fs.opened(id);
                Ok(fd as u64)
            }
            Err(e) => {
                self.net.leave_pipe(obj, read, write);
                Err(e.into())
            }
        }
    }
}

/// Whether an open with `flags` reads a FIFO and writes it.
fn fifo_sides(flags: u32) -> (bool, bool) {
    match flags & O_ACCMODE {
        O_WRONLY => (false, true),
        O_RDWR => (true, true),
        _ => (true, false),
    }
}
