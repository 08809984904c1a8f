//! The auxiliary vector's keys (`AT_*` of `<elf.h>`), as the initial stack passes them.

/// `AT_NULL`.
pub const AT_NULL: u64 = 0;
/// `AT_PHDR`.
pub const AT_PHDR: u64 = 3;
/// `AT_PHENT`.
pub const AT_PHENT: u64 = 4;
/// `AT_PHNUM`.
pub const AT_PHNUM: u64 = 5;
/// `AT_PAGESZ`.
pub const AT_PAGESZ: u64 = 6;
/// `AT_BASE`.
pub const AT_BASE: u64 = 7;
/// `AT_FLAGS`.
pub const AT_FLAGS: u64 = 8;
/// `AT_ENTRY`.
pub const AT_ENTRY: u64 = 9;
/// `AT_UID`.
pub const AT_UID: u64 = 11;
/// `AT_EUID`.
pub const AT_EUID: u64 = 12;
/// `AT_GID`.
pub const AT_GID: u64 = 13;
/// `AT_EGID`.
pub const AT_EGID: u64 = 14;
/// `AT_PLATFORM`.
pub const AT_PLATFORM: u64 = 15;
/// `AT_HWCAP`.
pub const AT_HWCAP: u64 = 16;
/// `AT_CLKTCK`.
pub const AT_CLKTCK: u64 = 17;
/// `AT_SECURE`.
pub const AT_SECURE: u64 = 23;
/// `AT_RANDOM`.
pub const AT_RANDOM: u64 = 25;
/// `AT_SYSINFO_EHDR`: where the vDSO is.
pub const AT_SYSINFO_EHDR: u64 = 33;
/// `AT_HWCAP2`.
pub const AT_HWCAP2: u64 = 26;
/// `AT_EXECFN`.
pub const AT_EXECFN: u64 = 31;
/// `AT_MINSIGSTKSZ`.
pub const AT_MINSIGSTKSZ: u64 = 51;
