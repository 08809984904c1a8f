//! The processes of a node: who is whose parent, their groups and sessions, which address
//! space each runs in, the parts of the processes that are not running, and the children that
//! ended and wait to be reaped.
//!
//! # Model
//!
//! A node runs one process at first (pid 1, its program); `fork`, `vfork` and `clone` without
//! `CLONE_THREAD` add more. Every process is a set of threads of the one thread table
//! ([`crate::task::threads`]): a process's pid is the tid of its first thread, and which runnable
//! thread of which process runs next is the scheduler's one decision, as for threads. The
//! kernel holds the running process's parts where a lone program keeps them
//! ([`Process`] in `Kernel::process`, its fds current in the fd table, its working directory
//! in `Files::cwd`); the others wait here, and a switch moves them ([`Procs::current`]).
//!
//! An address space ([`crate::Memory::space`]) may belong to several processes (a `vfork`
//! child runs in its parent's until it calls `execve`): what describes it, the [`Mm`] (VMAs,
//! program break, rewritten code, vDSO, coverage counters), travels with whichever of them
//! runs, and waits in [`Procs::spaces`] while none does.
//!
//! A process that ends becomes a zombie (its status kept, everything else released) until its
//! parent reaps it with `wait4` or `waitid`; its children go to pid 1. The node's run ends
//! when pid 1 ends, as a container's does, and a crash of the node ends every process.
//!
//! # `/proc/<pid>`
//!
//! Every process of the table, live or zombie, has its directory `/proc/<pid>`, and
//! `/proc/self` is a link to the caller's pid (see [`crate::fs::Fs::walk_fds`]). Its files are
//! generated from the table when they are opened (`sys_procpid.rs`): `cmdline` (the argv
//! of the process's last `execve`, or of the first program; empty for a zombie), `comm` (its
//! name), `stat` (Linux's 52 fields: state `R` for the current process and one with a runnable
//! thread, `S` for one whose threads all wait, `Z` for a zombie; ppid, group, session, thread
//! count, exit signal, signal sets, the size of its address space, the start of its heap and a
//! zombie's wait status; zeros for times, faults and the rest), `status` (Linux's layout from
//! `Name` to the context switch counts), `maps` (its own VMAs: the current ones, or those its
//! address space keeps while another runs; none for a zombie) and `exe` (a link to its program;
//! none for a zombie). A pid not in the table does not exist (`ENOENT`). `fd` is the current
//! process's fd table; another process's may be named but not opened or searched (`EACCES`).
//!
//! [`Procs`] is a saved part of the kernel state (see [`persist`](crate::persist)); its
//! fields are its encoding, in declaration order.

use crate::prelude::*;
use alloc::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::host::coverage::CoverageRegion;
use crate::host::hostchan::{HostChannels, Rewrite};
use crate::mm::mappings::Mappings;
use crate::persist::{ensure, Persist, RestoreError};
use crate::task::process::Process;
use crate::{Entry, ExitStatus};

/// Most processes (live and zombie) of a node; `fork` beyond it is `EAGAIN`.
pub const MAX_PROCESSES: usize = 512;

/// Most bytes of a process's recorded argv (twice what `execve` and the loader let through).
const MAX_CMDLINE: usize = 4 << 20;

/// `argv` as `/proc/<pid>/cmdline` holds it: each argument followed by a NUL.
pub(crate) fn cmdline<S: AsRef<[u8]>>(argv: &[S]) -> Vec<u8> {
    argv.iter().flat_map(|a| a.as_ref().iter().copied().chain([0])).collect()
}

/// What describes one address space: its VMAs and commit accounting, the program break, where
/// the image started, its coverage counters, its rewritten code and its vDSO.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Mm {
    pub(crate) mappings: Mappings,
    pub(crate) brk_start: u64,
    pub(crate) brk_cur: u64,
    pub(crate) exec_stack: bool,
    pub(crate) entry: Entry,
    pub(crate) coverage: Option<CoverageRegion>,
    pub(crate) host: HostChannels,
    pub(crate) vdso: Option<crate::time::vdso::VdsoState>,
}

impl Mm {
    /// Takes the address space's parts out of `p`, leaving empty ones.
    pub(crate) fn take(p: &mut Process) -> Mm {
        Mm {
            mappings: core::mem::take(&mut p.mappings),
            brk_start: p.brk_start,
            brk_cur: p.brk_cur,
            exec_stack: p.exec_stack,
            entry: p.entry,
            coverage: p.coverage.take(),
            host: core::mem::replace(&mut p.host, HostChannels::new(Rewrite::Off)),
            vdso: p.vdso.take(),
        }
    }

