//! `attack NAME`: one hostile act against the monitor, chosen by name. Each prints `attack
//! NAME` first; an act the program survives prints `survived NAME` and exits 0, one that kills
//! it ends the way Linux would end it (a signal), and nothing may make the monitor fail.
//!
//! - `syscalls-wild`, `syscalls-straddle`: every syscall number from 0 to 547 (and deja's own)
//!   with arguments that are kernel-half pointers, or a pointer to the last byte of a mapped
//!   page followed by an unmapped one, with huge lengths. The few numbers that end or replace
//!   the program are skipped.
//! - `int80`, `sysenter`, `iretq`, `lgdt`, `mov-cr3`, `wrmsr`, `invlpg`, `out-80`: instructions
//!   a ring-3 program may not use, or not this way.
//! - `stub-write`, `stub-jump`, `direct-map-read`, `direct-map-jump`: the monitor's pages.
//! - `smc`: code written, run, rewritten and run again.
//! - `fd-exhaust`, `thread-bomb`, `memory-bomb`, `stack-bomb`, `fs-fill`: exhaustion.
//! - `escape`: host paths that were not declared, `..` walks and links out of the tree.
//! - `mmap-storm`: 20,000 mmap, mprotect, munmap and mremap calls over one region.
//! - `socket-storm`: 400 sockets, an epoll set over all of them, connections between them.
//! - `deadlock`: two threads take two locks in opposite orders.
//! - `block-socket`: a read from a socket nothing will ever write to.
//! - `hlt`, `cli`, `ud2`, `int3`, `int-pf`, `int-gp`: more instructions a ring-3 program may not
//!   use, or that raise an exception: `int 14` and `int 13` try to enter the page-fault and
//!   protection-fault gates by hand, without the error code the CPU pushes.
//! - `sgdt`, `sidt`: descriptor-table reads, whose answers must not depend on the host.
//! - `out-deja-port`, `in-deja-port`, `out-ptsync`, `out-exception-port`: the monitor's own
//!   ports (the syscall port, the page-table sync port, an exception gate's port) from the
//!   program's code instead of deja's.
//! - `monitor-remap`: mmap over, mprotect, munmap and mremap onto the syscall stub page and the
//!   kernel half, then a plain syscall.
//! - `brk-storm`: the program break moved to the kernel half, to the top of memory, below its
//!   start and back, and a mapping the size of the address space.
//! - `fork-bomb`: fork in a loop; `exec-host`: execve of host programs.
//! - `sigreturn-forge`: rt_sigreturn with a forged frame that asks for ring 0 and I/O privilege;
//!   `sigreturn-iopl`: one with user segments that asks for I/O privilege alone, resuming in a
//!   function that prints the privilege it runs with.

use std::arch::asm;
use std::hint::black_box;

const KERNEL_HALF: u64 = 0xffff_8880_0000_0000;
const STUB_VA: u64 = 0xffff_ffff_ff60_0000;

/// Syscalls that end, replace or suspend the program for good whatever their arguments, or that
/// send it a signal (a pid and a signal number cut from a wild pointer can be 0 and 8: `kill(0,
/// SIGFPE)` is the program killing itself, as on Linux).
const SKIP: [u64; 17] = [15, 34, 56, 57, 58, 59, 60, 62, 129, 130, 200, 231, 234, 297, 322, 435, 0xde1a];

unsafe fn syscall6(n: u64, a: [u64; 6]) -> i64 {
    let r: i64;
    // SAFETY: the caller accepts whatever the syscall does with these arguments.
    unsafe {
        asm!("syscall", inlateout("rax") n as i64 => r, in("rdi") a[0], in("rsi") a[1], in("rdx") a[2],
             in("r10") a[3], in("r8") a[4], in("r9") a[5], lateout("rcx") _, lateout("r11") _, options(nostack));
    }
    r
}

