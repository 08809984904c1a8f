//! Processes: `fork`, `vfork` and `clone` of a process, `execve` and `execveat`, `wait4` and
//! `waitid`, the end of a process, its ids (`getpid`, `getppid`, groups and sessions),
//! `kill` to a pid or a group, `SIGCHLD` and `PR_SET_PDEATHSIG`; and the switch between the
//! parts of the node's processes (see [`procs`](crate::task::procs) for the model).

use crate::prelude::*;

use crate::abi::errno::*;
use crate::abi::signal::{SIGCHLD, SIG_IGN};
use crate::kernel::{Image, Kernel, SysResult, SysStop};
use crate::mm::stack::GUEST_UID;
use crate::signal::Queued;
use crate::syscalls::sys_path::Target;
use crate::task::procs::{Mm, Proc, MAX_PROCESSES};
use crate::task::threads::{SpawnedThread, Thread, ThreadState};
use crate::{ExitStatus, Memory};

/// `CLONE_VM`.
pub(crate) const CLONE_VM: u64 = 0x100;
/// `CLONE_FS`.
pub(crate) const CLONE_FS: u64 = 0x200;
/// `CLONE_FILES`.
pub(crate) const CLONE_FILES: u64 = 0x400;
/// `CLONE_SIGHAND`.
pub(crate) const CLONE_SIGHAND: u64 = 0x800;
/// `CLONE_PIDFD`.
const CLONE_PIDFD: u64 = 0x1000;
/// `CLONE_PTRACE`.
const CLONE_PTRACE: u64 = 0x2000;
/// `CLONE_VFORK`.
const CLONE_VFORK: u64 = 0x4000;
/// `CLONE_PARENT`.
const CLONE_PARENT: u64 = 0x8000;
/// `CLONE_THREAD`.
pub(crate) const CLONE_THREAD: u64 = 0x1_0000;
/// `CLONE_SYSVSEM`: no System V semaphores to share.
pub(crate) const CLONE_SYSVSEM: u64 = 0x4_0000;
/// `CLONE_SETTLS`.
pub(crate) const CLONE_SETTLS: u64 = 0x8_0000;
/// `CLONE_PARENT_SETTID`.
pub(crate) const CLONE_PARENT_SETTID: u64 = 0x10_0000;
/// `CLONE_CHILD_CLEARTID`.
pub(crate) const CLONE_CHILD_CLEARTID: u64 = 0x20_0000;
/// `CLONE_CHILD_SETTID`.
pub(crate) const CLONE_CHILD_SETTID: u64 = 0x100_0000;
/// The flags a process-creating clone may carry.
const PROCESS_FLAGS: u64 = CLONE_VM
    | CLONE_VFORK
    | CLONE_PARENT
    | CLONE_SETTLS
    | CLONE_PARENT_SETTID
    | CLONE_CHILD_CLEARTID
    | CLONE_CHILD_SETTID
    | CLONE_SYSVSEM;

/// `WNOHANG`.
const WNOHANG: u64 = 1;
/// `WEXITED` (waitid).
const WEXITED: u64 = 4;
/// `WNOWAIT` (waitid).
const WNOWAIT: u64 = 0x0100_0000;
/// `__WALL`, `__WCLONE`, `__WNOTHREAD`, `WUNTRACED`, `WCONTINUED`: accepted, nothing to do (no
/// process stops, every child is a process).
const WAIT_IGNORED: u64 = 0x4000_0000 | 0x8000_0000 | 0x2000_0000 | 2 | 8;
/// `SA_NOCLDWAIT`.
const SA_NOCLDWAIT: u64 = 2;
/// `SI_USER`.
const SI_USER: i32 = 0;
/// `CLD_EXITED`, `CLD_KILLED`.
const CLD_EXITED: i32 = 1;
const CLD_KILLED: i32 = 2;
/// Most bytes of argv and the environment together at `execve` (Linux's limit is a quarter of
/// the stack; deja's stack is 8 MiB).
const ARG_MAX: usize = 2 << 20;

/// The status `wait4` reports for `st`.
pub(crate) fn wait_status(st: &ExitStatus) -> u32 {
    match st {
        ExitStatus::Exited { code } => ((*code as u32) & 0xff) << 8,
        ExitStatus::Signaled { signal, .. } => (*signal as u32) & 0x7f,
    }
}