    /// Puts the address space's parts into `p`.
    pub(crate) fn put(self, p: &mut Process) {
        p.mappings = self.mappings;
        p.brk_start = self.brk_start;
        p.brk_cur = self.brk_cur;
        p.exec_stack = self.exec_stack;
        p.entry = self.entry;
        p.coverage = self.coverage;
        p.host = self.host;
        p.vdso = self.vdso;
    }
}

/// One process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Proc {
    /// The parent (0 for pid 1: outside the node).
    pub(crate) ppid: u64,
    /// Its process group.
    pub(crate) pgid: u64,
    /// Its session.
    pub(crate) sid: u64,
    /// The address space it runs in.
    pub(crate) space: u64,
    /// Its parts while another process runs (`None` for the current process and zombies).
    pub(crate) parked: Option<Box<Process>>,
    /// Its working directory's inode while another process runs.
    pub(crate) cwd: u64,
    /// The signal its parent gets when it ends (`SIGCHLD`; 0: none).
    pub(crate) exit_signal: i32,
    /// The parent's thread waiting in `vfork` until this process calls `execve` or ends.
    pub(crate) vfork_parent: Option<u64>,
    /// `PR_SET_PDEATHSIG`: the signal it gets when its parent ends (0: none).
    pub(crate) pdeathsig: i32,
    /// The path of the program it runs (`/proc/self/exe`, `AT_EXECFN`).
    pub(crate) exe: String,
    /// How it ended, once it has: a zombie until reaped.
    #[serde(with = "crate::persist::exit_status")]
    pub(crate) status: Option<ExitStatus>,
    /// It called `execve` (its parent may no longer move it to another group).
    pub(crate) execed: bool,
    /// Its argv, each argument followed by a NUL (`/proc/<pid>/cmdline`): the first program's
    /// at boot, the new one's at each `execve`, its parent's after a `fork`; emptied when it
    /// ends.
    #[serde(with = "crate::persist::vec_bytes")]
    pub(crate) cmdline: Vec<u8>,
    /// Its name when it ended (a zombie's `comm`, NUL-padded); zeros while it runs, when its
    /// name is its [`Process`]'s.
    pub(crate) comm: [u8; 16],
}

impl Proc {
    /// True until the process ends.
    pub(crate) fn live(&self) -> bool {
        self.status.is_none()
    }
}

/// The process table (saved with the kernel).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Procs {
    /// Every process, live or zombie, by pid.
    pub(crate) table: BTreeMap<u64, Proc>,
    /// The process whose parts the kernel holds.
    pub(crate) current: u64,
    /// The parts of the address spaces no current process runs in, by space.
    pub(crate) spaces: BTreeMap<u64, Mm>,
    /// Spaces no process uses any more, to free once they are not current.
    pub(crate) dead_spaces: Vec<u64>,
    /// Where the calling thread starts after an `execve` it just made, until the shell takes it.
    pub(crate) exec: Option<Entry>,
    /// A signal another process sent ended pid 1, and with it the node (for the one call that
    /// sent it).
    #[serde(skip)]
    pub(crate) init_killed: bool,
    /// The processes deja started ([`Kernel::start_process`](crate::Kernel::start_process)),
    /// until they are reaped.
    pub(crate) started: alloc::collections::BTreeSet<u64>,
    /// Started processes that ended and that the driver has not heard of: (pid, status as a
    /// shell's `$?`).
    pub(crate) started_ended: Vec<(u64, i32)>,
    /// What the sessions of started processes that capture their output wrote to stdout and
    /// stderr, by the session's (the started process's) pid, until the driver takes it. Not
    /// saved: a driver that captures (`deja at --exec`) neither forks nor snapshots the run,
    /// and the saved format stays the one older snapshots have.
    #[serde(skip)]
    pub(crate) captured: BTreeMap<u64, Vec<u8>>,
}

