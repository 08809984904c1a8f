//! The handler layer: how a syscall or an exception is served, above the kernel and every state
//! room. Owns no state of its own.
//!
//! - `serve.rs`: [`Kernel::syscall`] and [`Kernel::exception`]: the clock, the faults, the
//!   trace, and the table below.
//! - this file: the syscall table; `render.rs`: a traced syscall written the way strace would.
//! - the handlers, `Kernel::sys_*` methods over the kernel's parts, one module per kind:
//!   `sys_path.rs` (paths, opening, metadata), `sys_procfd.rs` (what `/proc/self/fd` answers),
//!   `sys_io.rs` (reading and writing fds), `sys_fs/` (durable writes, syncs, the namespace,
//!   locks, crash points), `sys_mem.rs`, `sys_net/` (sockets, pipes, FIFOs, eventfd, epoll,
//!   poll, splice, netlink), `sys_proc.rs` (identity, limits, time), `sys_signal.rs` (signals,
//!   handlers, `rt_sigreturn`), `sys_procpid.rs` (the files of `/proc/<pid>`), `sys_timer.rs`
//!   (the interval timer), `sys_sched.rs` (threads, futexes, sleeps, the scheduler),
//!   `sys_process.rs` (`fork`, `execve`, `wait4`, `kill`, groups, the switch between processes'
//!   parts) and `sys_deja.rs` (deja's own `0xde1a`).
//!
//! Uses [`crate::kernel`] and the state rooms through it; nothing else uses this room but the
//! crate root's re-exports. The one way back up stays inside it: the scheduler in
//! `sys_sched.rs` serves a blocked call again through `serve.rs`.
//!
//! [`Kernel::syscall`]: crate::Kernel::syscall
//! [`Kernel::exception`]: crate::Kernel::exception
//!
//! # The table
//!
//! The x86-64 Linux syscall table: for every number its name, the kinds of its arguments and the
//! handler that serves it, in one declarative table ordered by number ([`TABLE`]).
//!
//! The whole Linux table is here (not only what deja serves) so that an unsupported syscall is
//! reported by its name in [`RunReport::unsupported`](crate::RunReport::unsupported). A row
//! without a handler, and a number without a row (named `unknown_<nr>`), is answered `-ENOSYS`
//! and counted as unsupported.
//!
//! A row is `NUMBER "name" [ARG, ...] => |kernel, memory, args| handler;`: the handler is a
//! `Kernel::sys_*` method in the `sys_*` module of its kind, called with the raw arguments
//! (RDI, RSI, RDX, R10, R8, R9) it takes. Syscalls that are another form of one call (`open` of
//! `openat`, `pipe` of `pipe2`) pass the fixed arguments of that form here. A row without a
//! handler is just `NUMBER "name";`. To serve a syscall, write its handler and give its row the
//! argument kinds and the handler.
//!
//! The argument kinds serve the hostile-guest generator (`fuzz/`) and the trace: [`render`]
//! writes one recorded syscall the way strace would, each argument shown by its kind, with the
//! path bytes [`read_paths`] took from the program's memory at the syscall's entry:
//! `openat(AT_FDCWD, "/data/wal", 0x241, 0o644) = 3`.

use crate::kernel::{Kernel, SysResult, AT_FDCWD, AT_SYMLINK_NOFOLLOW};
use crate::prelude::*;
use crate::Memory;
use sys_fs::AT_REMOVEDIR;

pub(crate) mod program;
mod render;
pub(crate) mod serve;
pub(crate) mod started;
pub(crate) mod sys_deja;
pub(crate) mod sys_fs;
pub(crate) mod sys_io;
pub(crate) mod sys_mem;
pub(crate) mod sys_net;
pub(crate) mod sys_path;
pub(crate) mod sys_proc;
pub(crate) mod sys_process;
pub(crate) mod sys_procfd;
pub(crate) mod sys_procpid;
pub(crate) mod sys_sched;
pub(crate) mod sys_signal;
pub(crate) mod sys_timer;
pub(crate) mod view;

pub(crate) use render::read_paths;
pub use render::{render, TRACE_PATH_MAX};

/// The name of deja's own syscall in counts and traces.
pub const DEJA_NAME: &str = "deja";

/// What one argument of a syscall is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arg {
    /// A file descriptor (or `AT_FDCWD` for the `*at` family).
    Fd,
    /// The address of a NUL-terminated path.
    Path,
    /// The address of memory the call reads or writes.
    Ptr,
    /// A length in bytes or a count of elements.
    Len,
    /// A set of flag bits.
    Flags,
    /// File permission bits (`0o644`): a mode of `open`, `mkdir` or `chmod`, or a umask.
    Mode,
    /// Any other number: an offset, an id, a command, a timeout, an access mask.
    Int,
}

/// A handler: the kernel, the program's memory and the six raw arguments.
pub(crate) type Handler = fn(&mut Kernel, &mut dyn Memory, [u64; 6]) -> SysResult;

/// One row of the table.
#[derive(Clone, Copy)]
pub struct Entry {
    /// The number (RAX).
    pub nr: u64,
    /// Linux's name for it.
    pub name: &'static str,
    /// The kinds of its arguments, for the syscalls deja serves (`None` for the others).
    pub args: Option<&'static [Arg]>,
    /// What serves it; `None`: `-ENOSYS`, counted as unsupported.
    pub(crate) handler: Option<Handler>,
}