/// `si_code` and `si_status` of a child that ended with `st`.
fn child_code(st: &ExitStatus) -> (i32, i32) {
    match st {
        ExitStatus::Exited { code } => (CLD_EXITED, *code & 0xff),
        ExitStatus::Signaled { signal, .. } => (CLD_KILLED, *signal),
    }
}

/// The `SIGCHLD` a parent gets from `pid` ending with `st`.
fn child_info(sig: i32, pid: u64, st: &ExitStatus) -> Queued {
    let (code, status) = child_code(st);
    let mut q = Queued::sent(sig, code, pid as u32, GUEST_UID as u32);
    q.0[24..28].copy_from_slice(&status.to_le_bytes());
    q
}

impl Kernel {
    /// The current process's name (its `comm`).
    pub(crate) fn process_name(&self) -> String {
        let c = &self.process.comm;
        String::from_utf8_lossy(&c[..c.iter().position(|&b| b == 0).unwrap_or(c.len())]).into_owned()
    }

    /// The current process's pid.
    pub(crate) fn pid(&self) -> u64 {
        self.procs.current
    }

    /// The process of thread `tid` (0 if there is none).
    pub(crate) fn pid_of(&self, tid: u64) -> u64 {
        self.sched.threads.threads.get(&tid).map_or(0, |t| t.pid)
    }

    /// True if `tid` is the current thread and its process's parts are the kernel's (not a
    /// blocked call of another process served again).
    pub(crate) fn is_current(&self, tid: u64) -> bool {
        tid == self.sched.threads.current && self.pid_of(tid) == self.procs.current
    }

    /// Makes process `pid`'s parts current (its [`Process`](crate::task::process::Process), fds,
    /// working directory and address space), keeping the current process's with it in the
    /// table; a current process that ended leaves nothing behind. Threads are not switched
    /// (see [`Kernel::switch_to`]). Nothing happens for a process that is not live.
    pub(crate) fn enter(&mut self, mem: &mut dyn Memory, pid: u64) {
        let cur = self.procs.current;
        if cur == pid {
            return;
        }
        let Some(target) = self.procs.table.get_mut(&pid) else { return };
        let Some(incoming) = target.parked.take() else { return };
        let mut incoming = *incoming;
        let (in_space, in_cwd) = (target.space, target.cwd);
        let (out_space, out_live) = self.procs.table.get(&cur).map_or((u64::MAX, false), |p| (p.space, p.live()));
        let mm = Mm::take(&mut self.process);
        if in_space == out_space {
            mm.put(&mut incoming);
        } else {
            if self.procs.table.values().any(|p| p.live() && p.space == out_space) {
                self.procs.spaces.insert(out_space, mm);
            } else if out_space != u64::MAX {
                self.procs.dead_spaces.push(out_space);
            }
            if let Some(mm) = self.procs.spaces.remove(&in_space) {
                mm.put(&mut incoming);
            }
            mem.switch_space(in_space);
        }
        let outgoing = core::mem::replace(&mut self.process, incoming);
        let out_cwd = core::mem::replace(&mut self.files.cwd, in_cwd);
        if let (true, Some(p)) = (out_live, self.procs.table.get_mut(&cur)) {
            p.parked = Some(Box::new(outgoing));
            p.cwd = out_cwd;
        }
        self.files.fds.switch(out_live.then_some(cur), pid);
        self.procs.current = pid;
        if let Some(p) = self.procs.table.get(&pid) {
            self.files.fs.set_exe_path(&p.exe);
        }
        self.free_dead_spaces(mem);
    }

    /// Frees the address spaces no process uses, except the current one.
    fn free_dead_spaces(&mut self, mem: &mut dyn Memory) {
        let now = mem.space();
        let dead = core::mem::take(&mut self.procs.dead_spaces);
        for s in dead {
            if s == now {
                self.procs.dead_spaces.push(s);
            } else {
                mem.drop_space(s);
            }
        }
    }

    /// `fork`: a child process with a copy of the caller's address space.
    pub(crate) fn sys_fork(&mut self, mem: &mut dyn Memory) -> SysResult {
        self.new_process(mem, SIGCHLD as u64, 0, 0, 0, 0)
    }

    /// `vfork`: a child process in the caller's address space; the caller waits until it calls
    /// `execve` or ends.
    pub(crate) fn sys_vfork(&mut self, mem: &mut dyn Memory) -> SysResult {
        self.new_process(mem, CLONE_VM | CLONE_VFORK | SIGCHLD as u64, 0, 0, 0, 0)
    }