/// Every syscall number with `args`; returns how many came back (rather than ending the run).
fn sweep(args: [u64; 6]) -> u64 {
    let mut served = 0;
    for n in (0..548u64).chain([0xde1a]) {
        if SKIP.contains(&n) && n != 0xde1a {
            continue;
        }
        // SAFETY: hostile on purpose; the numbers that would end the program are skipped.
        let r = unsafe { syscall6(n, args) };
        black_box(r);
        served += 1;
    }
    served
}

fn page_end() -> u64 {
    // Two pages, the second unmapped again: the first's last byte straddles into nothing.
    // SAFETY: plain anonymous mappings owned by this program.
    unsafe {
        let p = libc_mmap(8192);
        syscall6(11, [p + 4096, 4096, 0, 0, 0, 0]);
        p + 4095
    }
}

unsafe fn libc_mmap(len: u64) -> u64 {
    // SAFETY: an anonymous private read-write mapping.
    unsafe { syscall6(9, [0, len, 3, 0x22, u64::MAX, 0]) as u64 }
}

fn smc() {
    // SAFETY: an RWX anonymous mapping this program owns; the code written is `mov eax, imm; ret`.
    unsafe {
        let p = syscall6(9, [0, 4096, 7, 0x22, u64::MAX, 0]) as u64;
        let code = p as *mut u8;
        let write = |v: u32| {
            let bytes = [0xb8, v as u8, (v >> 8) as u8, (v >> 16) as u8, (v >> 24) as u8, 0xc3];
            for (i, b) in bytes.iter().enumerate() {
                std::ptr::write_volatile(code.add(i), *b);
            }
        };
        let f: extern "C" fn() -> u32 = std::mem::transmute(p);
        write(1);
        let a = f();
        write(2);
        let b = f();
        println!("smc: {a} then {b}");
    }
}

/// Where a forged `rt_sigreturn` frame resumes: prints the code segment and I/O privilege level
/// it runs with, then exits.
extern "C" fn after_sigreturn() -> ! {
    let (cs, flags): (u64, u64);
    // SAFETY: reads CS and RFLAGS only.
    unsafe {
        asm!("mov {0:r}, cs", out(reg) cs);
        asm!("pushfq", "pop {0}", out(reg) flags);
    }
    println!("after rt_sigreturn: cs {cs:#x}, iopl {}", (flags >> 12) & 3);
    println!("survived sigreturn-iopl");
    std::process::exit(0);
}