impl Entry {
    /// Whether deja serves this syscall (`rseq` is served: its answer is `-ENOSYS` on purpose).
    pub fn served(&self) -> bool {
        self.handler.is_some()
    }
}

impl core::fmt::Debug for Entry {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Entry")
            .field("nr", &self.nr)
            .field("name", &self.name)
            .field("args", &self.args)
            .field("served", &self.served())
            .finish()
    }
}

/// A row's handler (a closure in the table becomes a [`Handler`] here).
const fn served(handler: Handler) -> Option<Handler> {
    Some(handler)
}

/// Builds [`TABLE`] from rows `NUMBER "name" [ARG, ...] => HANDLER;` or `NUMBER "name";`.
macro_rules! syscall_table {
    (@args) => { None };
    (@args [$($arg:ident),*]) => { Some(&[$(Arg::$arg),*]) };
    (@handler) => { None };
    (@handler $handler:expr) => { served($handler) };
    ($($nr:literal $name:literal $([$($arg:ident),*])? $(=> $handler:expr)?;)*) => {
        /// Every syscall deja knows by name, ordered by number: Linux's x86-64 table
        /// (0..=335 and 424..=462) and deja's own ([`deja_protocol::DEJA_SYSCALL`]).
        pub static TABLE: &[Entry] = &[$(Entry {
            nr: $nr,
            name: $name,
            args: syscall_table!(@args $([$($arg),*])?),
            handler: syscall_table!(@handler $($handler)?),
        }),*];
    };
}