    /// `clone` and `clone3` without `CLONE_THREAD`: a new process. `flags` holds the exit
    /// signal in its low byte.
    pub(crate) fn new_process(
        &mut self,
        mem: &mut dyn Memory,
        flags: u64,
        stack: u64,
        parent_tid: u64,
        child_tid: u64,
        tls: u64,
    ) -> SysResult {
        let exit_signal = (flags & 0xff) as i32;
        let flags = flags & !0xff;
        if flags & (CLONE_SIGHAND | CLONE_THREAD) != 0 && flags & CLONE_VM == 0 {
            return Err(EINVAL.into());
        }
        if flags & (CLONE_FS | CLONE_FILES | CLONE_PIDFD | CLONE_PTRACE) != 0 || flags & !PROCESS_FLAGS != 0 {
            return Err(SysStop::Unsupported);
        }
        if exit_signal > 64 {
            return Err(EINVAL.into());
        }
        if self.procs.table.len() >= MAX_PROCESSES {
            return Err(EAGAIN.into());
        }
        let parent_pid = self.procs.current;
        let caller = self.sched.threads.current;
        let tid = self.sched.threads.alloc_tid().ok_or(EAGAIN)?;
        let parent = self.procs.cur().cloned().ok_or(ESRCH)?;
        let space = if flags & CLONE_VM != 0 {
            parent.space
        } else {
            let shared: Vec<(u64, u64)> =
                self.process.mappings.iter().filter(|v| v.shared).map(|v| (v.start, v.end)).collect();
            // A shared page is one frame in both spaces: every page must exist to be shared.
            for &(a, b) in &shared {
                self.process.mappings.populate(mem, a, b - a).map_err(|_| ENOMEM)?;
            }
            mem.fork_space(&shared).map_err(|_| ENOMEM)?
        };
        let id = (tid as u32).to_le_bytes();
        if flags & CLONE_PARENT_SETTID != 0 {
            let _ = self.process.mappings.copy_out(mem, parent_tid, &id);
        }
        if flags & CLONE_CHILD_SETTID != 0 {
            // In the child's memory (the same as the parent's with `CLONE_VM`).
            mem.switch_space(space);
            let _ = self.process.mappings.copy_out(mem, child_tid, &id);
            mem.switch_space(parent.space);
        }
        // The child's process: a copy of the caller's, without what Linux does not pass on.
        let mut child = self.process.clone();
        child.signals.pending = Default::default();
        child.signals.caught.clear();
        child.signals.forced = None;
        child.itimer_real = None;
        child.exit = None;
        child.last_fault = None;
        child.fault_repeats = 0;
        if flags & CLONE_VM == 0 {
            self.procs.spaces.insert(space, Mm { ..Mm::take(&mut child) });
            // The copy describes the new space; the caller's stays with the caller.
        } else {
            let _ = Mm::take(&mut child);
        }
        let ppid = if flags & CLONE_PARENT != 0 { parent.ppid.max(1) } else { parent_pid };
        let settls = flags & CLONE_SETTLS != 0;
        let me = self.sched.threads.threads.get(&caller);
        let t = Thread {
            fs_base: if settls { tls } else { self.process.fs_base },
            gs_base: self.process.gs_base,
            clear_child_tid: if flags & CLONE_CHILD_CLEARTID != 0 { child_tid } else { 0 },
            robust_list: (0, 0),
            sigmask: self.process.signals.mask,
            altstack: if flags & CLONE_VM != 0 && flags & CLONE_VFORK == 0 {
                crate::signal::DISABLED_ALTSTACK
            } else {
                self.process.signals.altstack
            },
            pending: Default::default(),
            suspended_mask: None,
            kicked: false,
            interrupted: None,
            keepcaps: me.is_some_and(|t| t.keepcaps),
            pid: tid,
            space,
            state: ThreadState::Runnable,
        };
        self.procs.table.insert(
            tid,
            Proc {
                ppid,
                pgid: parent.pgid,
                sid: parent.sid,
                space,
                parked: Some(Box::new(child)),
                cwd: self.files.cwd,
                exit_signal,
                vfork_parent: (flags & CLONE_VFORK != 0).then_some(caller),
                pdeathsig: 0,
                exe: parent.exe.clone(),
                status: None,
                execed: false,
                cmdline: parent.cmdline.clone(),
                comm: [0; 16],
            },
        );
        self.files.fds.fork_for(tid);
        self.sched.threads.threads.insert(tid, t);
        self.sched.threads.spawned.push(SpawnedThread { tid, stack, tls: settls.then_some(tls), entry: None });
        if flags & CLONE_VFORK != 0 {
            if let Some(t) = self.sched.threads.threads.get_mut(&caller) {
                t.state = ThreadState::Vfork { child: tid };
            }
            return Err(SysStop::Block);
        }
        Ok(tid)
    }

