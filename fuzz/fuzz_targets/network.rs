//! The network model of one node: sockets opened, bound, listened on and connected to by
//! syscalls, and packets and connection events delivered from a network that may send anything
//! (a `Data` before a `Syn`, an `Ack` of bytes never sent, a `Rst` to a listener). Each step of
//! the input is either a syscall (as in the `syscalls` target, restricted to the socket calls)
//! or a packet; the core must never panic.
#![no_main]

use deja_kernel::SyscallOutcome;
use deja_kernel::net::{Packet, Payload, SockAddr};
use libfuzzer_sys::fuzz_target;

#[path = "program.rs"]
mod program;

/// socket, connect, accept, sendto, recvfrom, sendmsg, recvmsg, shutdown, bind, listen,
/// getsockname, getpeername, setsockopt, getsockopt, read, write, close, poll, epoll_create1,
/// epoll_ctl, epoll_wait, accept4.
const CALLS: [u64; 22] = [41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 54, 55, 0, 1, 3, 7, 291, 233, 232, 288];

const ME: [u8; 4] = [10, 0, 0, 1];
const PEER: [u8; 4] = [10, 0, 0, 2];

fuzz_target!(|data: &[u8]| {
    let Some((mut kernel, mut mem)) = program::load() else { return };
    kernel.attach_network(ME);
    // A page the program can name in its socket calls (addresses, buffers).
    let buf = 0x7000_0000u64;
    if deja_kernel::Memory::populate(&mut mem, buf, 4 * 4096, deja_kernel::Prot::RW).is_err() {
        return;
    }
    let mut now = 0u64;
    for step in data.chunks_exact(32) {
        let word = |i: usize| u64::from_le_bytes(step[8 * i..8 * i + 8].try_into().unwrap());
        if step[0] & 1 == 0 {
            let nr = CALLS[(word(0) >> 1) as usize % CALLS.len()];
            // Small numbers for descriptors and sizes, or addresses inside the page.
            let arg = |w: u64| if w & 1 == 0 { (w >> 1) % 64 } else { buf + (w >> 1) % (4 * 4096) };
            let args =
                [arg(word(1)), arg(word(2)), arg(word(3)), arg(word(1) >> 8), arg(word(2) >> 8), arg(word(3) >> 8)];
            if !matches!(kernel.syscall(&mut mem, nr, args), SyscallOutcome::Return(_)) {
                return;
            }
        } else {
            let ports = word(1);
            let src = SockAddr::new(if step[1] & 1 == 0 { PEER } else { ME }, ports as u16);
            let dst = SockAddr::new(ME, (ports >> 16) as u16 % 8 + 7000);
            let payload = match step[2] % 8 {
                0 => Payload::Syn,
                1 => Payload::SynAck,
                2 => Payload::Data(step[8..8 + step[3] as usize % 24].to_vec()),
                3 => Payload::Ack(word(2)),
                4 => Payload::Fin,
                5 => Payload::Rst,
                6 => Payload::ConnectTimeout,
                _ => Payload::Datagram(step[16..].to_vec()),
            };
            now += word(3) % 1_000_000_000;
            kernel.resume(&mut mem, now, vec![Packet { src, dst, payload }]);
            drop(kernel.take_packets());
        }
    }
});
