//! Processes deja starts in a node from outside, as `docker exec` starts one in a container:
//! a cluster's test template runs its commands this way (see `deja-cluster`'s `template`).
//!
//! A started process is a new process of the node with no parent in it (ppid 0, like pid 1),
//! in its own session and group, in the node's working directory (pid 1's), with stdin empty
//! and stdout and stderr the node's. Its program is loaded as `execve` loads one (a `#!`
//! line runs its interpreter), with the environment given. Nobody in the node reaps it: when
//! it ends its pid and status wait in [`Procs::started_ended`]
//! for the driver ([`Kernel::take_started_ended`]); the node stops after the syscall that ended
//! it ([`Kernel::yield_due`]), so the driver hears of it at that moment of virtual time.

use crate::prelude::*;

use crate::abi::errno::*;
use crate::kernel::{Image, Kernel};
use crate::task::procs::{Mm, Proc, MAX_PROCESSES};
use crate::task::threads::{SpawnedThread, Thread};
use crate::{ExitStatus, Memory};

/// How a started process ended, as a shell's `$?` says it: its exit code, or 128 plus the
/// signal that ended it.
pub(crate) fn shell_status(st: &ExitStatus) -> i32 {
    match st {
        ExitStatus::Exited { code } => *code & 0xff,
        ExitStatus::Signaled { signal, .. } => 128 + *signal,
    }
}

impl Kernel {
    /// Starts `path` (an absolute path in the node) as a new process with argv `[path]` and
    /// `env`; its pid. It runs once the node runs again. Errors are errnos, as `execve` would
    /// give them (`ENOENT`, `EACCES`, `ENOEXEC`, `ENOMEM`, `EAGAIN` at the process limit).
    pub fn start_process(&mut self, mem: &mut dyn Memory, path: &str, env: &[Vec<u8>]) -> Result<u64, i32> {
        self.start_command(mem, &[path.as_bytes().to_vec()], env, false)
    }

    /// Starts `argv[0]` (an absolute path in the node) with `argv` and `env`, as
    /// [`Kernel::start_process`]; with `capture`, what its session writes to stdout and stderr
    /// is kept for [`Kernel::take_captured`] instead of going to the node's output.
    pub fn start_command(
        &mut self,
        mem: &mut dyn Memory,
        argv: &[Vec<u8>],
        env: &[Vec<u8>],
        capture: bool,
    ) -> Result<u64, i32> {
        let Some(path) = argv.first().and_then(|p| core::str::from_utf8(p).ok()) else { return Err(EINVAL) };
        if !path.starts_with('/') {
            return Err(EINVAL);
        }
        if self.procs.table.len() >= MAX_PROCESSES {
            return Err(EAGAIN);
        }
        let w = self.files.fs.walk_checked(crate::fs::ROOT, path.as_bytes(), true)?;
        let id = self.target_id(&w)?;
        let exe = self.walked_path(&w, id);
        let bytes = self.executable(id)?;
        let args = argv.to_vec();
        let (bytes, exe, args) = self.follow_interpreters(bytes, exe, path.to_string(), args)?;
        let img = crate::mm::elf::parse(&bytes).map_err(|_| ENOEXEC)?;
        let tid = self.sched.threads.alloc_tid().ok_or(EAGAIN)?;
        let home = mem.space();
        let image = Image { bytes: &bytes, img: &img, path: &exe, execfn: path };
        let (space, mm, entry) = self.load_in_new_space(mem, &image, &args, env)?;
        mem.switch_space(home);
        // Its process: the node's limits and umask, everything else as a new program's.
        let mut child = self.process.clone();
        let _ = Mm::take(&mut child);
        mm.put(&mut child);
        child.exit = None;
        child.fs_base = 0;
        child.gs_base = 0;
        child.signals = Default::default();
        child.clear_child_tid = 0;
        child.robust_list = (0, 0);
        child.last_fault = None;
        child.fault_repeats = 0;
        child.itimer_real = None;
        child.mappings.share_file_data(&self.files.fs);
        let name = path.rsplit('/').next().unwrap_or_default().as_bytes();
        child.comm = [0; 16];
        let n = name.len().min(15);
        child.comm[..n].copy_from_slice(&name[..n]);
        let cwd = if self.procs.current == 1 {
            self.files.cwd
        } else {
            self.procs.table.get(&1).map_or(crate::fs::ROOT, |p| p.cwd)
        };
        self.procs.table.insert(
            tid,
            Proc {
                ppid: 0,
                pgid: tid,
                sid: tid,
                space,
                parked: Some(Box::new(child)),
                cwd,
                exit_signal: 0,
                vfork_parent: None,
                pdeathsig: 0,
                exe,
                status: None,
                execed: true,
                cmdline: crate::task::procs::cmdline(&args),
                comm: [0; 16],
            },
        );
        self.procs.started.insert(tid);
        if capture {
            self.procs.captured.insert(tid, Vec::new());
        }
        self.files.fds.fresh_for(tid);
        let t = Thread::new_program(tid, space);
        self.sched.threads.threads.insert(tid, t);
        self.sched.threads.spawned.push(SpawnedThread { tid, stack: 0, tls: None, entry: Some(entry) });
        Ok(tid)
    }