    /// Wakes the parent thread waiting in `vfork` for process `pid`, if any.
    fn release_vfork(&mut self, pid: u64) {
        if let Some(t) = self.procs.table.get_mut(&pid).and_then(|p| p.vfork_parent.take()) {
            if matches!(self.sched.threads.threads.get(&t).map(|t| t.state), Some(ThreadState::Vfork { child }) if child == pid)
            {
                self.sched.threads.wake(t, pid);
            }
        }
    }

    /// `execve`.
    pub(crate) fn sys_execve(&mut self, mem: &mut dyn Memory, path: u64, argv: u64, envp: u64) -> SysResult {
        self.sys_execveat(mem, crate::kernel::AT_FDCWD, path, argv, envp, 0)
    }

    /// `execveat`: replaces the calling process's program with the file at `path` (from
    /// `dirfd`; with `AT_EMPTY_PATH` the file open on `dirfd`), static or dynamic, or the
    /// interpreter a `#!` line names.
    pub(crate) fn sys_execveat(
        &mut self,
        mem: &mut dyn Memory,
        dirfd: u64,
        path: u64,
        argv: u64,
        envp: u64,
        flags: u64,
    ) -> SysResult {
        const AT_SYMLINK_NOFOLLOW: u64 = 0x100;
        const AT_EMPTY_PATH: u64 = 0x1000;
        if flags & !(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) != 0 {
            return Err(EINVAL.into());
        }
        let args = self.read_strings(mem, argv)?;
        let env = self.read_strings(mem, envp)?;
        let total: usize = args.iter().chain(&env).map(|s| s.len() + 1).sum();
        if total > ARG_MAX {
            return Err(E2BIG.into());
        }
        let target = self.resolve(mem, dirfd, path, flags, flags & AT_SYMLINK_NOFOLLOW == 0)?;
        // The path as given is `AT_EXECFN` and a script's argument; its last component is the
        // process's name, as on Linux (`/proc/self/exe` makes `exe`); `/proc/self/exe` names
        // the file it resolved to.
        let execfn = match &target {
            Target::Fd(fd) => format!("/dev/fd/{fd}"),
            Target::Path(_) => String::from_utf8_lossy(&self.process.mappings.read_cstr(mem, path, 4096)?).into_owned(),
        };
        let given = execfn.rsplit('/').next().unwrap_or_default().as_bytes().to_vec();
        let (id, exe) = match &target {
            Target::Fd(fd) => {
                let f = self.files.fds.get(*fd)?;
                let id = f.kind.inode().ok_or(EACCES)?;
                let path = match &f.kind {
                    crate::files::fd::FileKind::Inode { path, .. } => path.clone(),
                    _ => execfn.clone(),
                };
                (id, path)
            }
            Target::Path(w) => {
                let id = self.target_id(w)?;
                (id, self.walked_path(w, id))
            }
        };
        let bytes = self.executable(id)?;
        let (bytes, exe, args) = self.follow_interpreters(bytes, exe, execfn.clone(), args)?;
        let img = crate::mm::elf::parse(&bytes).map_err(|_| ENOEXEC)?;
        // The new program in a new address space; on failure the caller keeps its own.
        let old_space = mem.space();
        let image = Image { bytes: &bytes, img: &img, path: &exe, execfn: &execfn };
        let (new_space, mm, entry) = self.load_in_new_space(mem, &image, &args, &env)?;
        // The point of no return: the other threads end, the old space goes (or stays with the
        // parent a vfork child borrowed it from), handlers reset, close-on-exec fds close.
        let pid = self.procs.current;
        let me = self.sched.threads.current;
        let others: Vec<u64> =
            self.sched.threads.threads.iter().filter(|(&t, th)| th.pid == pid && t != me).map(|(&t, _)| t).collect();
        for t in others {
            self.sched.threads.threads.remove(&t);
            self.sched.threads.spawned.retain(|s| s.tid != t);
            self.sched.threads.wakeups.retain(|w| w.0 != t);
        }
        let old_mm = Mm::take(&mut self.process);
        if self.procs.space_used(old_space, pid) {
            self.procs.spaces.insert(old_space, old_mm);
        } else {
            mem.drop_space(old_space);
        }
        mm.put(&mut self.process);
        if let Some(p) = self.procs.table.get_mut(&pid) {
            p.space = new_space;
            p.exe = exe.clone();
            p.execed = true;
            p.cmdline = crate::task::procs::cmdline(&args);
        }
        if let Some(t) = self.sched.threads.threads.get_mut(&me) {
            t.space = new_space;
        }
        self.release_vfork(pid);
        for d in self.files.fds.close_many(false) {
            self.dropped(Some(d));
        }
        self.release_locks_of(None);
        for a in self.process.signals.actions.iter_mut() {
            if a[0] != SIG_IGN {
                *a = [0; 4];
            }
        }
        self.process.signals.altstack = crate::signal::DISABLED_ALTSTACK;
        self.process.fs_base = 0;
        self.process.gs_base = 0;
        self.process.clear_child_tid = 0;
        self.process.robust_list = (0, 0);
        self.process.last_fault = None;
        self.process.fault_repeats = 0;
        self.process.comm = [0; 16];
        let n = given.len().min(15);
        self.process.comm[..n].copy_from_slice(&given[..n]);
        self.process.mappings.share_file_data(&self.files.fs);
        self.files.fs.set_exe_path(&exe);
        self.procs.exec = Some(entry);
        Ok(0)
    }

