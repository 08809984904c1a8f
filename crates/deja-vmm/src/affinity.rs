//! The calling thread's host core and affinity mask, over the system calls that read and set
//! them: what pinning a vCPU thread and choosing a core are built on.

/// The host core the calling thread runs on now.
pub fn current_core() -> Option<u32> {
    // SAFETY: sched_getcpu takes no arguments and only returns a number (or -1).
    let c = unsafe { libc::sched_getcpu() };
    u32::try_from(c).ok()
}

fn cpu_set(cores: &[u32]) -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is a plain bit array; all zeros is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cores {
        // SAFETY: callers keep `c` below CPU_SETSIZE, so the bit is inside `set`.
        unsafe { libc::CPU_SET(c as usize, &mut set) };
    }
    set
}

/// Restricts the calling thread to host core `core`.
pub fn pin_current_thread(core: u32) -> std::io::Result<()> {
    set_current_affinity(&[core])
}

/// Sets the calling thread's affinity to `cores`.
pub fn set_current_affinity(cores: &[u32]) -> std::io::Result<()> {
    if cores.iter().any(|&c| c as usize >= libc::CPU_SETSIZE as usize) {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    let set = cpu_set(cores);
    // SAFETY: `set` is a valid cpu_set_t of the size passed; pid 0 is the calling thread.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The host cores the calling thread may run on now (its affinity mask), in order.
pub fn allowed_cores() -> Vec<u32> {
    // SAFETY: cpu_set_t is a plain bit array; all zeros is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a writable cpu_set_t of the size passed; pid 0 is the calling thread.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if r != 0 {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as u32)
        .filter(|&c| {
            // SAFETY: CPU_ISSET reads one bit of a valid set; c is below CPU_SETSIZE.
            unsafe { libc::CPU_ISSET(c as usize, &set) }
        })
        .collect()
}
