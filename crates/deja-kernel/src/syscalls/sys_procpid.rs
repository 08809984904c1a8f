//! `/proc/<pid>`: the files of each process's directory, generated from the process table
//! ([`crate::task::procs`], whose module docs describe each file) at every open and `readlink`.
//!
//! Owns nothing; reads the process table, the threads and the scheduler through the
//! [`Kernel`].

use crate::prelude::*;

use crate::abi::errno::ENOENT;
use crate::fs::ProcFile;
use crate::kernel::Kernel;
use crate::mm::mappings::Mappings;
use crate::task::process::Process;

/// What `/proc/<pid>` shows of the node's processes, computed from the process table at each
/// open and `readlink` (see [`crate::fs::Fs::walk_fds`] for the names).
impl Kernel {
    /// The program `/proc/<pid>/exe` leads to: `None` if there is no process `pid`, `Some(None)`
    /// for a zombie.
    pub(crate) fn proc_exe(&self, pid: u64) -> Option<Option<String>> {
        self.procs.table.get(&pid).map(|p| p.live().then(|| p.exe.clone()))
    }

    /// The live process `pid`'s [`Process`] (the kernel's for the current one, its parked
    /// parts for another); `None` for a zombie or no process.
    fn process_of(&self, pid: u64) -> Option<&Process> {
        if pid == self.procs.current {
            return Some(&self.process);
        }
        self.procs.table.get(&pid)?.parked.as_deref()
    }

    /// The VMAs of live process `pid`: the current ones for a process running in the current
    /// address space (the current process, a `vfork` child's parent), else its space's parked
    /// ones.
    fn mappings_of(&self, pid: u64) -> Option<&Mappings> {
        let p = self.procs.table.get(&pid).filter(|p| p.live())?;
        let cur_space = self.procs.cur().map(|c| c.space);
        if pid == self.procs.current || Some(p.space) == cur_space {
            return Some(&self.process.mappings);
        }
        self.procs.spaces.get(&p.space).map(|mm| &mm.mappings)
    }

    /// `/proc/<pid>/maps` now: its VMAs in Linux's format (empty for a zombie).
    pub(crate) fn proc_maps_of(&self, pid: u64) -> String {
        match (self.mappings_of(pid), self.procs.table.get(&pid)) {
            (Some(m), Some(p)) => m.maps(&p.exe),
            _ => String::new(),
        }
    }