    /// A NULL-terminated array of C strings (`argv`, `envp`); a NULL array is empty.
    fn read_strings(&self, mem: &mut dyn Memory, at: u64) -> Result<Vec<Vec<u8>>, i32> {
        let mut out = Vec::new();
        if at == 0 {
            return Ok(out);
        }
        let mut total = 0usize;
        for i in 0.. {
            let p = self.process.mappings.read_u64(mem, at.checked_add(i * 8).ok_or(EFAULT)?)?;
            if p == 0 {
                break;
            }
            let s = self.process.mappings.read_cstr(mem, p, 128 * 1024 + 1)?;
            total += s.len() + 1;
            if s.len() > 128 * 1024 || total > ARG_MAX {
                return Err(E2BIG);
            }
            out.push(s);
        }
        Ok(out)
    }

    /// After an `execve`: where the calling thread starts (see [`Kernel::take_exec`]).
    pub(crate) fn take_exec_entry(&mut self) -> Option<crate::Entry> {
        self.procs.exec.take()
    }

    /// Ends process `pid` with `status`: its threads and fds go, its children go to pid 1
    /// (with their `PR_SET_PDEATHSIG` signal), a parent waiting in `vfork` for it resumes, and
    /// its parent gets its exit signal, or reaps it at once if it ignores `SIGCHLD`. Its address
    /// space is freed once no process runs in it. Not for pid 1 (its end is the node's).
    pub(crate) fn end_process(&mut self, mem: &mut dyn Memory, pid: u64, status: ExitStatus) {
        let home = self.procs.current;
        if !self.procs.table.get(&pid).is_some_and(Proc::live) || pid == 1 {
            return;
        }
        self.enter(mem, pid);
        if self.procs.current != pid {
            return;
        }
        let tids: Vec<u64> = self.sched.threads.threads.iter().filter(|(_, t)| t.pid == pid).map(|(&t, _)| t).collect();
        for t in tids {
            self.sched.threads.threads.remove(&t);
            self.sched.threads.spawned.retain(|s| s.tid != t);
            self.sched.threads.wakeups.retain(|w| w.0 != t);
        }
        for d in self.files.fds.close_many(true) {
            self.dropped(Some(d));
        }
        self.release_locks_of(Some(pid));
        self.release_vfork(pid);
        let mut orphans = Vec::new();
        for (&c, p) in self.procs.table.iter_mut() {
            if p.ppid == pid {
                p.ppid = 1;
                if p.pdeathsig != 0 && p.live() {
                    orphans.push((c, p.pdeathsig));
                }
            }
        }
        let (ppid, exit_signal) = match self.procs.table.get_mut(&pid) {
            Some(p) => {
                p.status = Some(status.clone());
                // What `/proc/<pid>` keeps of a zombie: its name, not its argv.
                p.comm = self.process.comm;
                p.cmdline = Vec::new();
                (p.ppid, p.exit_signal)
            }
            None => return,
        };
        // Someone waiting in wait4 or waitid looks again.
        self.net.dirty = true;
        if home != pid {
            self.enter(mem, home);
        }
        if self.started_ended(pid, &status) {
            for (c, sig) in orphans {
                let _ = self.signal_process(mem, c, sig, Queued::sent(sig, SI_USER, 0, GUEST_UID as u32));
            }
            return;
        }
        // A parent that ignores SIGCHLD or set SA_NOCLDWAIT leaves no zombie; only one that
        // ignores it gets no signal either.
        let (ignores, nowait) = self.signals_of(ppid).map_or((false, false), |s| {
            let [handler, flags, ..] = s.actions[(SIGCHLD - 1) as usize];
            (handler == SIG_IGN, flags & SA_NOCLDWAIT != 0)
        });
        if ignores || nowait {
            self.procs.table.remove(&pid);
        }
        if exit_signal != 0 && !ignores {
            let _ = self.signal_process(mem, ppid, exit_signal, child_info(exit_signal, pid, &status));
        }
        for (c, sig) in orphans {
            let _ = self.signal_process(mem, c, sig, Queued::sent(sig, SI_USER, 0, GUEST_UID as u32));
        }
    }

