//! The simulated network between nodes: routing, latency, UDP loss/duplication/reordering,
//! partitions and what is held back while they last.
//!
//! The network sees [`Packet`]s from each node's outbox and turns each into zero or more
//! deliveries at a virtual time. It never touches the host network: addresses are the ones in
//! the cluster file and nothing else exists. The fault model that drives it is documented in
//! [`crate::sim`].

use std::collections::{BTreeMap, BTreeSet};

use deja_kernel::net::{Packet, Payload, SockAddr};
use deja_kernel::DecisionLog;

use crate::config::NetworkConfig;
use crate::FaultEvent;

/// Most latency steps a latency decision chooses among (the range is split evenly).
const LATENCY_STEPS: u64 = 1000;
/// Parts per million.
const PPM: u64 = 1_000_000;

/// A packet to hand to `node` at `at` (virtual ns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// When.
    pub at: u64,
    /// Receiving node.
    pub node: usize,
    /// The packet.
    pub packet: Packet,
}

/// Counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct NetStats {
    /// Packets the nodes sent to the network.
    pub sent: u64,
    /// Deliveries scheduled.
    pub delivered: u64,
    /// Datagrams lost (loss faults).
    pub lost: u64,
    /// Datagrams duplicated.
    pub duplicated: u64,
    /// Datagrams held back (reordered).
    pub reordered: u64,
    /// Datagrams dropped by a partition.
    pub cut_datagrams: u64,
    /// TCP packets held by a partition (delivered at the heal, or dropped by a reset).
    pub held: u64,
    /// Packets to addresses no node has.
    pub unroutable: u64,
}

/// The network's state.
#[derive(Debug, Clone)]
pub struct Network {
    cfg: NetworkConfig,
    /// Node index by address.
    addrs: BTreeMap<[u8; 4], usize>,
    /// Cut directions (from, to).
    cut: BTreeSet<(usize, usize)>,
    /// Bumped at every change of the cuts.
    pub epoch: u64,
    /// TCP packets held by a cut, per direction, in order.
    held: BTreeMap<(usize, usize), Vec<Packet>>,
    /// Latest delivery time per connection direction (TCP is delivered in order).
    last: BTreeMap<(SockAddr, SockAddr), u64>,
    /// SYNs not yet answered, with the node that sent them.
    pending_syn: BTreeMap<(SockAddr, SockAddr), usize>,
    /// Counters.
    pub stats: NetStats,
}

impl Network {
    /// A network joining `addrs` (node `i` has `addrs[i]`).
    pub fn new(cfg: NetworkConfig, addrs: &[[u8; 4]]) -> Self {
        Network {
            cfg,
            addrs: addrs.iter().enumerate().map(|(i, a)| (*a, i)).collect(),
            cut: BTreeSet::new(),
            epoch: 0,
            held: BTreeMap::new(),
            last: BTreeMap::new(),
            pending_syn: BTreeMap::new(),
            stats: NetStats::default(),
        }
    }

    /// The node with address `ip`.
    pub fn node_of(&self, ip: [u8; 4]) -> Option<usize> {
        self.addrs.get(&ip).copied()
    }

    /// True if traffic from `a` to `b` is cut.
    pub fn is_cut(&self, a: usize, b: usize) -> bool {
        self.cut.contains(&(a, b))
    }

    /// True if any direction is cut.
    pub fn partitioned(&self) -> bool {
        !self.cut.is_empty()
    }

    /// The cut directions.
    pub fn cuts(&self) -> Vec<(usize, usize)> {
        self.cut.iter().copied().collect()
    }

    /// A latency draw, in ns.
    fn latency(&self, log: &mut DecisionLog) -> u64 {
        let [lo, hi] = self.cfg.latency_ms;
        let (lo, hi) = ((lo * 1e6) as u64, (hi * 1e6) as u64);
        if hi <= lo {
            return lo;
        }
        let steps = ((hi - lo) / 1000).clamp(1, LATENCY_STEPS);
        let k = log.decide("network latency".into(), steps + 1);
        lo + (hi - lo) * k / steps
    }

    /// Decides whether a fault of probability `p` strikes.
    pub(crate) fn strike(log: &mut DecisionLog, p: f64, point: &str) -> bool {
        if p <= 0.0 {
            return false;
        }
        let ppm = (p * PPM as f64).round() as u64;
        log.decide(point.into(), PPM) < ppm
    }