    /// The generated file `what` of `/proc/<pid>` now (`ENOENT` when there is no process
    /// `pid`).
    pub(crate) fn proc_file(&self, pid: u64, what: ProcFile) -> Result<Vec<u8>, i32> {
        let p = self.procs.table.get(&pid).ok_or(ENOENT)?;
        let process = self.process_of(pid);
        let raw = process.map_or(&p.comm, |q| &q.comm);
        let comm = String::from_utf8_lossy(&raw[..raw.iter().position(|&b| b == 0).unwrap_or(raw.len())]).into_owned();
        let threads = self.sched.threads.threads.values().filter(|t| t.pid == pid).count();
        let state = match &p.status {
            Some(_) => ('Z', "zombie"),
            None if pid == self.procs.current => ('R', "running"),
            None if self
                .sched
                .threads
                .threads
                .values()
                .any(|t| t.pid == pid && matches!(t.state, crate::task::threads::ThreadState::Runnable)) =>
            {
                ('R', "running")
            }
            None => ('S', "sleeping"),
        };
        // Blocked, ignored and caught signals, bit `n - 1` for signal `n`.
        let (blocked, ignored, caught, pending) = process.map_or((0, 0, 0, 0), |q| {
            let (mut ign, mut cgt) = (0u64, 0u64);
            for (i, a) in q.signals.actions.iter().enumerate().take(64) {
                match a[0] {
                    0 => {}
                    crate::abi::signal::SIG_IGN => ign |= 1 << i,
                    _ => cgt |= 1 << i,
                }
            }
            (q.signals.mask, ign, cgt, q.signals.pending.set)
        });
        let text = match what {
            ProcFile::Cmdline => return Ok(if p.live() { p.cmdline.clone() } else { Vec::new() }),
            ProcFile::Comm => format!("{comm}\n"),
            ProcFile::Stat => {
                let vsize: u64 = self.mappings_of(pid).map_or(0, |m| m.iter().map(|v| v.end - v.start).sum());
                let brk = process.map_or(0, |q| q.brk_start);
                let exit_code = p.status.as_ref().map_or(0, crate::syscalls::sys_process::wait_status);
                let low = |v: u64| v & 0x7fff_ffff;
                // Fields 4 to 52 after `pid (comm) state`: ppid, pgrp, session, tty_nr, tpgid,
                // flags, 4 fault counts, 4 times, priority, nice, num_threads, itrealvalue,
                // starttime, vsize, rss, rsslim, startcode, endcode, startstack, kstkesp,
                // kstkeip, 4 signal sets, wchan, nswap, cnswap, exit_signal, processor,
                // rt_priority, policy, delayacct_blkio_ticks, guest_time, cguest_time,
                // start_data, end_data, start_brk, arg_start, arg_end, env_start, env_end,
                // exit_code.
                let fields: [i128; 49] = [
                    p.ppid.into(),
                    p.pgid.into(),
                    p.sid.into(),
                    0,
                    -1,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                    20,
                    0,
                    threads.max(1) as i128,
                    0,
                    0,
                    vsize.into(),
                    0,
                    u64::MAX.into(),
                    0,
                    0,
                    0,
                    0,
                    0,
                    low(pending).into(),
                    low(blocked).into(),
                    low(ignored).into(),
                    low(caught).into(),
                    0,
                    0,
                    0,
                    p.exit_signal.into(),
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                    brk.into(),
                    0,
                    0,
                    0,
                    0,
                    exit_code.into(),
                ];
                let mut line = format!("{pid} ({comm}) {}", state.0);
                for f in fields {
                    line.push_str(&format!(" {f}"));
                }
                line.push('\n');
                line
            }
            ProcFile::Status => {
                let uid = crate::mm::stack::GUEST_UID;
                let name = comm.replace('\\', "\\\\").replace('\n', "\\n");
                let umask = process.map_or(0o022, |q| q.umask);
                let cpus = self.process.cpus;
                let mut t = String::new();
                t.push_str(&format!("Name:\t{name}\nUmask:\t{umask:04o}\nState:\t{} ({})\n", state.0, state.1));
                t.push_str(&format!("Tgid:\t{pid}\nNgid:\t0\nPid:\t{pid}\nPPid:\t{}\nTracerPid:\t0\n", p.ppid));
                t.push_str(&format!("Uid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{uid}\t{uid}\t{uid}\t{uid}\n"));
                let fd_size = if p.live() { 64 } else { 0 };
                t.push_str(&format!("FDSize:\t{fd_size}\nGroups:\t\nNStgid:\t{pid}\nNSpid:\t{pid}\n"));
                t.push_str(&format!("NSpgid:\t{}\nNSsid:\t{}\nThreads:\t{}\n", p.pgid, p.sid, threads.max(1)));
                t.push_str(&format!("SigPnd:\t{:016x}\nShdPnd:\t{pending:016x}\n", 0));
                t.push_str(&format!("SigBlk:\t{blocked:016x}\nSigIgn:\t{ignored:016x}\nSigCgt:\t{caught:016x}\n"));
                for cap in ["CapInh", "CapPrm", "CapEff"] {
                    t.push_str(&format!("{cap}:\t{:016x}\n", 0));
                }
                t.push_str("CapBnd:\t000001ffffffffff\nCapAmb:\t0000000000000000\n");
                t.push_str("NoNewPrivs:\t0\nSeccomp:\t0\n");
                t.push_str(&format!("Cpus_allowed:\t{}\n", cpu_mask(cpus)));
                t.push_str(&format!("Cpus_allowed_list:\t{}", crate::host::cpuid::cpu_list(cpus)));
                t.push_str("voluntary_ctxt_switches:\t0\nnonvoluntary_ctxt_switches:\t0\n");
                t
            }
        };
        Ok(text.into_bytes())
    }
}

/// The mask of CPUs `0..cpus` as Linux prints a CPU bitmap: hexadecimal in groups of 32 bits
/// separated by commas, the first group as wide as its bits need.
fn cpu_mask(cpus: u32) -> String {
    let cpus = cpus.max(1);
    let groups = cpus.div_ceil(32);
    let first_bits = cpus - 32 * (groups - 1);
    let mut out = format!("{:0w$x}", (1u64 << first_bits) - 1, w = first_bits.div_ceil(4) as usize);
    for _ in 1..groups {
        out.push_str(",ffffffff");
    }
    out
}
