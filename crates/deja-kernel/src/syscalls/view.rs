//! A node's kernel seen from outside at one moment, for `deja at`: its processes with their
//! threads and open files, the durable image of its file system, and what its programs wrote
//! while a driver captured it. Reading changes nothing: a run looked at goes on as it would.

use crate::prelude::*;

use super::sys_procfd::link_text;
use crate::kernel::Kernel;
use crate::task::threads::ThreadState;
use crate::Disk;
use serde::{Deserialize, Serialize};

/// One process of a node at a moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessView {
    /// Its pid.
    pub pid: u64,
    /// Its parent's (0: none in the node).
    pub ppid: u64,
    /// Its command line, arguments separated by spaces.
    pub cmdline: String,
    /// It has ended and nobody reaped it yet.
    pub zombie: bool,
    /// Its threads.
    pub threads: Vec<ThreadView>,
    /// Its open fds, in ascending order, with what each has open as `/proc/<pid>/fd` says it.
    pub fds: Vec<(i32, String)>,
}

/// One thread at a moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadView {
    /// Its tid.
    pub tid: u64,
    /// What it is doing: `runnable`, or the call it waits in (`futex`, `sleep until T ns`,
    /// `vfork`, or the blocked I/O syscall by name).
    pub state: String,
}

/// What a thread in `state` is doing, in words.
fn state_words(state: &ThreadState) -> String {
    match state {
        ThreadState::Runnable => "runnable".into(),
        ThreadState::Futex { uaddr, deadline, .. } => match deadline {
            Some(d) => format!("futex wait on {uaddr:#x} until {d} ns"),
            None => format!("futex wait on {uaddr:#x}"),
        },
        ThreadState::Sleep { deadline, .. } => format!("sleep until {deadline} ns"),
        ThreadState::Vfork { child } => format!("vfork, until process {child} runs a program or ends"),
        ThreadState::Io { nr, args, deadline } => {
            let name = crate::syscalls::name(*nr).map_or_else(|| format!("syscall {nr}"), String::from);
            let call = format!("{name}({}, …)", args[0] as i64);
            match deadline {
                Some(d) => format!("blocked in {call} until {d} ns"),
                None => format!("blocked in {call}"),
            }
        }
    }
}

impl Kernel {
    /// Every process of the node, by pid, with its threads and open fds.
    pub fn processes_view(&self) -> Vec<ProcessView> {
        let current = self.procs.current;
        self.procs
            .table
            .iter()
            .map(|(&pid, p)| {
                let threads = self
                    .sched
                    .threads
                    .threads
                    .iter()
                    .filter(|(_, t)| t.pid == pid)
                    .map(|(&tid, t)| ThreadView { tid, state: state_words(&t.state) })
                    .collect();
                let fds = self
                    .files
                    .fds
                    .open_of((pid != current).then_some(pid))
                    .into_iter()
                    .map(|(fd, f)| (fd, link_text(&self.files.fs, &f.kind)))
                    .collect();
                let argv: Vec<String> = p
                    .cmdline
                    .split(|b| *b == 0)
                    .filter(|a| !a.is_empty())
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect();
                ProcessView { pid, ppid: p.ppid, cmdline: argv.join(" "), zombie: !p.live(), threads, fds }
            })
            .collect()
    }

    /// The file system as a crash now would leave it if it kept none of the pending
    /// operations: what is durable.
    pub fn durable_disk(&self) -> Disk {
        self.files.fs.durable_disk()
    }

    /// What the processes of the session of started process `pid` wrote to stdout and stderr
    /// since it was started with `capture` (see [`Kernel::start_command`]), taken.
    /// Once the process has ended and been taken ([`Kernel::take_started_ended`]), the capture
    /// ends with this call.
    pub fn take_captured(&mut self, pid: u64) -> Vec<u8> {
        if self.procs.started.contains(&pid) {
            self.procs.captured.get_mut(&pid).map(core::mem::take).unwrap_or_default()
        } else {
            self.procs.captured.remove(&pid).unwrap_or_default()
        }
    }
}