syscall_table! {
    0      "read"              [Fd, Ptr, Len] => |k, m, a| k.sys_read(m, a[0], a[1], a[2]);
    1      "write"             [Fd, Ptr, Len] => |k, m, a| k.sys_write(m, a[0], a[1], a[2]);
    2      "open"              [Path, Flags, Mode] => |k, m, a| k.sys_openat(m, AT_FDCWD, a[0], a[1], a[2]);
    3      "close"             [Fd] => |k, _, a| k.sys_close(a[0]);
    4      "stat"              [Path, Ptr] => |k, m, a| k.sys_fstatat(m, AT_FDCWD, a[0], a[1], 0);
    5      "fstat"             [Fd, Ptr] => |k, m, a| k.sys_fstat(m, a[0], a[1]);
    6      "lstat"             [Path, Ptr] => |k, m, a| k.sys_fstatat(m, AT_FDCWD, a[0], a[1], AT_SYMLINK_NOFOLLOW);
    7      "poll"              [Ptr, Len, Int] => |k, m, a| k.sys_poll(m, a[0], a[1], a[2]);
    8      "lseek"             [Fd, Int, Int] => |k, _, a| k.sys_lseek(a[0], a[1], a[2]);
    9      "mmap"              [Ptr, Len, Flags, Flags, Fd, Int] => |k, m, a| k.sys_mmap(m, a);
    10     "mprotect"          [Ptr, Len, Flags] => |k, m, a| k.sys_mprotect(m, a[0], a[1], a[2]);
    11     "munmap"            [Ptr, Len] => |k, m, a| k.sys_munmap(m, a[0], a[1]);
    12     "brk"               [Ptr] => |k, m, a| k.sys_brk(m, a[0]);
    13     "rt_sigaction"      [Int, Ptr, Ptr, Len] => |k, m, a| k.sys_rt_sigaction(m, a[0], a[1], a[2], a[3]);
    14     "rt_sigprocmask"    [Int, Ptr, Ptr, Len] => |k, m, a| k.sys_rt_sigprocmask(m, a[0], a[1], a[2], a[3]);
    15     "rt_sigreturn"      [] => |k, m, _| k.sys_rt_sigreturn(m);
    16     "ioctl"             [Fd, Int, Ptr] => |k, m, a| k.sys_ioctl(m, a[0], a[1], a[2]);
    17     "pread64"           [Fd, Ptr, Len, Int] => |k, m, a| k.sys_pread(m, a[0], a[1], a[2], a[3]);
    18     "pwrite64"          [Fd, Ptr, Len, Int] => |k, m, a| k.sys_pwrite(m, a[0], a[1], a[2], a[3]);
    19     "readv"             [Fd, Ptr, Len] => |k, m, a| k.sys_readv(m, a[0], a[1], a[2]);
    20     "writev"            [Fd, Ptr, Len] => |k, m, a| k.sys_writev(m, a[0], a[1], a[2]);
    21     "access"            [Path, Int] => |k, m, a| k.sys_faccessat(m, AT_FDCWD, a[0], a[1], 0);
    22     "pipe"              [Ptr] => |k, m, a| k.sys_pipe2(m, a[0], 0);
    23     "select"            [Int, Ptr, Ptr, Ptr, Ptr] => |k, m, a| k.sys_select(m, a);
    24     "sched_yield"       [] => |k, _, _| k.sys_sched_yield();
    25     "mremap"            [Ptr, Len, Len, Flags, Ptr] => |k, m, a| k.sys_mremap(m, a);
    26     "msync"             [Ptr, Len, Flags] => |k, _, a| k.sys_msync(a[0], a[1], a[2]);
    27     "mincore"           [Ptr, Len, Ptr] => |k, m, a| k.sys_mincore(m, a[0], a[1], a[2]);
    28     "madvise"           [Ptr, Len, Int] => |k, m, a| k.sys_madvise(m, a[0], a[1], a[2]);
    29     "shmget";
    30     "shmat";
    31     "shmctl";
    32     "dup"               [Fd] => |k, _, a| k.sys_dup(a[0]);
    33     "dup2"              [Fd, Fd] => |k, _, a| k.sys_dup2(a[0], a[1]);
    34     "pause"             [] => |k, _, _| k.sys_pause();
    35     "nanosleep"         [Ptr, Ptr] => |k, m, a| k.sys_nanosleep(m, a[0], a[1]);
    36     "getitimer"         [Int, Ptr] => |k, m, a| k.sys_getitimer(m, a[0], a[1]);
    37     "alarm"             [Int] => |k, _, a| k.sys_alarm(a[0]);
    38     "setitimer"         [Int, Ptr, Ptr] => |k, m, a| k.sys_setitimer(m, a[0], a[1], a[2]);
    39     "getpid"            [] => |k, _, _| k.sys_getpid();
    40     "sendfile"          [Fd, Fd, Ptr, Len] => |k, m, a| k.sys_sendfile(m, a[0], a[1], a[2], a[3]);
    41     "socket"            [Int, Flags, Int] => |k, _, a| k.sys_socket(a[0], a[1], a[2]);
    42     "connect"           [Fd, Ptr, Len] => |k, m, a| k.sys_connect(m, a[0], a[1], a[2]);
    43     "accept"            [Fd, Ptr, Ptr] => |k, m, a| k.sys_accept4(m, a[0], a[1], a[2], 0);
    44     "sendto"            [Fd, Ptr, Len, Flags, Ptr, Len] => |k, m, a| k.sys_sendto(m, a);
    45     "recvfrom"          [Fd, Ptr, Len, Flags, Ptr, Ptr] => |k, m, a| k.sys_recvfrom(m, a);
    46     "sendmsg"           [Fd, Ptr, Flags] => |k, m, a| k.sys_sendmsg(m, a[0], a[1], a[2]);
    47     "recvmsg"           [Fd, Ptr, Flags] => |k, m, a| k.sys_recvmsg(m, a[0], a[1], a[2]);
    48     "shutdown"          [Fd, Int] => |k, _, a| k.sys_shutdown(a[0], a[1]);
    49     "bind"              [Fd, Ptr, Len] => |k, m, a| k.sys_bind(m, a[0], a[1], a[2]);
    50     "listen"            [Fd, Int] => |k, _, a| k.sys_listen(a[0], a[1]);
    51     "getsockname"       [Fd, Ptr, Ptr] => |k, m, a| k.sys_getsockname(m, a[0], a[1], a[2], false);
    52     "getpeername"       [Fd, Ptr, Ptr] => |k, m, a| k.sys_getsockname(m, a[0], a[1], a[2], true);
    53     "socketpair"        [Int, Int, Int, Ptr] => |k, m, a| k.sys_socketpair(m, a[0], a[1], a[2], a[3]);
    54     "setsockopt"        [Fd, Int, Int, Ptr, Len] => |k, m, a| k.sys_setsockopt(m, a[0], a[1], a[2], a[3], a[4]);
    55     "getsockopt"        [Fd, Int, Int, Ptr, Ptr] => |k, m, a| k.sys_getsockopt(m, a[0], a[1], a[2], a[3], a[4]);
    56     "clone"             [Flags, Ptr, Ptr, Ptr, Ptr] => |k, m, a| k.sys_clone(m, a);
    57     "fork"              [] => |k, m, _| k.sys_fork(m);
    58     "vfork"             [] => |k, m, _| k.sys_vfork(m);
    59     "execve"            [Path, Ptr, Ptr] => |k, m, a| k.sys_execve(m, a[0], a[1], a[2]);
    60     "exit"              [Int] => |k, m, a| k.sys_exit_thread(m, a[0]);
    61     "wait4"             [Int, Ptr, Flags, Ptr] => |k, m, a| k.sys_wait4(m, a);
    62     "kill"              [Int, Int] => |k, m, a| k.sys_kill_process(m, a[0], a[1]);
    63     "uname"             [Ptr] => |k, m, a| k.sys_uname(m, a[0]);
    64     "semget";
    65     "semop";
    66     "semctl";
    67     "shmdt";
    68     "msgget";
    69     "msgsnd";
    70     "msgrcv";
    71     "msgctl";
    72     "fcntl"             [Fd, Int, Int] => |k, m, a| k.sys_fcntl(m, a[0], a[1], a[2]);
    73     "flock"             [Fd, Int] => |k, _, a| k.sys_flock(a[0], a[1]);
    74     "fsync"             [Fd] => |k, _, a| k.sys_fsync(a[0], false);
    75     "fdatasync"         [Fd] => |k, _, a| k.sys_fsync(a[0], true);
    76     "truncate"          [Path, Int] => |k, m, a| k.sys_truncate(m, a[0], a[1]);
    77     "ftruncate"         [Fd, Int] => |k, _, a| k.sys_ftruncate(a[0], a[1]);
    78     "getdents";
    79     "getcwd"            [Ptr, Len] => |k, m, a| k.sys_getcwd(m, a[0], a[1]);
    80     "chdir"             [Path] => |k, m, a| k.sys_chdir(m, a[0]);
    81     "fchdir"            [Fd] => |k, _, a| k.sys_fchdir(a[0]);
    82     "rename"            [Path, Path] => |k, m, a| k.sys_renameat2(m, AT_FDCWD, a[0], AT_FDCWD, a[1], 0);
    83     "mkdir"             [Path, Mode] => |k, m, a| k.sys_mkdirat(m, AT_FDCWD, a[0], a[1]);
    84     "rmdir"             [Path] => |k, m, a| k.sys_unlinkat(m, AT_FDCWD, a[0], AT_REMOVEDIR);
    85     "creat"             [Path, Mode] => |k, m, a| k.sys_creat(m, a[0], a[1]);
    86     "link"              [Path, Path] => |k, m, a| k.sys_linkat(m, AT_FDCWD, a[0], AT_FDCWD, a[1], 0);
    87     "unlink"            [Path] => |k, m, a| k.sys_unlinkat(m, AT_FDCWD, a[0], 0);
    88     "symlink"           [Path, Path] => |k, m, a| k.sys_symlinkat(m, a[0], AT_FDCWD, a[1]);
    89     "readlink"          [Path, Ptr, Len] => |k, m, a| k.sys_readlinkat(m, AT_FDCWD, a[0], a[1], a[2]);
    90     "chmod"             [Path, Mode] => |k, m, a| k.sys_fchmodat(m, AT_FDCWD, a[0], a[1]);
    91     "fchmod"            [Fd, Mode] => |k, _, a| k.sys_fchmod(a[0], a[1]);
    92     "chown"             [Path, Int, Int] => |k, m, a| k.sys_fchownat(m, AT_FDCWD, a[0], (a[1], a[2]), 0);
    93     "fchown"            [Fd, Int, Int] => |k, _, a| k.sys_fchown(a[0], a[1], a[2]);
    94     "lchown"            [Path, Int, Int] => |k, m, a| k.sys_fchownat(m, AT_FDCWD, a[0], (a[1], a[2]), 0x100);
    95     "umask"             [Mode] => |k, _, a| k.sys_umask(a[0]);
    96     "gettimeofday"      [Ptr, Ptr] => |k, m, a| k.sys_gettimeofday(m, a[0], a[1]);
    97     "getrlimit"         [Int, Ptr] => |k, m, a| k.sys_prlimit(m, 0, a[0], 0, a[1]);
    98     "getrusage"         [Int, Ptr] => |k, m, a| k.sys_getrusage(m, a[0], a[1]);
    99     "sysinfo"           [Ptr] => |k, m, a| k.sys_sysinfo(m, a[0]);
    100    "times"             [Ptr] => |k, m, a| k.sys_times(m, a[0]);
    101    "ptrace";
    102    "getuid"            [] => |k, _, _| k.sys_getuid();
    103    "syslog";
    104    "getgid"            [] => |k, _, _| k.sys_getuid();
    105    "setuid"            [Int] => |k, _, a| k.sys_setuid(a[0]);
    106    "setgid"            [Int] => |k, _, a| k.sys_setuid(a[0]);
    107    "geteuid"           [] => |k, _, _| k.sys_getuid();
    108    "getegid"           [] => |k, _, _| k.sys_getuid();
    109    "setpgid"           [Int, Int] => |k, _, a| k.sys_setpgid(a[0], a[1]);
    110    "getppid"           [] => |k, _, _| k.sys_getppid();
    111    "getpgrp"           [] => |k, _, _| k.sys_getpgrp();
    112    "setsid"            [] => |k, _, _| k.sys_setsid();
    113    "setreuid"          [Int, Int] => |k, _, a| k.sys_set_ids(&a[..2]);
    114    "setregid"          [Int, Int] => |k, _, a| k.sys_set_ids(&a[..2]);
    115    "getgroups"         [Int, Ptr] => |k, _, _| k.sys_getgroups();
    116    "setgroups"         [Len, Ptr] => |k, _, _| k.sys_setgroups();
    117    "setresuid"         [Int, Int, Int] => |k, _, a| k.sys_set_ids(&a[..3]);
    118    "getresuid"         [Ptr, Ptr, Ptr] => |k, m, a| k.sys_getresuid(m, a[0], a[1], a[2]);
    119    "setresgid"         [Int, Int, Int] => |k, _, a| k.sys_set_ids(&a[..3]);
    120    "getresgid"         [Ptr, Ptr, Ptr] => |k, m, a| k.sys_getresuid(m, a[0], a[1], a[2]);
    121    "getpgid"           [Int] => |k, _, a| k.sys_getpgid(a[0]);
    122    "setfsuid"          [Int] => |k, _, _| k.sys_setfsid();
    123    "setfsgid"          [Int] => |k, _, _| k.sys_setfsid();
    124    "getsid"            [Int] => |k, _, a| k.sys_getsid(a[0]);
    125    "capget"            [Ptr, Ptr] => |k, m, a| k.sys_capget(m, a[0], a[1]);
    126    "capset"            [Ptr, Ptr] => |k, m, a| k.sys_capset(m, a[0], a[1]);
    127    "rt_sigpending"     [Ptr, Len] => |k, m, a| k.sys_rt_sigpending(m, a[0], a[1]);
    128    "rt_sigtimedwait"   [Ptr, Ptr, Ptr, Len] => |k, m, a| k.sys_rt_sigtimedwait(m, a);
    129    "rt_sigqueueinfo"   [Int, Int, Ptr] => |k, m, a| k.sys_rt_sigqueueinfo(m, a[0], a[1], a[2]);
    130    "rt_sigsuspend"     [Ptr, Len] => |k, m, a| k.sys_rt_sigsuspend(m, a[0], a[1]);
    131    "sigaltstack"       [Ptr, Ptr] => |k, m, a| k.sys_sigaltstack(m, a[0], a[1]);
    132    "utime";
    133    "mknod"             [Path, Mode, Int] => |k, m, a| k.sys_mknodat(m, AT_FDCWD, a[0], a[1], a[2]);
    134    "uselib";
    135    "personality";
    136    "ustat";
    137    "statfs"            [Path, Ptr] => |k, m, a| k.sys_statfs(m, a[0], a[1]);
    138    "fstatfs"           [Fd, Ptr] => |k, m, a| k.sys_fstatfs(m, a[0], a[1]);
    139    "sysfs";
    140    "getpriority";
    141    "setpriority";
    142    "sched_setparam";
    143    "sched_getparam";
    144    "sched_setscheduler";
    145    "sched_getscheduler";
    146    "sched_get_priority_max";
    147    "sched_get_priority_min";
    148    "sched_rr_get_interval";
    149    "mlock"             [Ptr, Len] => |k, _, _| k.sys_mlock();
    150    "munlock"           [Ptr, Len] => |k, _, _| k.sys_mlock();
    151    "mlockall"          [Flags] => |k, _, _| k.sys_mlock();
    152    "munlockall"        [] => |k, _, _| k.sys_mlock();
    153    "vhangup";
    154    "modify_ldt";
    155    "pivot_root";
    156    "_sysctl";
    157    "prctl"             [Int, Int, Int, Int, Int] => |k, m, a| k.sys_prctl(m, a);
    158    "arch_prctl"        [Int, Ptr] => |k, m, a| k.sys_arch_prctl(m, a[0], a[1]);
    159    "adjtimex";
    160    "setrlimit"         [Int, Ptr] => |k, m, a| k.sys_prlimit(m, 0, a[0], a[1], 0);
    161    "chroot";
    162    "sync"              [] => |k, _, _| k.sys_sync();
    163    "acct";
    164    "settimeofday";
    165    "mount";
    166    "umount2";
    167    "swapon";
    168    "swapoff";
    169    "reboot";
    170    "sethostname";
    171    "setdomainname";
    172    "iopl";
    173    "ioperm";
    174    "create_module";
    175    "init_module";
    176    "delete_module";
    177    "get_kernel_syms";
    178    "query_module";
    179    "quotactl";
    180    "nfsservctl";
    181    "getpmsg";
    182    "putpmsg";
    183    "afs_syscall";
    184    "tuxcall";
    185    "security";
    186    "gettid"            [] => |k, _, _| k.sys_gettid();
    187    "readahead";
    188    "setxattr"          [Path, Ptr, Ptr, Len, Flags] => |k, m, a| k.sys_xattr(m, 2, Some(a[0]), 0, false);
    189    "lsetxattr"         [Path, Ptr, Ptr, Len, Flags] => |k, m, a| k.sys_xattr(m, 2, Some(a[0]), 0, true);
    190    "fsetxattr"         [Fd, Ptr, Ptr, Len, Flags] => |k, m, a| k.sys_xattr(m, 2, None, a[0], false);
    191    "getxattr"          [Path, Ptr, Ptr, Len] => |k, m, a| k.sys_xattr(m, 0, Some(a[0]), 0, false);
    192    "lgetxattr"         [Path, Ptr, Ptr, Len] => |k, m, a| k.sys_xattr(m, 0, Some(a[0]), 0, true);
    193    "fgetxattr"         [Fd, Ptr, Ptr, Len] => |k, m, a| k.sys_xattr(m, 0, None, a[0], false);
    194    "listxattr"         [Path, Ptr, Len] => |k, m, a| k.sys_xattr(m, 1, Some(a[0]), 0, false);
    195    "llistxattr"        [Path, Ptr, Len] => |k, m, a| k.sys_xattr(m, 1, Some(a[0]), 0, true);
    196    "flistxattr"        [Fd, Ptr, Len] => |k, m, a| k.sys_xattr(m, 1, None, a[0], false);
    197    "removexattr"       [Path, Ptr] => |k, m, a| k.sys_xattr(m, 3, Some(a[0]), 0, false);
    198    "lremovexattr"      [Path, Ptr] => |k, m, a| k.sys_xattr(m, 3, Some(a[0]), 0, true);
    199    "fremovexattr"      [Fd, Ptr] => |k, m, a| k.sys_xattr(m, 3, None, a[0], false);
    200    "tkill"             [Int, Int] => |k, m, a| k.sys_tkill(m, a[0], a[1]);
    201    "time"              [Ptr] => |k, m, a| k.sys_time(m, a[0]);
    202    "futex"             [Ptr, Int, Int, Ptr, Ptr, Int] => |k, m, a| k.sys_futex(m, a);
    203    "sched_setaffinity" [Int, Len, Ptr] => |k, m, a| k.sys_sched_setaffinity(m, a[0], a[1], a[2]);
    204    "sched_getaffinity" [Int, Len, Ptr] => |k, m, a| k.sys_sched_getaffinity(m, a[0], a[1], a[2]);
    205    "set_thread_area";
    206    "io_setup";
    207    "io_destroy";
    208    "io_getevents";
    209    "io_submit";
    210    "io_cancel";
    211    "get_thread_area";
    212    "lookup_dcookie";
    213    "epoll_create"      [Int] => |k, _, a| k.sys_epoll_create(a[0]);
    214    "epoll_ctl_old";
    215    "epoll_wait_old";
    216    "remap_file_pages";
    217    "getdents64"        [Fd, Ptr, Len] => |k, m, a| k.sys_getdents64(m, a[0], a[1], a[2]);
    218    "set_tid_address"   [Ptr] => |k, _, a| k.sys_set_tid_address(a[0]);
    219    "restart_syscall";
    220    "semtimedop";
    221    "fadvise64"         [Fd, Int, Len, Int] => |k, _, a| k.sys_fadvise64(a[0]);
    222    "timer_create";
    223    "timer_settime";
    224    "timer_gettime";
    225    "timer_getoverrun";
    226    "timer_delete";
    227    "clock_settime";
    228    "clock_gettime"     [Int, Ptr] => |k, m, a| k.sys_clock_gettime(m, a[0], a[1]);
    229    "clock_getres"      [Int, Ptr] => |k, m, a| k.sys_clock_getres(m, a[0], a[1]);
    230    "clock_nanosleep"   [Int, Flags, Ptr, Ptr] => |k, m, a| k.sys_clock_nanosleep(m, a[0], a[1], a[2], a[3]);
    231    "exit_group"        [Int] => |k, _, a| k.sys_exit_group(a[0]);
    232    "epoll_wait"        [Fd, Ptr, Int, Int]
           => |k, m, a| k.sys_epoll_wait(m, a[0], a[1], a[2], Kernel::ms_timeout(a[3]));
    233    "epoll_ctl"         [Fd, Int, Fd, Ptr] => |k, m, a| k.sys_epoll_ctl(m, a[0], a[1], a[2], a[3]);
    234    "tgkill"            [Int, Int, Int] => |k, m, a| k.sys_tgkill(m, a[0], a[1], a[2]);
    235    "utimes";
    236    "vserver";
    237    "mbind";
    238    "set_mempolicy";
    239    "get_mempolicy";
    240    "mq_open";
    241    "mq_unlink";
    242    "mq_timedsend";
    243    "mq_timedreceive";
    244    "mq_notify";
    245    "mq_getsetattr";
    246    "kexec_load";
    247    "waitid"            [Int, Int, Ptr, Flags, Ptr] => |k, m, a| k.sys_waitid(m, a);
    248    "add_key";
    249    "request_key";
    250    "keyctl";
    251    "ioprio_set";
    252    "ioprio_get";
    253    "inotify_init";
    254    "inotify_add_watch";
    255    "inotify_rm_watch";
    256    "migrate_pages";
    257    "openat"            [Fd, Path, Flags, Mode] => |k, m, a| k.sys_openat(m, a[0], a[1], a[2], a[3]);
    258    "mkdirat"           [Fd, Path, Mode] => |k, m, a| k.sys_mkdirat(m, a[0], a[1], a[2]);
    259    "mknodat"           [Fd, Path, Mode, Int] => |k, m, a| k.sys_mknodat(m, a[0], a[1], a[2], a[3]);
    260    "fchownat"          [Fd, Path, Int, Int, Flags] => |k, m, a| k.sys_fchownat(m, a[0], a[1], (a[2], a[3]), a[4]);
    261    "futimesat";
    262    "newfstatat"        [Fd, Path, Ptr, Flags] => |k, m, a| k.sys_fstatat(m, a[0], a[1], a[2], a[3]);
    263    "unlinkat"          [Fd, Path, Flags] => |k, m, a| k.sys_unlinkat(m, a[0], a[1], a[2]);
    264    "renameat"          [Fd, Path, Fd, Path] => |k, m, a| k.sys_renameat2(m, a[0], a[1], a[2], a[3], 0);
    265    "linkat"            [Fd, Path, Fd, Path, Flags] => |k, m, a| k.sys_linkat(m, a[0], a[1], a[2], a[3], a[4]);
    266    "symlinkat"         [Path, Fd, Path] => |k, m, a| k.sys_symlinkat(m, a[0], a[1], a[2]);
    267    "readlinkat"        [Fd, Path, Ptr, Len] => |k, m, a| k.sys_readlinkat(m, a[0], a[1], a[2], a[3]);
    268    "fchmodat"          [Fd, Path, Mode] => |k, m, a| k.sys_fchmodat(m, a[0], a[1], a[2]);
    269    "faccessat"         [Fd, Path, Int] => |k, m, a| k.sys_faccessat(m, a[0], a[1], a[2], 0);
    270    "pselect6"          [Int, Ptr, Ptr, Ptr, Ptr, Ptr] => |k, m, a| k.sys_pselect6(m, a);
    271    "ppoll"             [Ptr, Len, Ptr, Ptr, Len] => |k, m, a| k.sys_ppoll(m, a[0], a[1], a[2], a[3], a[4]);
    272    "unshare";
    273    "set_robust_list"   [Ptr, Len] => |k, _, a| k.sys_set_robust_list(a[0], a[1]);
    274    "get_robust_list";
    275    "splice"            [Fd, Ptr, Fd, Ptr, Len, Flags] => |k, m, a| k.sys_splice(m, a);
    276    "tee"               [Fd, Fd, Len, Flags] => |k, _, a| k.sys_tee([a[0], a[1], a[2], a[3]]);
    277    "sync_file_range"   [Fd, Int, Len, Flags] => |k, _, a| k.sys_sync_file_range(a[0], a[1], a[2], a[3]);
    278    "vmsplice"          [Fd, Ptr, Len, Flags] => |k, m, a| k.sys_vmsplice(m, [a[0], a[1], a[2], a[3]]);
    279    "move_pages";
    280    "utimensat"         [Fd, Path, Ptr, Flags] => |k, m, a| k.sys_utimensat(m, a[0], a[1], a[2], a[3]);
    281    "epoll_pwait"       [Fd, Ptr, Int, Int, Ptr, Len] => |k, m, a| k.sys_epoll_pwait(m, a);
    282    "signalfd";
    283    "timerfd_create";
    284    "eventfd"           [Int] => |k, _, a| k.sys_eventfd2(a[0], 0);
    285    "fallocate"         [Fd, Flags, Int, Len] => |k, _, a| k.sys_fallocate(a[0], a[1], a[2], a[3]);
    286    "timerfd_settime";
    287    "timerfd_gettime";
    288    "accept4"           [Fd, Ptr, Ptr, Flags] => |k, m, a| k.sys_accept4(m, a[0], a[1], a[2], a[3]);
    289    "signalfd4";
    290    "eventfd2"          [Int, Flags] => |k, _, a| k.sys_eventfd2(a[0], a[1]);
    291    "epoll_create1"     [Flags] => |k, _, a| k.sys_epoll_create1(a[0]);
    292    "dup3"              [Fd, Fd, Flags] => |k, _, a| k.sys_dup3(a[0], a[1], a[2]);
    293    "pipe2"             [Ptr, Flags] => |k, m, a| k.sys_pipe2(m, a[0], a[1]);
    294    "inotify_init1";
    295    "preadv";
    296    "pwritev";
    297    "rt_tgsigqueueinfo" [Int, Int, Int, Ptr] => |k, m, a| k.sys_rt_tgsigqueueinfo(m, a);
    298    "perf_event_open";
    299    "recvmmsg";
    300    "fanotify_init";
    301    "fanotify_mark";
    302    "prlimit64"         [Int, Int, Ptr, Ptr] => |k, m, a| k.sys_prlimit(m, a[0], a[1], a[2], a[3]);
    303    "name_to_handle_at";
    304    "open_by_handle_at";
    305    "clock_adjtime";
    306    "syncfs"            [Fd] => |k, _, a| k.sys_syncfs(a[0]);
    307    "sendmmsg";
    308    "setns";
    309    "getcpu"            [Ptr, Ptr, Ptr] => |k, m, a| k.sys_getcpu(m, a[0], a[1]);
    310    "process_vm_readv";
    311    "process_vm_writev";
    312    "kcmp";
    313    "finit_module";
    314    "sched_setattr";
    315    "sched_getattr";
    316    "renameat2"         [Fd, Path, Fd, Path, Flags]
           => |k, m, a| k.sys_renameat2(m, a[0], a[1], a[2], a[3], a[4]);
    317    "seccomp";
    318    "getrandom"         [Ptr, Len, Flags] => |k, m, a| k.sys_getrandom(m, a[0], a[1], a[2]);
    319    "memfd_create";
    320    "kexec_file_load";
    321    "bpf";
    322    "execveat"          [Fd, Path, Ptr, Ptr, Flags] => |k, m, a| k.sys_execveat(m, a[0], a[1], a[2], a[3], a[4]);
    323    "userfaultfd";
    324    "membarrier"        [Int, Flags, Int] => |k, _, a| k.sys_membarrier(a[0], a[1]);
    325    "mlock2"            [Ptr, Len, Flags] => |k, _, _| k.sys_mlock();
    326    "copy_file_range"   [Fd, Ptr, Fd, Ptr, Len, Flags] => |k, m, a| k.sys_copy_file_range(m, a);
    327    "preadv2";
    328    "pwritev2";
    329    "pkey_mprotect";
    330    "pkey_alloc";
    331    "pkey_free";
    332    "statx"             [Fd, Path, Flags, Flags, Ptr] => |k, m, a| k.sys_statx(m, a[0], a[1], a[2], a[3], a[4]);
    333    "io_pgetevents";
    334    "rseq"              [Ptr, Len, Flags, Int] => |k, _, _| k.sys_rseq();
    335    "uretprobe";
    424    "pidfd_send_signal";
    425    "io_uring_setup";
    426    "io_uring_enter";
    427    "io_uring_register";
    428    "open_tree";
    429    "move_mount";
    430    "fsopen";
    431    "fsconfig";
    432    "fsmount";
    433    "fspick";
    434    "pidfd_open";
    435    "clone3"            [Ptr, Len] => |k, m, a| k.sys_clone3(m, a[0], a[1]);
    436    "close_range"       [Fd, Fd, Flags] => |k, _, a| k.sys_close_range(a[0], a[1], a[2]);
    437    "openat2";
    438    "pidfd_getfd";
    439    "faccessat2"        [Fd, Path, Int, Flags] => |k, m, a| k.sys_faccessat(m, a[0], a[1], a[2], a[3]);
    440    "process_madvise";
    441    "epoll_pwait2"      [Fd, Ptr, Int, Ptr, Ptr, Len] => |k, m, a| k.sys_epoll_pwait2(m, a);
    442    "mount_setattr";
    443    "quotactl_fd";
    444    "landlock_create_ruleset";
    445    "landlock_add_rule";
    446    "landlock_restrict_self";
    447    "memfd_secret";
    448    "process_mrelease";
    449    "futex_waitv";
    450    "set_mempolicy_home_node";
    451    "cachestat";
    452    "fchmodat2";
    453    "map_shadow_stack";
    454    "futex_wake";
    455    "futex_wait";
    456    "futex_requeue";
    457    "statmount";
    458    "listmount";
    459    "lsm_get_self_attr";
    460    "lsm_set_self_attr";
    461    "lsm_list_modules";
    462    "mseal";
    0xde1a "deja"              [Int, Int, Int, Int, Int, Int] => |k, m, a| k.sys_deja(m, a);
}