fn main() {
    let what = std::env::args().nth(1).unwrap_or_default();
    println!("attack {what}");
    // SAFETY: every arm is hostile on purpose; the ones that fault end the program.
    unsafe {
        match what.as_str() {
            "syscalls-wild" => {
                let n = sweep([KERNEL_HALF, KERNEL_HALF + 8, u64::MAX, KERNEL_HALF, u64::MAX >> 1, KERNEL_HALF]);
                println!("served {n}");
            }
            "syscalls-straddle" => {
                let p = page_end();
                let n = sweep([p, p, 1 << 40, p, p, 1 << 20]);
                println!("served {n}");
            }
            "int80" => asm!("int 0x80", inout("rax") 39u64 => _),
            "sysenter" => asm!("sysenter"),
            "iretq" => asm!("push 0", "push 0", "push 0", "push 0x8", "push 0", "iretq"),
            "lgdt" => {
                let d = [0u8; 10];
                asm!("lgdt [{}]", in(reg) d.as_ptr());
            }
            "mov-cr3" => asm!("mov cr3, {}", in(reg) 0x10000u64),
            "wrmsr" => asm!("wrmsr", in("ecx") 0xc000_0082u32, in("eax") 0u32, in("edx") 0u32),
            "invlpg" => asm!("invlpg [{}]", in(reg) 0x1000u64),
            "out-80" => asm!("out 0x80, al", in("al") 0u8),
            "stub-write" => std::ptr::write_volatile(STUB_VA as *mut u8, 0xcc),
            "stub-jump" => {
                let f: extern "C" fn() = std::mem::transmute(STUB_VA + 1);
                f();
            }
            "direct-map-read" => {
                black_box(std::ptr::read_volatile((KERNEL_HALF + 0x6000) as *const u64));
            }
            "direct-map-jump" => {
                let f: extern "C" fn() = std::mem::transmute(KERNEL_HALF + 0x7000);
                f();
            }
            "smc" => smc(),
            "fd-exhaust" => {
                let mut n = 0;
                while std::fs::File::open("/proc/self/maps").map(std::mem::forget).is_ok() && n < 100_000 {
                    n += 1;
                }
                let e = std::fs::File::open("/proc/self/maps").err();
                println!("opened {n}, then {:?}", e.map(|e| e.raw_os_error()));
            }
            "thread-bomb" => {
                let mut n = 0;
                let mut handles = Vec::new();
                loop {
                    match std::thread::Builder::new().stack_size(64 << 10).spawn(|| std::thread::park()) {
                        Ok(h) if n < 100_000 => {
                            handles.push(h);
                            n += 1;
                        }
                        Ok(_) => break,
                        Err(e) => {
                            println!("spawned {n}, then {:?}", e.raw_os_error());
                            break;
                        }
                    }
                }
                std::process::exit(0);
            }
            "memory-bomb" => {
                let mut blocks: Vec<Vec<u8>> = Vec::new();
                loop {
                    let mut v = Vec::new();
                    if v.try_reserve_exact(64 << 20).is_err() {
                        break;
                    }
                    v.resize(64 << 20, 1u8);
                    blocks.push(v);
                }
                println!("allocated {} MiB", blocks.len() * 64);
            }
            "stack-bomb" => {
                fn down(n: u64) -> u64 {
                    let pad = black_box([n; 64]);
                    if n == u64::MAX { 0 } else { down(n + 1) + pad[3] }
                }
                println!("{}", down(0));
            }
            "fs-fill" => {
                use std::io::Write;
                let mut f = std::fs::File::create("/data/fill").expect("create");
                let chunk = vec![7u8; 1 << 20];
                let mut mib = 0;
                let err = loop {
                    match f.write_all(&chunk) {
                        Ok(()) => mib += 1,
                        Err(e) => break e,
                    }
                };
                println!("wrote {mib} MiB, then {:?}", err.raw_os_error());
            }
            "escape" => {
                for p in ["/etc/passwd", "/proc/self/environ", "/proc/1/root/etc/passwd", "/../../etc/passwd", "/data/../../etc/shadow", "/root"] {
                    println!("{p}: {:?}", std::fs::read(p).map(|b| b.len()).map_err(|e| e.raw_os_error()));
                }
                std::fs::create_dir_all("/data").ok();
                let sym = std::os::unix::fs::symlink("/etc/passwd", "/data/link");
                println!("symlink: {:?}", sym.map_err(|e| e.raw_os_error()));
                println!("through it: {:?}", std::fs::read("/data/link").map(|b| b.len()).map_err(|e| e.raw_os_error()));
                let hard = std::fs::hard_link("/etc/passwd", "/data/hard");
                println!("hard link: {:?}", hard.map_err(|e| e.raw_os_error()));
            }
            "mmap-storm" => {
                let mut x = 0x2545_f491_4f6c_dd1du64;
                let mut next = || {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x
                };
                let base = 0x6000_0000_0000u64;
                let (mut ok, mut err) = (0u64, 0u64);
                for _ in 0..20_000 {
                    let page = base + (next() % 4096) * 4096;
                    let len = (1 + next() % 64) * 4096;
                    let r = match next() % 4 {
                        // mmap(page, len, rw, private|anonymous|fixed_noreplace)
                        0 => syscall6(9, [page, len, 3, 0x22 | 0x100000, u64::MAX, 0]),
                        1 => syscall6(10, [page, len, next() % 8, 0, 0, 0]),
                        2 => syscall6(11, [page, len, 0, 0, 0, 0]),
                        // mremap(page, len, new_len, MAYMOVE)
                        _ => syscall6(25, [page, len, (1 + next() % 64) * 4096, 1, 0, 0]),
                    };
                    if r < 0 { err += 1 } else { ok += 1 }
                }
                println!("mmap storm: {ok} ok, {err} refused");
            }
            "socket-storm" => {
                use std::net::{TcpListener, TcpStream, UdpSocket};
                let mut listeners = Vec::new();
                let mut udp = Vec::new();
                for i in 0..200u16 {
                    if let Ok(l) = TcpListener::bind(("127.0.0.1", 20000 + i)) {
                        listeners.push(l);
                    }
                    if let Ok(u) = UdpSocket::bind(("127.0.0.1", 30000 + i)) {
                        udp.push(u);
                    }
                }
                let ep = syscall6(291, [0, 0, 0, 0, 0, 0]);
                let mut added = 0;
                for fd in 3..450u64 {
                    let mut ev = [0u8; 12];
                    ev[..4].copy_from_slice(&1u32.to_le_bytes());
                    if syscall6(233, [ep as u64, 1, fd, ev.as_ptr() as u64, 0, 0]) == 0 {
                        added += 1;
                    }
                }
                let mut streams = Vec::new();
                for i in 0..100u16 {
                    if let Ok(s) = TcpStream::connect(("127.0.0.1", 20000 + i)) {
                        streams.push(s);
                    }
                }
                let mut ready = 0;
                let mut events = [0u8; 12 * 64];
                for _ in 0..50 {
                    ready += syscall6(232, [ep as u64, events.as_mut_ptr() as u64, 64, 0, 0, 0]).max(0);
                }
                println!(
                    "socket storm: {} listeners, {} udp, {added} in epoll, {} connected, {ready} ready",
                    listeners.len(),
                    udp.len(),
                    streams.len()
                );
            }
            "deadlock" => {
                use std::sync::{Arc, Barrier, Mutex};
                let a = Arc::new(Mutex::new(0));
                let b = Arc::new(Mutex::new(0));
                let barrier = Arc::new(Barrier::new(2));
                let (a2, b2, bar2) = (a.clone(), b.clone(), barrier.clone());
                let t = std::thread::spawn(move || {
                    let _x = b2.lock().unwrap();
                    bar2.wait();
                    let _y = a2.lock().unwrap();
                });
                let _x = a.lock().unwrap();
                barrier.wait();
                let _y = b.lock().unwrap();
                t.join().unwrap();
            }
            "block-socket" => {
                let s = std::net::UdpSocket::bind("127.0.0.1:40000").expect("bind");
                let mut buf = [0u8; 16];
                let r = s.recv(&mut buf);
                println!("recv returned {r:?}");
            }
            "hlt" => asm!("hlt"),
            "cli" => asm!("cli"),
            "ud2" => asm!("ud2"),
            "int3" => asm!("int3"),
            "int-pf" => asm!("int 14"),
            "int-gp" => asm!("int 13"),
            "sgdt" | "sidt" => {
                let mut d = [0u8; 10];
                if what == "sgdt" {
                    asm!("sgdt [{}]", in(reg) d.as_mut_ptr());
                } else {
                    asm!("sidt [{}]", in(reg) d.as_mut_ptr());
                }
                let base = u64::from_le_bytes(d[2..10].try_into().unwrap_or_default());
                println!("{what}: limit {:#x} base {base:#x}", u16::from_le_bytes([d[0], d[1]]));
            }
            "out-deja-port" => asm!("out dx, eax", in("dx") 0xdeu16, in("eax") 39u32),
            "in-deja-port" => {
                let v: u32;
                asm!("in eax, dx", in("dx") 0xdeu16, out("eax") v);
                println!("read {v:#x}");
            }
            "out-ptsync" => asm!("out dx, al", in("dx") 0xddu16, in("al") 0u8),
            "out-exception-port" => asm!("out dx, al", in("dx") 0xaeu16, in("al") 0u8),
            "monitor-remap" => {
                let tries: [(&str, u64, [u64; 6]); 8] = [
                    ("mmap fixed over the stub", 9, [STUB_VA, 4096, 7, 0x32, u64::MAX, 0]),
                    ("mmap fixed in the kernel half", 9, [KERNEL_HALF, 4096, 7, 0x32, u64::MAX, 0]),
                    ("mmap hint in the kernel half", 9, [KERNEL_HALF, 4096, 3, 0x22, u64::MAX, 0]),
                    ("mprotect the stub", 10, [STUB_VA, 4096, 7, 0, 0, 0]),
                    ("munmap the stub", 11, [STUB_VA, 4096, 0, 0, 0, 0]),
                    ("munmap the kernel half", 11, [KERNEL_HALF, 1 << 40, 0, 0, 0, 0]),
                    ("mremap onto the stub", 25, [libc_mmap(4096), 4096, 4096, 3, STUB_VA, 0]),
                    ("madvise the stub away", 28, [STUB_VA, 4096, 4, 0, 0, 0]),
                ];
                for (what, n, args) in tries {
                    let r = syscall6(n, args);
                    println!("{what}: {}", if r < 0 { format!("errno {}", -r) } else { format!("{r:#x}") });
                }
                println!("getpid after: {}", syscall6(39, [0; 6]));
            }
            "brk-storm" => {
                let start = syscall6(12, [0; 6]);
                for (what, to) in
                    [("kernel half", KERNEL_HALF), ("top", u64::MAX), ("below the start", 4096), ("start", start as u64)]
                {
                    let r = syscall6(12, [to, 0, 0, 0, 0, 0]);
                    println!("brk to {what}: {}", if r == start { "unchanged".to_string() } else { format!("{r:#x}") });
                }
                let huge = syscall6(9, [0, 1 << 47, 3, 0x22, u64::MAX, 0]);
                println!("mmap 128 TiB: errno {}", -huge);
                let v = vec![7u8; 1 << 20];
                println!("a MiB after: {}", v.iter().map(|&b| u64::from(b)).sum::<u64>());
            }
            "fork-bomb" => {
                let mut made = 0u32;
                let err = loop {
                    let r = syscall6(57, [0; 6]);
                    match r {
                        0 => {
                            syscall6(60, [0; 6]);
                        }
                        r if r > 0 && made < 10_000 => made += 1,
                        r => break r,
                    }
                };
                println!("forked {made}, then {err}");
            }
            "exec-host" => {
                for p in [c"/bin/sh", c"/usr/bin/env", c"/proc/self/exe"] {
                    let argv = [p.as_ptr() as u64, 0u64];
                    let r = syscall6(59, [p.as_ptr() as u64, argv.as_ptr() as u64, 0, 0, 0, 0]);
                    println!("execve {}: errno {}", p.to_string_lossy(), -r);
                }
            }
            "sigreturn-forge" | "sigreturn-iopl" => {
                // A signal frame on the stack (RSP points at its ucontext): uc_mcontext with
                // eflags asking for IOPL 3, rip at `after_sigreturn` on a stack of its own, and
                // cs = 0x08 (ring 0) or the user's 0x33.
                let stack = Box::leak(vec![0u64; 8192].into_boxed_slice());
                let top = (stack.as_ptr() as u64 + 8192 * 8) & !15;
                let mut frame = [0u64; 64];
                frame[5 + 16] = after_sigreturn as *const () as usize as u64; // rip
                frame[5 + 17] = 0x3202; // eflags: IF, IOPL 3
                frame[5 + 18] = if what == "sigreturn-forge" { 0x08 } else { 0x2b_0000_0000_0033 }; // cs, gs, fs, ss
                frame[5 + 15] = top - 8; // rsp, as after a call
                let r: i64;
                asm!("mov r12, rsp", "mov rsp, {f}", "mov eax, 15", "syscall", "mov rsp, r12",
                     f = in(reg) frame.as_ptr(), out("r12") _, lateout("rax") r, lateout("rcx") _, lateout("r11") _);
                println!("rt_sigreturn returned {r}");
            }
            other => {
                eprintln!("unknown attack {other}");
                std::process::exit(2);
            }
        }
    }
    println!("survived {what}");
}
