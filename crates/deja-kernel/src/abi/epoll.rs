//! The readiness bits (`EPOLL*` of `<sys/epoll.h>`) `epoll`, `poll` and `select` are answered
//! in, and the `epoll_ctl` flags.

/// `EPOLLIN`.
pub const EPOLLIN: u32 = 0x1;
/// `EPOLLPRI`.
pub const EPOLLPRI: u32 = 0x2;
/// `EPOLLOUT`.
pub const EPOLLOUT: u32 = 0x4;
/// `EPOLLERR`.
pub const EPOLLERR: u32 = 0x8;
/// `EPOLLHUP`.
pub const EPOLLHUP: u32 = 0x10;
/// `EPOLLRDNORM`.
pub const EPOLLRDNORM: u32 = 0x40;
/// `EPOLLWRNORM`.
pub const EPOLLWRNORM: u32 = 0x100;
/// `EPOLLRDHUP`.
pub const EPOLLRDHUP: u32 = 0x2000;
/// `EPOLLEXCLUSIVE`.
pub const EPOLLEXCLUSIVE: u32 = 1 << 28;
/// `EPOLLWAKEUP`.
pub const EPOLLWAKEUP: u32 = 1 << 29;
/// `EPOLLONESHOT`.
pub const EPOLLONESHOT: u32 = 1 << 30;
/// `EPOLLET`.
pub const EPOLLET: u32 = 1 << 31;
