//! Commits one CPU fault chosen by the first argument: `hlt` or `cli` (privileged, SIGSEGV),
//! `ud2` (SIGILL), `null` (write to address 0, SIGSEGV), `int3` (SIGTRAP), `rdtsc` (allowed:
//! prints whether it read anything), `rdtsc-value` (prints the raw counter), `div0` (SIGFPE), `in` and `out` (port I/O on
//! the monitor's syscall port, SIGSEGV as on Linux without `ioperm`).
fn main() {
    let what = std::env::args().nth(1).unwrap_or_else(|| "hlt".into());
    println!("about to: {what}");
    // SAFETY: every arm faults on purpose (or, for rdtsc, reads the time-stamp counter).
    unsafe {
        match what.as_str() {
            "hlt" => core::arch::asm!("hlt"),
            "cli" => core::arch::asm!("cli"),
            "ud2" => core::arch::asm!("ud2"),
            "int3" => core::arch::asm!("int3"),
            "in" => core::arch::asm!("in al, 0xde", out("al") _),
            "out" => core::arch::asm!("out 0xde, al", in("al") 0u8),
            "null" => core::ptr::write_volatile(core::ptr::null_mut::<u64>().wrapping_add(2), 7),
            "div0" => core::arch::asm!("xor edx, edx", "xor eax, eax", "xor ecx, ecx", "div ecx", out("eax") _, out("edx") _, out("ecx") _),
            "rdtsc" => {
                let t = core::arch::x86_64::_rdtsc();
                println!("rdtsc: {}", t > 0);
                return;
            }
            "rdtsc-value" => {
                // Prints the raw counter: deterministic only where the host traps RDTSC.
                println!("rdtsc value: {}", core::arch::x86_64::_rdtsc());
                return;
            }
            other => {
                eprintln!("unknown fault {other}");
                std::process::exit(2);
            }
        }
    }
    println!("survived {what}");
}