/// The row of syscall `nr`, if it has one.
pub fn entry(nr: u64) -> Option<&'static Entry> {
    // The table holds the numbers from 0 without a gap as far as Linux's run, so the row of a
    // common syscall is at its number; the search finds the rest (deja's own).
    match usize::try_from(nr).ok().and_then(|i| TABLE.get(i)) {
        Some(e) if e.nr == nr => Some(e),
        _ => TABLE.binary_search_by_key(&nr, |e| e.nr).ok().map(|i| &TABLE[i]),
    }
}

/// The name of syscall `nr`, if it is in the x86-64 table (or is deja's own syscall,
/// [`deja_protocol::DEJA_SYSCALL`], named `deja`).
pub fn name(nr: u64) -> Option<&'static str> {
    entry(nr).map(|e| e.name)
}

/// The name of syscall `nr`, or `unknown_<nr>`.
pub fn display_name(nr: u64) -> String {
    match name(nr) {
        Some(n) => n.to_string(),
        None => format!("unknown_{nr}"),
    }
}

/// The number of the syscall called `name`.
pub fn number(name: &str) -> Option<u64> {
    TABLE.iter().find(|e| e.name == name).map(|e| e.nr)
}

/// The kinds of the arguments of syscall `nr`, if it is one deja serves.
pub fn args(nr: u64) -> Option<&'static [Arg]> {
    entry(nr).and_then(|e| e.args)
}