    /// Routes a packet `from` node sent at `now`: the deliveries it makes now (the rest may be
    /// held by a partition). UDP faults go to `ledger`.
    pub fn route(
        &mut self,
        log: &mut DecisionLog,
        ledger: &mut Vec<FaultEvent>,
        now: u64,
        from: usize,
        p: Packet,
    ) -> Vec<Delivery> {
        self.stats.sent += 1;
        match p.payload {
            Payload::Syn => {
                self.pending_syn.insert((p.src, p.dst), from);
            }
            Payload::SynAck | Payload::Rst => {
                self.pending_syn.remove(&(p.dst, p.src));
                if p.payload == Payload::Rst {
                    self.pending_syn.remove(&(p.src, p.dst));
                }
            }
            _ => {}
        }
        let Some(to) = self.node_of(p.dst.ip) else {
            self.stats.unroutable += 1;
            return Vec::new();
        };
        if self.is_cut(from, to) {
            if p.payload == Payload::Rst {
                // The sender gave up on a connection whose SYN never got through: nothing
                // reached the peer, so nothing is retransmitted at the heal.
                let q = self.held.entry((from, to)).or_default();
                let before = q.len();
                q.retain(|h| !(h.payload == Payload::Syn && h.src == p.src && h.dst == p.dst));
                if q.len() < before {
                    return Vec::new();
                }
            }
            if p.payload.is_stream() {
                self.stats.held += 1;
                self.held.entry((from, to)).or_default().push(p);
            } else {
                self.stats.cut_datagrams += 1;
            }
            return Vec::new();
        }
        self.deliveries(log, ledger, now, to, p)
    }

    fn deliveries(
        &mut self,
        log: &mut DecisionLog,
        ledger: &mut Vec<FaultEvent>,
        now: u64,
        to: usize,
        p: Packet,
    ) -> Vec<Delivery> {
        let lat = self.latency(log);
        if p.payload.is_stream() {
            let key = (p.src, p.dst);
            let at = (now + lat).max(self.last.get(&key).copied().unwrap_or(0));
            self.last.insert(key, at);
            self.stats.delivered += 1;
            return vec![Delivery { at, node: to, packet: p }];
        }
        let what = format!("{} -> {}", p.src, p.dst);
        if Self::strike(log, self.cfg.udp_loss, "udp loss") {
            self.stats.lost += 1;
            ledger.push(FaultEvent::new(now, "udp-loss", what));
            return Vec::new();
        }
        let mut at = now + lat;
        if Self::strike(log, self.cfg.udp_reorder, "udp reorder") {
            self.stats.reordered += 1;
            // Held back behind what is sent during the next few latencies.
            let extra = self.latency(log) * 3 + 1_000_000;
            at += extra;
            ledger.push(FaultEvent::new(now, "udp-reorder", format!("{what} held back {} µs", extra / 1000)));
        }
        let mut out = vec![Delivery { at, node: to, packet: p.clone() }];
        if Self::strike(log, self.cfg.udp_duplicate, "udp duplicate") {
            self.stats.duplicated += 1;
            let again = now + self.latency(log);
            ledger.push(FaultEvent::new(now, "udp-duplicate", what));
            out.push(Delivery { at: again, node: to, packet: p });
        }
        self.stats.delivered += out.len() as u64;
        out
    }

    /// Cuts every direction between different `groups` (node indices).
    pub fn partition(&mut self, groups: &[Vec<usize>]) {
        for (i, g) in groups.iter().enumerate() {
            for (j, h) in groups.iter().enumerate() {
                if i != j {
                    for &a in g {
                        for &b in h {
                            if a != b {
                                self.cut.insert((a, b));
                            }
                        }
                    }
                }
            }
        }
        self.epoch += 1;
    }

    /// Cuts traffic from each of `from` to each of `to`.
    pub fn cut_one_way(&mut self, from: &[usize], to: &[usize]) {
        for &a in from {
            for &b in to {
                if a != b {
                    self.cut.insert((a, b));
                }
            }
        }
        self.epoch += 1;
    }

    /// Removes every cut; the held TCP packets are delivered in order from `now`.
    pub fn heal(&mut self, log: &mut DecisionLog, ledger: &mut Vec<FaultEvent>, now: u64) -> Vec<Delivery> {
        self.cut.clear();
        self.epoch += 1;
        let held = std::mem::take(&mut self.held);
        let mut out = Vec::new();
        for ((_, to), packets) in held {
            for p in packets {
                out.extend(self.deliveries(log, ledger, now, to, p));
            }
        }
        out
    }

    /// Drops the held TCP packets between `a` and `b` (both directions): their connections were
    /// reset.
    pub fn drop_held(&mut self, a: usize, b: usize) {
        self.held.remove(&(a, b));
        self.held.remove(&(b, a));
    }

    /// True if the SYN `src -> dst` is still unanswered; it is then forgotten (and dropped if
    /// held), and the caller times the connect out.
    pub fn syn_expired(&mut self, src: SockAddr, dst: SockAddr) -> bool {
        if self.pending_syn.remove(&(src, dst)).is_none() {
            return false;
        }
        for packets in self.held.values_mut() {
            packets.retain(|p| !(p.payload == Payload::Syn && p.src == src && p.dst == dst));
        }
        true
    }

    /// The connect timeout in ns.
    pub fn connect_timeout_ns(&self) -> u64 {
        self.cfg.connect_timeout_ms.saturating_mul(1_000_000)
    }

    /// The partition reset timeout in ns.
    pub fn tcp_timeout_ns(&self) -> u64 {
        self.cfg.tcp_timeout_ms.saturating_mul(1_000_000)
    }
}
