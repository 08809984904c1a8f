//! Socket addresses: kept in their IPv6 form, an IPv4 address as its IPv4-mapped IPv6 address,
//! and the addresses a node has on the simulated network (`a.b.c.d` and
//! `fd00:6465:6a61::a.b.c.d`).

use serde::{Deserialize, Serialize};

/// The prefix of a node's IPv6 address on the simulated network: `fd00:6465:6a61::/96` (a
/// unique local prefix, `6465:6a61` spelling "deja") followed by the node's IPv4 address.
pub const NODE_PREFIX6: [u8; 12] = [0xfd, 0, 0x64, 0x65, 0x6a, 0x61, 0, 0, 0, 0, 0, 0];
/// `::ffff:0:0/96`: an IPv4 address as an IPv6 socket sees it.
const MAPPED_PREFIX: [u8; 12] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];
/// `::1`.
pub const LOOPBACK6: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

/// A socket address. Addresses are kept in their IPv6 form, an IPv4 address as its IPv4-mapped
/// IPv6 address (`::ffff:a.b.c.d`), so that a dual-stack IPv6 socket and an IPv4 socket meet
/// in one table, as they do in Linux.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SockAddr {
    /// Address, network order bytes, IPv4 as IPv4-mapped.
    pub ip: [u8; 16],
    /// Port.
    pub port: u16,
}

impl SockAddr {
    /// `a.b.c.d:port`.
    pub fn new(ip: [u8; 4], port: u16) -> Self {
        SockAddr { ip: mapped(ip), port }
    }

    /// `[ip]:port`, an IPv6 address (an IPv4-mapped one is the IPv4 address).
    pub fn v6(ip: [u8; 16], port: u16) -> Self {
        SockAddr { ip, port }
    }

    /// The IPv4 address, if this is one.
    pub fn v4(&self) -> Option<[u8; 4]> {
        self.ip.starts_with(&MAPPED_PREFIX).then(|| last4(&self.ip))
    }

    /// The IPv4 address of the node this address names on the simulated network: an IPv4
    /// address, or a node's IPv6 address ([`NODE_PREFIX6`]).
    pub fn node_v4(&self) -> Option<[u8; 4]> {
        (self.ip.starts_with(&MAPPED_PREFIX) || self.ip.starts_with(&NODE_PREFIX6)).then(|| last4(&self.ip))
    }

    /// True for `0.0.0.0` and `::`.
    pub fn is_unspecified(&self) -> bool {
        self.ip == [0; 16] || self.v4() == Some([0; 4])
    }

    /// True for an IPv6 address that is not IPv4-mapped.
    pub fn is_v6(&self) -> bool {
        self.v4().is_none()
    }
}

/// `::ffff:a.b.c.d`.
pub fn mapped(ip: [u8; 4]) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..12].copy_from_slice(&MAPPED_PREFIX);
    b[12..].copy_from_slice(&ip);
    b
}

/// A node's IPv6 address on the simulated network.
pub fn node_v6(ip: [u8; 4]) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..12].copy_from_slice(&NODE_PREFIX6);
    b[12..].copy_from_slice(&ip);
    b
}

fn last4(b: &[u8; 16]) -> [u8; 4] {
    [b[12], b[13], b[14], b[15]]
}

impl core::fmt::Display for SockAddr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.v4() {
            Some(ip) => write!(f, "{}:{}", core::net::Ipv4Addr::from(ip), self.port),
            None => write!(f, "[{}]:{}", core::net::Ipv6Addr::from(self.ip), self.port),
        }
    }
}