impl Procs {
    /// The table of a node that runs its first program, `exe` with `argv`, in address space
    /// `space`.
    pub(crate) fn first(space: u64, exe: &str, argv: &[String]) -> Procs {
        let init = Proc {
            ppid: 0,
            pgid: 1,
            sid: 1,
            space,
            parked: None,
            cwd: crate::fs::ROOT,
            exit_signal: crate::abi::signal::SIGCHLD,
            vfork_parent: None,
            pdeathsig: 0,
            exe: exe.to_string(),
            status: None,
            execed: false,
            cmdline: cmdline(argv),
            comm: [0; 16],
        };
        Procs { table: BTreeMap::from([(1, init)]), current: 1, ..Procs::default() }
    }

    /// The current process.
    pub(crate) fn cur(&self) -> Option<&Proc> {
        self.table.get(&self.current)
    }

    /// True if a live process other than `except` runs in `space`.
    pub(crate) fn space_used(&self, space: u64, except: u64) -> bool {
        self.table.iter().any(|(&pid, p)| pid != except && p.live() && p.space == space)
    }

    /// The children of `pid` that `which` selects (`wait4`'s pid argument: > 0 that pid, -1
    /// any, 0 the caller's group, < -1 that group), in pid order.
    pub(crate) fn children(&self, pid: u64, which: i64) -> Vec<u64> {
        let group = self.table.get(&pid).map_or(0, |p| p.pgid);
        self.table
            .iter()
            .filter(|(&c, p)| {
                p.ppid == pid
                    && match which {
                        w if w > 0 => c == w as u64,
                        -1 => true,
                        0 => p.pgid == group,
                        w => p.pgid == w.unsigned_abs(),
                    }
            })
            .map(|(&c, _)| c)
            .collect()
    }
}

impl Persist for Procs {
    /// Nothing: the checks need no other part.
    type Context = ();

    /// Checks the invariants of a restored table: the current process is live and holds no
    /// parked parts, every other live process has them, parents exist (or are 0 for pid 1),
    /// groups, a parked address space belongs to a live process that is not current, and the
    /// table's bound.
    fn validate(&self, _: &()) -> Result<(), RestoreError> {
        ensure(self.table.len() <= MAX_PROCESSES, || format!("{} processes", self.table.len()))?;
        let cur = self.table.get(&self.current);
        ensure(cur.is_some(), || format!("current process {} does not exist", self.current))?;
        for (&pid, p) in &self.table {
            ensure(pid >= 1, || "pid 0".to_string())?;
            if pid == self.current {
                ensure(p.parked.is_none(), || format!("current process {pid} is parked"))?;
            } else {
                ensure(p.live() == p.parked.is_some(), || format!("process {pid} is live without its parts"))?;
            }
            ensure(p.cmdline.len() <= MAX_CMDLINE, || {
                format!("process {pid} has an argv of {} bytes", p.cmdline.len())
            })?;
            ensure(p.ppid == 0 || self.table.contains_key(&p.ppid) || !p.live(), || {
                format!("process {pid} has no parent {}", p.ppid)
            })?;
            if let Some(q) = &p.parked {
                q.validate(&())?;
            }
        }
        let cur_space = cur.map_or(0, |p| p.space);
        for s in self.spaces.keys() {
            ensure(*s != cur_space, || format!("the current space {s} is parked"))?;
            ensure(self.table.values().any(|p| p.live() && p.space == *s), || format!("space {s} has no process"))?;
        }
        for s in self.spaces.values() {
            s.mappings.validate()?;
        }
        Ok(())
    }
}

/// Checks the process table against the threads and the fd tables: every thread belongs to a
/// live process, every live process has a thread, and the fds of exactly the live processes
/// that are not current are parked.
pub(crate) fn check_against(
    procs: &Procs,
    sched: &crate::task::sched::Sched,
    files: &crate::files::Files,
) -> Result<(), RestoreError> {
    for (tid, t) in &sched.threads.threads {
        let ok = procs.table.get(&t.pid).is_some_and(|p| p.live() && p.space == t.space);
        ensure(ok, || format!("thread {tid} of process {} that does not run", t.pid))?;
    }
    for (&pid, p) in &procs.table {
        if p.live() {
            let n = sched.threads.threads.values().filter(|t| t.pid == pid).count();
            ensure(n > 0, || format!("process {pid} has no thread"))?;
        }
    }
    let parked: Vec<u64> = files.fds.parked_pids().collect();
    let want: Vec<u64> = procs.table.iter().filter(|(&p, q)| p != procs.current && q.live()).map(|(&p, _)| p).collect();
    ensure(parked == want, || format!("fd tables of {parked:?} for processes {want:?}"))
}