    /// The signal state of live process `pid`.
    fn signals_of(&self, pid: u64) -> Option<&crate::signal::Signals> {
        if pid == self.procs.current {
            Some(&self.process.signals)
        } else {
            self.procs.table.get(&pid)?.parked.as_ref().map(|p| &p.signals)
        }
    }

    /// Sends `sig` to live process `pid` (any, not only the current one). A signal that kills
    /// the current process, or pid 1, is the caller's `Exit`; one that kills another process
    /// ends it here.
    pub(crate) fn signal_process(&mut self, mem: &mut dyn Memory, pid: u64, sig: i32, info: Queued) -> SysResult {
        self.signal_process_thread(mem, pid, None, sig, info)
    }

    /// [`Kernel::signal_process`] to thread `tid` of process `pid` alone when `Some`.
    pub(crate) fn signal_process_thread(
        &mut self,
        mem: &mut dyn Memory,
        pid: u64,
        tid: Option<u64>,
        sig: i32,
        info: Queued,
    ) -> SysResult {
        let home = self.procs.current;
        if !self.procs.table.get(&pid).is_some_and(Proc::live) {
            return Ok(0);
        }
        if pid != home {
            self.enter(mem, pid);
        }
        let r = self.send_signal_to(sig, tid, info);
        if pid != home {
            self.enter(mem, home);
        }
        match r {
            Err(SysStop::Exit(st)) if pid == home => Err(SysStop::Exit(st)),
            Err(SysStop::Exit(st)) if pid == 1 => {
                self.procs.init_killed = true;
                Err(SysStop::Exit(st))
            }
            Err(SysStop::Exit(st)) => {
                self.end_process(mem, pid, st);
                Ok(0)
            }
            r => r,
        }
    }

    /// `kill`: `sig` to process `pid`, to every process of the caller's group (0), of group
    /// `-pid`, or to every process but pid 1 (-1).
    pub(crate) fn sys_kill_process(&mut self, mem: &mut dyn Memory, pid: u64, sig: u64) -> SysResult {
        let sig = Self::signal_arg(sig)?;
        let me = self.procs.current;
        let pid = pid as i32;
        let group = self.procs.cur().map_or(0, |p| p.pgid);
        let targets: Vec<u64> = match pid {
            p if p > 0 => {
                if !self.procs.table.contains_key(&(p as u64)) {
                    return Err(ESRCH.into());
                }
                vec![p as u64]
            }
            0 => self.procs.table.iter().filter(|(_, p)| p.pgid == group).map(|(&p, _)| p).collect(),
            -1 => self.procs.table.keys().copied().filter(|&p| p != 1 || me == 1).collect(),
            p => {
                let g = u64::from(p.unsigned_abs());
                self.procs.table.iter().filter(|(_, q)| q.pgid == g).map(|(&p, _)| p).collect()
            }
        };
        if targets.is_empty() {
            return Err(ESRCH.into());
        }
        // The caller's own process last: a signal that ends it ends the call.
        let mut own = None;
        for t in targets {
            if t == me {
                own = Some(t);
                continue;
            }
            let info = Queued::sent(sig, SI_USER, me as u32, GUEST_UID as u32);
            self.signal_process(mem, t, sig, info)?;
        }
        if own.is_some() {
            let info = Queued::sent(sig, SI_USER, me as u32, GUEST_UID as u32);
            self.signal_process(mem, me, sig, info)?;
        }
        Ok(0)
    }

