//! A recorded syscall in words, the way strace writes it: each argument shown by the kind its
//! row of the table gives it, paths read from the program's memory at the syscall's entry
//! ([`read_paths`]), errors by name ([`render`]).

use crate::prelude::*;
use core::fmt::Write as _;

use super::{display_name, Arg};
use crate::kernel::AT_FDCWD;
use crate::mm::mappings::Mappings;
use crate::Memory;

/// The most bytes of one path argument the trace keeps: Linux's `PATH_MAX`, which counts the
/// NUL, so a path of this many bytes was cut ([`render`] marks it with `...`).
pub const TRACE_PATH_MAX: usize = crate::fs::PATH_MAX;

/// The largest errno a syscall returns (Linux's `MAX_ERRNO`): RAX in `-4095..=-1` is an error.
const MAX_ERRNO: i64 = 4095;

/// The bytes of the path arguments of syscall `nr`, by argument position, as the program's
/// memory holds them now: for a [`Arg::Path`] argument, the bytes before its NUL (at most
/// [`TRACE_PATH_MAX`]), or `None` when they cannot be read without populating a page; `None`
/// for every other argument. Empty for a syscall without path arguments. Reads nothing through
/// the syscall's data hash and changes neither the memory nor the mappings.
pub(crate) fn read_paths(nr: u64, args: &[u64; 6], mappings: &Mappings, mem: &dyn Memory) -> Vec<Option<Vec<u8>>> {
    let kinds = super::args(nr).unwrap_or_default();
    if !kinds.contains(&Arg::Path) {
        return Vec::new();
    }
    kinds
        .iter()
        .zip(args)
        .map(|(kind, &a)| (*kind == Arg::Path).then(|| mappings.peek_cstr(mem, a, TRACE_PATH_MAX)).flatten())
        .collect()
}

/// Syscall `nr` as strace would write it: its name, as many arguments as its row has kinds,
/// and what it returned, e.g. `write(1, 0x7ffd1000, 12) = 12`.
///
/// Fds are decimal `int`s, the low 32 bits of their register (`AT_FDCWD` by name), flags and
/// pointers hex (a null pointer is `NULL`), modes octal, lengths decimal and other numbers
/// signed decimal. A path is the quoted string of `paths[i]` (the bytes [`read_paths`] gave for
/// argument `i`; printable ASCII as is, the rest escaped), or its address when it could not be
/// read. A syscall deja does not serve shows its six registers in hex. The result is decimal,
/// hex when too large for a count (an address), `-ENOENT` for an error, and `?` for a call that
/// did not return (an exit).
pub fn render(nr: u64, args: &[u64; 6], paths: &[Option<Vec<u8>>], ret: Option<u64>) -> String {
    let mut out = display_name(nr);
    out.push('(');
    match super::args(nr) {
        Some(kinds) => {
            for (i, (kind, &a)) in kinds.iter().zip(args).enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                render_arg(&mut out, *kind, a, paths.get(i).and_then(Option::as_deref));
            }
        }
        None => {
            for (i, a) in args.iter().enumerate() {
                let _ = write!(out, "{}{a:#x}", if i > 0 { ", " } else { "" });
            }
        }
    }
    out.push_str(") = ");
    match ret {
        None => out.push('?'),
        Some(v) if (-MAX_ERRNO..0).contains(&(v as i64)) => {
            let errno = -(v as i64) as i32;
            match crate::abi::errno::name(errno) {
                Some(name) => {
                    let _ = write!(out, "-{name}");
                }
                None => {
                    let _ = write!(out, "-{errno}");
                }
            }
        }
        Some(v) if v <= i32::MAX as u64 => {
            let _ = write!(out, "{v}");
        }
        Some(v) => {
            let _ = write!(out, "{v:#x}");
        }
    }
    out
}

/// Appends argument `a` of kind `kind`; `path` is the string a path argument points to.
fn render_arg(out: &mut String, kind: Arg, a: u64, path: Option<&[u8]>) {
    let _ = match (kind, path) {
        (Arg::Path, Some(bytes)) => {
            quote(out, bytes);
            Ok(())
        }
        // An fd is an `int`: the low 32 bits of the register, as the kernel reads it.
        (Arg::Fd, _) if a as i32 == AT_FDCWD as i32 => write!(out, "AT_FDCWD"),
        (Arg::Fd, _) => write!(out, "{}", a as i32),
        (Arg::Path | Arg::Ptr, _) if a == 0 => write!(out, "NULL"),
        (Arg::Path | Arg::Ptr | Arg::Flags, _) => write!(out, "{a:#x}"),
        (Arg::Mode, _) => write!(out, "{a:#o}"),
        (Arg::Len, _) => write!(out, "{a}"),
        (Arg::Int, _) => write!(out, "{}", a as i64),
    };
}

