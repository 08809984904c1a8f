//! An epoll instance's registrations ([`Interest`]). The `EPOLL*` bits are in
//! [`crate::abi::epoll`]; what an object's readiness is (which needs the fd table for an epoll
//! instance) is computed above this room, in `files/readiness.rs`.

use serde::{Deserialize, Serialize};

/// One epoll registration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Interest {
    pub events: u32,
    pub data: u64,
    /// The open file description registered (a reused fd number is another registration).
    pub desc: u64,
    /// Generation of the object at the last edge-triggered report.
    pub reported: Option<u64>,
    /// `EPOLLONESHOT` fired: disabled until `EPOLL_CTL_MOD`.
    pub disabled: bool,
}
