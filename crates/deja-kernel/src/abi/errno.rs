//! Linux errno values (x86-64) used by the syscall core, and their names.
//!
//! Handlers return `Err(errno)` with these positive values; the dispatcher turns them into the
//! two's-complement `-errno` the guest sees in RAX. The trace names them ([`name`]).

#![allow(missing_docs)]

/// Defines one constant per errno and [`NAMES`], the same list as (value, name) pairs.
macro_rules! errnos {
    ($($name:ident = $value:literal;)*) => {
        $(pub const $name: i32 = $value;)*

        /// Every errno defined here as (value, name), in the order of their definitions.
        pub const NAMES: &[(i32, &str)] = &[$(($value, stringify!($name))),*];
    };
}

errnos! {
    EPERM = 1;
    ENOENT = 2;
    ESRCH = 3;
    EINTR = 4;
    EIO = 5;
    EBADF = 9;
    EAGAIN = 11;
    ENOMEM = 12;
    EACCES = 13;
    EFAULT = 14;
    EBUSY = 16;
    EEXIST = 17;
    EXDEV = 18;
    ENODEV = 19;
    ENOTDIR = 20;
    EISDIR = 21;
    EINVAL = 22;
    EMFILE = 24;
    ENOTTY = 25;
    EFBIG = 27;
    ENOSPC = 28;
    ESPIPE = 29;
    EROFS = 30;
    ERANGE = 34;
    EDEADLK = 35;
    ENAMETOOLONG = 36;
    ENOLCK = 37;
    ENOSYS = 38;
    ENOTEMPTY = 39;
    ELOOP = 40;
    ENXIO = 6;
    EOPNOTSUPP = 95;
    ENODATA = 61;
    ETIMEDOUT = 110;
    E2BIG = 7;
    ENOEXEC = 8;
    ECHILD = 10;
    ERESTARTSYS = 512;
    EPIPE = 32;
    ENOTSOCK = 88;
    EDESTADDRREQ = 89;
    EMSGSIZE = 90;
    ENOPROTOOPT = 92;
    EPROTONOSUPPORT = 93;
    EAFNOSUPPORT = 97;
    EADDRINUSE = 98;
    EADDRNOTAVAIL = 99;
    ENETUNREACH = 101;
    ECONNRESET = 104;
    EISCONN = 106;
    ENOTCONN = 107;
    ECONNREFUSED = 111;
    EALREADY = 114;
    EINPROGRESS = 115;
    EPROTOTYPE = 91;
    ESOCKTNOSUPPORT = 94;
    ETOOMANYREFS = 109;
}

/// The name of errno `value` (`ENOENT` for 2), if it is one defined here.
pub fn name(value: i32) -> Option<&'static str> {
    NAMES.iter().find(|(v, _)| *v == value).map(|(_, n)| *n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_values() {
        assert_eq!(name(ENOENT), Some("ENOENT"));
        assert_eq!(name(ERESTARTSYS), Some("ERESTARTSYS"));
        assert_eq!(name(EINPROGRESS), Some("EINPROGRESS"));
        assert_eq!(name(0), None);
        assert_eq!(name(4095), None);
        let mut values: Vec<i32> = NAMES.iter().map(|(v, _)| *v).collect();
        values.sort_unstable();
        values.dedup();
        assert_eq!(values.len(), NAMES.len(), "two names share a value");
    }
}