/// The handler of syscall `nr`, if deja serves it.
pub(crate) fn handler(nr: u64) -> Option<Handler> {
    entry(nr).and_then(|e| e.handler)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn well_known_numbers() {
        assert_eq!(name(0), Some("read"));
        assert_eq!(name(60), Some("exit"));
        assert_eq!(name(158), Some("arch_prctl"));
        assert_eq!(name(202), Some("futex"));
        assert_eq!(name(231), Some("exit_group"));
        assert_eq!(name(257), Some("openat"));
        assert_eq!(name(262), Some("newfstatat"));
        assert_eq!(name(302), Some("prlimit64"));
        assert_eq!(name(318), Some("getrandom"));
        assert_eq!(name(332), Some("statx"));
        assert_eq!(name(334), Some("rseq"));
        assert_eq!(name(335), Some("uretprobe"));
        assert_eq!(name(336), None);
        assert_eq!(name(423), None);
        assert_eq!(name(424), Some("pidfd_send_signal"));
        assert_eq!(name(435), Some("clone3"));
        assert_eq!(name(439), Some("faccessat2"));
        assert_eq!(name(462), Some("mseal"));
        assert_eq!(name(463), None);
        assert_eq!(name(400), None);
        assert_eq!(name(u64::MAX), None);
        assert_eq!(display_name(1000), "unknown_1000");
        assert_eq!(number("clone3"), Some(435));
        assert_eq!(number("write"), Some(1));
        assert_eq!(number("no_such_call"), None);
        assert_eq!(name(deja_protocol::DEJA_SYSCALL), Some(DEJA_NAME));
        assert_eq!(number(DEJA_NAME), Some(deja_protocol::DEJA_SYSCALL));
    }

    #[test]
    fn numbers_strictly_increase_and_names_are_unique() {
        for w in TABLE.windows(2) {
            assert!(w[0].nr < w[1].nr, "{} ({}) before {} ({})", w[0].name, w[0].nr, w[1].name, w[1].nr);
        }
        let mut names: Vec<&str> = TABLE.iter().map(|e| e.name).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n, "a name appears twice");
        assert_eq!(TABLE.len(), 336 + 39 + 1);
        for e in TABLE {
            assert_eq!(entry(e.nr).map(|f| f.name), Some(e.name));
            assert_eq!(number(e.name), Some(e.nr));
        }
    }

    #[test]
    fn every_served_syscall_has_a_name_and_its_argument_kinds() {
        for nr in (0..1024).chain([deja_protocol::DEJA_SYSCALL]) {
            if let Some(e) = entry(nr) {
                assert!(!e.name.is_empty());
                if e.served() {
                    let args = e.args.unwrap_or_else(|| panic!("{} is served without argument kinds", e.name));
                    assert!(args.len() <= 6, "{} takes more than six arguments", e.name);
                } else {
                    assert_eq!(e.args, None, "{} declares arguments but has no handler", e.name);
                }
            } else {
                assert!(handler(nr).is_none() && args(nr).is_none());
            }
        }
        assert_eq!(TABLE.iter().filter(|e| e.served()).count(), 204);
        assert_eq!(args(0), Some(&[Arg::Fd, Arg::Ptr, Arg::Len][..]));
        assert_eq!(args(257), Some(&[Arg::Fd, Arg::Path, Arg::Flags, Arg::Mode][..]));
        assert!(entry(334).is_some_and(Entry::served), "rseq is answered on purpose");
    }
}