/// Appends `bytes` in double quotes: printable ASCII as is except the quote and the backslash,
/// which get a backslash before them; newline, tab and carriage return as `\n`, `\t`, `\r`;
/// every other byte as `\x` and two hex digits. A path cut at [`TRACE_PATH_MAX`] has `...`
/// after the closing quote.
fn quote(out: &mut String, bytes: &[u8]) {
    out.push('"');
    for &b in bytes {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\t' => out.push_str("\\t"),
            b'\r' => out.push_str("\\r"),
            0x20..=0x7e => out.push(char::from(b)),
            _ => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
    out.push('"');
    if bytes.len() >= TRACE_PATH_MAX {
        out.push_str("...");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::errno::{EBADF, EFAULT, ENAMETOOLONG, ENOENT, ENOSYS, ERESTARTSYS};
    /// `-errno` as RAX holds it.
    fn err(errno: i32) -> Option<u64> {
        Some(-i64::from(errno) as u64)
    }

    #[test]
    fn rendering_shows_each_kind_of_argument() {
        let path = |s: &str| vec![None, Some(s.as_bytes().to_vec())];
        // Fd, Ptr, Len.
        assert_eq!(render(1, &[1, 0x7ffd1000, 12, 9, 9, 9], &[], Some(12)), "write(1, 0x7ffd1000, 12) = 12");
        // Fd as AT_FDCWD, Path, Flags, Mode.
        let openat = [AT_FDCWD, 0x1000, 0x241, 0o644, 0, 0];
        assert_eq!(
            render(257, &openat, &path("/data/wal"), Some(3)),
            "openat(AT_FDCWD, \"/data/wal\", 0x241, 0o644) = 3"
        );
        // Int is signed, Len is not; only as many arguments as the row has kinds.
        assert_eq!(render(8, &[3, -1i64 as u64, 2, 7, 7, 7], &[], Some(10)), "lseek(3, -1, 2) = 10");
        assert_eq!(render(24, &[5; 6], &[], Some(0)), "sched_yield() = 0");
        // Pointers: null by name, an address (returned) in hex.
        let mmap = [0, 8192, 3, 0x22, -1i64 as u64, 0];
        assert_eq!(
            render(9, &mmap, &[], Some(0x7f00_0000_0000)),
            "mmap(NULL, 8192, 0x3, 0x22, -1, 0) = 0x7f0000000000"
        );
        // An fd is the register's low 32 bits, signed, as the kernel reads it.
        assert_eq!(render(3, &[1 << 40 | 7, 0, 0, 0, 0, 0], &[], err(EBADF)), "close(7) = -EBADF");
        assert_eq!(render(3, &[u64::from(u32::MAX), 0, 0, 0, 0, 0], &[], err(EBADF)), "close(-1) = -EBADF");
        let zero_extended = [u64::from(AT_FDCWD as u32), 0x1000, 0, 0, 0, 0];
        assert_eq!(render(257, &zero_extended, &path("/"), Some(3)), "openat(AT_FDCWD, \"/\", 0x0, 0o0) = 3");
        // A path with bytes to escape, two paths in one call.
        let renameat = [AT_FDCWD, 0x1000, 4, 0x2000, 0, 0];
        let paths = [None, Some(b"a\"b\\c\n\x01".to_vec()), None, Some(b"d".to_vec())];
        assert_eq!(render(264, &renameat, &paths, Some(0)), r#"renameat(AT_FDCWD, "a\"b\\c\n\x01", 4, "d") = 0"#);
        // A path cut at the limit.
        let long = vec![b'x'; TRACE_PATH_MAX];
        let cut = render(87, &[0x1000, 0, 0, 0, 0, 0], &[Some(long)], err(ENAMETOOLONG));
        assert!(cut.starts_with("unlink(\"xxx") && cut.ends_with("x\"...) = -ENAMETOOLONG"), "{cut}");
    }

    #[test]
    fn rendering_a_hostile_pointer_shows_its_address() {
        let mut mappings = Mappings::new(1000);
        let mut mem = crate::FakeMemory::new(16);
        let start = crate::mm::user_layout::USER_START;
        let kind = crate::mm::mappings::VmaKind::Anon;
        mappings.insert(crate::mm::mappings::Vma {
            start,
            end: start + 0x2000,
            prot: crate::Prot::RW,
            kind,
            shared: false,
        });
        mappings.copy_out(&mut mem, start, b"/etc/hosts\0").unwrap();
        let pages = mem.pages.len();
        for (addr, shown) in [
            (start, "\"/etc/hosts\"".to_string()),
            (start + 0x1000, format!("{:#x}", start + 0x1000)),
            (start + 0x8000, format!("{:#x}", start + 0x8000)),
            (u64::MAX - 3, "0xfffffffffffffffc".to_string()),
            (0, "NULL".to_string()),
        ] {
            let args = [AT_FDCWD, addr, 0, 0, 0, 0];
            let paths = read_paths(257, &args, &mappings, &mem);
            assert_eq!(
                render(257, &args, &paths, err(EFAULT)),
                format!("openat(AT_FDCWD, {shown}, 0x0, 0o0) = -EFAULT")
            );
        }
        assert_eq!(mem.pages.len(), pages, "reading a path populates no page");
        assert!(read_paths(1, &[1, start, 4, 0, 0, 0], &mappings, &mem).is_empty(), "write has no path");
    }

    #[test]
    fn rendering_names_errors_and_other_results() {
        let close = |ret| render(3, &[4, 0, 0, 0, 0, 0], &[], ret);
        assert_eq!(close(err(ENOENT)), "close(4) = -ENOENT");
        assert_eq!(close(err(ERESTARTSYS)), "close(4) = -ERESTARTSYS");
        assert_eq!(close(err(4000)), "close(4) = -4000", "an errno without a name");
        assert_eq!(close(Some(-4096i64 as u64)), "close(4) = 0xfffffffffffff000", "not an errno");
        assert_eq!(close(Some(i32::MAX as u64)), "close(4) = 2147483647");
        assert_eq!(render(231, &[1, 0, 0, 0, 0, 0], &[], None), "exit_group(1) = ?");
        assert_eq!(
            render(1000, &[1, 2, 3, 4, 5, 6], &[], err(ENOSYS)),
            "unknown_1000(0x1, 0x2, 0x3, 0x4, 0x5, 0x6) = -ENOSYS"
        );
        assert_eq!(render(134, &[0; 6], &[], err(ENOSYS)), "uselib(0x0, 0x0, 0x0, 0x0, 0x0, 0x0) = -ENOSYS");
        assert_eq!(render(15, &[0; 6], &[], Some(7)), "rt_sigreturn() = 7");
    }
}