    /// `wait4`: reaps a child that ended (`pid` as [`crate::task::procs::Procs::children`] reads
    /// it), writing its status and an empty `rusage`; blocks until one does unless `WNOHANG`.
    pub(crate) fn sys_wait4(&mut self, mem: &mut dyn Memory, a: [u64; 6]) -> SysResult {
        let [pid, status, options, rusage, ..] = a;
        if options & !(WNOHANG | WAIT_IGNORED) != 0 {
            return Err(EINVAL.into());
        }
        match self.reap(pid as i32 as i64, options & WNOHANG != 0)? {
            Some((child, st)) => {
                if status != 0 {
                    self.process.mappings.copy_out(mem, status, &wait_status(&st).to_le_bytes())?;
                }
                if rusage != 0 {
                    self.process.mappings.copy_out(mem, rusage, &[0u8; 144])?;
                }
                self.procs.table.remove(&child);
                Ok(child)
            }
            None => Ok(0),
        }
    }

    /// `waitid`: as `wait4`, for `P_ALL` (0), `P_PID` (1) and `P_PGID` (2), with `WEXITED`
    /// required and `WNOWAIT` leaving the child to be reaped again.
    pub(crate) fn sys_waitid(&mut self, mem: &mut dyn Memory, a: [u64; 6]) -> SysResult {
        let [idtype, id, infop, options, rusage, _] = a;
        if options & !(WNOHANG | WEXITED | WNOWAIT | WAIT_IGNORED) != 0 || options & WEXITED == 0 {
            return Err(EINVAL.into());
        }
        let which = match idtype {
            0 => -1,
            1 if id as i32 > 0 => id as i32 as i64,
            2 if id as i32 > 0 => -(id as i32 as i64),
            2 if id as i32 == 0 => 0,
            _ => return Err(EINVAL.into()),
        };
        let found = self.reap(which, options & WNOHANG != 0)?;
        let mut info = [0u8; 128];
        if let Some((child, st)) = &found {
            let q = child_info(SIGCHLD, *child, st);
            info[..q.0.len()].copy_from_slice(&q.0);
        }
        if infop != 0 {
            self.process.mappings.copy_out(mem, infop, &info)?;
        }
        if rusage != 0 {
            self.process.mappings.copy_out(mem, rusage, &[0u8; 144])?;
        }
        if let (Some((child, _)), false) = (found, options & WNOWAIT != 0) {
            self.procs.table.remove(&child);
        }
        Ok(0)
    }

    /// The first child `which` selects that ended, with its status; `None` with `nohang` if
    /// none has yet; blocks otherwise. `ECHILD` if there is no such child.
    fn reap(&mut self, which: i64, nohang: bool) -> Result<Option<(u64, ExitStatus)>, SysStop> {
        let me = self.pid_of(self.caller());
        let children = self.procs.children(me, which);
        if children.is_empty() {
            return Err(ECHILD.into());
        }
        let ended = children.iter().find_map(|c| Some((*c, self.procs.table.get(c)?.status.clone()?)));
        match ended {
            Some(e) => Ok(Some(e)),
            None if nohang => Ok(None),
            None => self.block_io(None, Err(EINTR.into())).map(|_| None),
        }
    }

    /// A handler's answer for the current process: an `Exit` of a process other than pid 1
    /// (its `exit_group`, a fatal signal) ends that process alone, and its calling thread with
    /// it; pid 1's ends the node.
    pub(crate) fn process_exit(&mut self, mem: &mut dyn Memory, res: SysResult) -> SysResult {
        match res {
            Err(SysStop::Exit(st)) if self.procs.current != 1 && !core::mem::take(&mut self.procs.init_killed) => {
                let pid = self.procs.current;
                self.end_process(mem, pid, st);
                Err(SysStop::Block)
            }
            r => {
                self.procs.init_killed = false;
                r
            }
        }
    }

