//! Open flags (`O_*`) and file mode types (`S_IF*`), as `open(2)` and `stat(2)` define them on
//! x86-64.

/// `S_IFMT`: the type bits of a mode.
pub const S_IFMT: u32 = 0o170000;
/// `S_IFIFO`.
pub const S_IFIFO: u32 = 0o010000;
/// `S_IFCHR`.
pub const S_IFCHR: u32 = 0o020000;
/// `S_IFDIR`.
pub const S_IFDIR: u32 = 0o040000;
/// `S_IFBLK`.
pub const S_IFBLK: u32 = 0o060000;
/// `S_IFREG`.
pub const S_IFREG: u32 = 0o100000;
/// `S_IFSOCK`.
pub const S_IFSOCK: u32 = 0o140000;
/// `S_IFLNK`.
pub const S_IFLNK: u32 = 0o120000;

/// `O_WRONLY`.
pub const O_WRONLY: u32 = 1;
/// `O_RDWR`.
pub const O_RDWR: u32 = 2;
/// `O_ACCMODE`.
pub const O_ACCMODE: u32 = 3;
/// `O_CREAT`.
pub const O_CREAT: u32 = 0o100;
/// `O_EXCL`.
pub const O_EXCL: u32 = 0o200;
/// `O_TRUNC`.
pub const O_TRUNC: u32 = 0o1000;
/// `O_APPEND`.
pub const O_APPEND: u32 = 0o2000;
/// `O_NONBLOCK`.
pub const O_NONBLOCK: u32 = 0o4000;
/// `O_ASYNC` (`FASYNC`): signal-driven I/O, recorded but not delivered (see
/// [`OpenFile::owner`](crate::files::fd::OpenFile::owner)).
pub const O_ASYNC: u32 = 0o20000;
/// `O_LARGEFILE` (always set by 64-bit `open`).
pub const O_LARGEFILE: u32 = 0o100000;
/// `O_DIRECTORY`.
pub const O_DIRECTORY: u32 = 0o200000;
/// `O_NOFOLLOW`.
pub const O_NOFOLLOW: u32 = 0o400000;
/// `O_CLOEXEC`.
pub const O_CLOEXEC: u32 = 0o2000000;
/// `O_PATH`.
pub const O_PATH: u32 = 0o10000000;
/// `O_TMPFILE` (includes `O_DIRECTORY`).
pub const O_TMPFILE: u32 = 0o20200000;
/// `O_DSYNC`.
pub const O_DSYNC: u32 = 0o10000;