    /// Ends a process deja started (SIGKILL, as `docker kill` of an exec'd process): it is
    /// then in [`Kernel::take_started_ended`]. Nothing for a pid that is not a live started
    /// process. Its thread may have been the current one: the caller [`Kernel::resume`]s the
    /// node before it runs again, which picks the next.
    pub fn kill_started(&mut self, mem: &mut dyn Memory, pid: u64) {
        if !self.procs.started.contains(&pid) || !self.procs.table.get(&pid).is_some_and(Proc::live) {
            return;
        }
        let status = ExitStatus::Signaled { signal: 9, name: "SIGKILL".into(), fault: None };
        self.end_process(mem, pid, status);
    }

    /// True when a process deja started has ended since the last [`Kernel::take_started_ended`]
    /// (one that captures its output is left to [`Kernel::take_started_end`]).
    pub fn started_have_ended(&self) -> bool {
        self.procs.started_ended.iter().any(|(p, _)| !self.procs.captured.contains_key(p))
    }

    /// How started process `pid` ended (as a shell's `$?`), once it has: taken, and the
    /// process reaped (see [`Kernel::take_started_ended`]).
    pub fn take_started_end(&mut self, pid: u64) -> Option<i32> {
        let k = self.procs.started_ended.iter().position(|(p, _)| *p == pid)?;
        let (_, status) = self.procs.started_ended.remove(k);
        if pid != self.procs.current && !self.procs.table.get(&pid).is_some_and(Proc::live) {
            self.procs.started.remove(&pid);
            self.procs.table.remove(&pid);
        }
        Some(status)
    }

    /// The processes deja started that ended since the last call: (pid, status as a shell's
    /// `$?` gives it), in the order they ended.
    /// Reaps them (a zombie whose parts the kernel still holds, because nothing ran since it
    /// ended, is reaped at a later call).
    /// Processes started to capture their output are left to [`Kernel::take_started_end`].
    pub fn take_started_ended(&mut self) -> Vec<(u64, i32)> {
        let cur = self.procs.current;
        let captured = &self.procs.captured;
        let done: Vec<u64> = self
            .procs
            .started
            .iter()
            .copied()
            .filter(|p| *p != cur && !captured.contains_key(p) && self.procs.table.get(p).is_none_or(|q| !q.live()))
            .collect();
        for p in done {
            self.procs.started.remove(&p);
            self.procs.table.remove(&p);
        }
        let (theirs, ours): (Vec<_>, Vec<_>) =
            core::mem::take(&mut self.procs.started_ended).into_iter().partition(|(p, _)| captured.contains_key(p));
        self.procs.started_ended = theirs;
        ours
    }

    /// Called by [`Kernel::end_process`]: true for a started process, whose status waits for
    /// the driver (nobody in the node reaps it).
    pub(crate) fn started_ended(&mut self, pid: u64, status: &ExitStatus) -> bool {
        if !self.procs.started.contains(&pid) {
            return false;
        }
        self.procs.started_ended.push((pid, shell_status(status)));
        true
    }
}

impl Kernel {
    /// The entries of directory `path` that a process could be started from: (name, true if it
    /// is a regular file, or a link to one, that its owner may execute), by name, without `.`
    /// and `..`.
    pub fn list_dir(&self, path: &str) -> Result<Vec<(String, bool)>, i32> {
        let w = self.files.fs.walk_checked(crate::fs::ROOT, path.as_bytes(), true)?;
        let id = self.target_id(&w)?;
        if !self.files.fs.get(id).is_some_and(|i| i.is_dir()) {
            return Err(ENOTDIR);
        }
        let mut out = Vec::new();
        for (name, _, _) in self.files.fs.list(id) {
            if name == "." || name == ".." {
                continue;
            }
            let full = format!("{}/{name}", path.trim_end_matches('/'));
            let runs =
                self.files.fs.walk_checked(crate::fs::ROOT, full.as_bytes(), true).ok().and_then(|w| w.id).is_some_and(
                    |c| self.files.fs.get(c).is_some_and(|i| !i.is_dir()) && self.files.fs.stat(c).mode & 0o100 != 0,
                );
            out.push((name, runs));
        }
        Ok(out)
    }
}