    /// The current process died of `st` outside a syscall (a fault, a signal taken on the way
    /// back to ring 3). Pid 1's death ends the node (`Err`); another process ends, and the
    /// scheduler picks the thread that runs next (the node may be left idle, or deadlocked:
    /// `Err`).
    pub(crate) fn current_died(&mut self, mem: &mut dyn Memory, st: ExitStatus) -> Result<(), ExitStatus> {
        if self.procs.current == 1 {
            self.process.exit = Some(st.clone());
            return Err(st);
        }
        let pid = self.procs.current;
        self.end_process(mem, pid, st);
        match self.pick_next(mem) {
            Ok(Some(t)) => {
                self.switch_to(mem, t);
                self.publish_clock(mem);
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(SysStop::Exit(st)) => {
                self.process.exit = Some(st.clone());
                Err(st)
            }
            Err(_) => Ok(()),
        }
    }

    /// `getpid`.
    pub(crate) fn sys_getpid(&self) -> SysResult {
        Ok(self.pid_of(self.caller()))
    }

    /// `getppid`: 0 for pid 1, whose parent is outside the node.
    pub(crate) fn sys_getppid(&self) -> SysResult {
        Ok(self.procs.table.get(&self.pid_of(self.caller())).map_or(0, |p| p.ppid))
    }

    /// The process `pid` names (0: the caller's), live or not yet reaped.
    fn proc_arg(&self, pid: u64) -> Result<(u64, &Proc), i32> {
        let pid = match pid as i32 {
            0 => self.pid_of(self.caller()),
            p if p > 0 => p as u64,
            _ => return Err(ESRCH),
        };
        self.procs.table.get(&pid).map(|p| (pid, p)).ok_or(ESRCH)
    }

    /// `getpgrp`.
    pub(crate) fn sys_getpgrp(&self) -> SysResult {
        Ok(self.proc_arg(0)?.1.pgid)
    }

    /// `getpgid`.
    pub(crate) fn sys_getpgid(&self, pid: u64) -> SysResult {
        Ok(self.proc_arg(pid)?.1.pgid)
    }

    /// `getsid`.
    pub(crate) fn sys_getsid(&self, pid: u64) -> SysResult {
        Ok(self.proc_arg(pid)?.1.sid)
    }

    /// `setpgid`: moves the caller or one of its children (in its session) to group `pgid` (0:
    /// its own pid), which must exist in the session unless it is the process's own pid.
    pub(crate) fn sys_setpgid(&mut self, pid: u64, pgid: u64) -> SysResult {
        if (pid as i32) < 0 {
            return Err(EINVAL.into());
        }
        let me = self.pid_of(self.caller());
        let (target, p) = self.proc_arg(pid)?;
        if target != me && p.ppid != me {
            return Err(ESRCH.into());
        }
        if target != me && p.execed {
            return Err(EACCES.into());
        }
        if pgid as i32 > 0 && pgid as i32 as u64 != pgid {
            return Err(EINVAL.into());
        }
        if (pgid as i32) < 0 {
            return Err(EINVAL.into());
        }
        let sid = self.procs.table.get(&me).map_or(0, |p| p.sid);
        if p.sid != sid || p.sid == target {
            return Err(EPERM.into());
        }
        let pgid = if pgid == 0 { target } else { pgid };
        if pgid != target && !self.procs.table.values().any(|q| q.pgid == pgid && q.sid == sid) {
            return Err(EPERM.into());
        }
        if let Some(p) = self.procs.table.get_mut(&target) {
            p.pgid = pgid;
        }
        Ok(0)
    }

    /// `setsid`: the caller leads a new session and group, unless it leads a group already.
    pub(crate) fn sys_setsid(&mut self) -> SysResult {
        let me = self.pid_of(self.caller());
        if self.procs.table.iter().any(|(_, p)| p.pgid == me) {
            return Err(EPERM.into());
        }
        if let Some(p) = self.procs.table.get_mut(&me) {
            p.pgid = me;
            p.sid = me;
        }
        Ok(me)
    }

    /// `prctl(PR_SET_PDEATHSIG)`.
    pub(crate) fn set_pdeathsig(&mut self, sig: u64) -> SysResult {
        if sig > 64 {
            return Err(EINVAL.into());
        }
        let me = self.pid_of(self.caller());
        if let Some(p) = self.procs.table.get_mut(&me) {
            p.pdeathsig = sig as i32;
        }
        Ok(0)
    }

    /// `prctl(PR_GET_PDEATHSIG)`.
    pub(crate) fn pdeathsig(&self) -> i32 {
        self.procs.table.get(&self.pid_of(self.caller())).map_or(0, |p| p.pdeathsig)
    }
}
