//! The simulated network between nodes: routing, latency, UDP loss/duplication/reordering,
//! partitions and what is held back while they last.
//!
//! The network sees [`Packet`]s from each node's outbox and turns each into zero or more
//! deliveries at a virtual time. It never touches the host network: addresses are the ones in
//! the cluster file and nothing else exists. The fault model that drives it is documented in
//! [`crate::sim`].
//!
//! Every fate of a message (its latency, and for a datagram its loss, reordering and
//! duplication) is a decision of the cluster's log taken with the message's [`Meaning`]: its
//! connection and its place in that connection's order. A log [keyed by
//! meaning](deja_kernel::DecisionLog::key_by_meaning) (what `deja check` replays a cluster
//! failure with) then gives each message the same fates whatever else was sent: a candidate
//! that sends one more message shifts the fates of the later messages of that one connection
//! direction, and of nothing else.

use std::collections::{BTreeMap, BTreeSet};

use deja_kernel::net::{Packet, Payload, SockAddr};
use deja_kernel::{DecisionLog, DecisionPoint};

use crate::config::NetworkConfig;
use crate::FaultEvent;

/// Most latency steps a latency decision chooses among (the range is split evenly).
const LATENCY_STEPS: u64 = 1000;
/// Parts per million.
const PPM: u64 = 1_000_000;

/// Probability `p` in parts per million.
fn ppm(p: f64) -> u64 {
    (p * PPM as f64).round() as u64
}

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

/// What a message's fates are keyed by: its flow and its place in the flow's order.
///
/// A TCP flow is one direction of a connection, named by the client node, the server node and
/// port, and which of the client's connections to that port it is (the ephemeral port is left
/// out, so a candidate that opens one more connection elsewhere does not rename it). A datagram
/// flow is (sending node, receiving node, destination port).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Flow {
    /// The client node (for a datagram: the sender).
    pub client: usize,
    /// The server node (for a datagram: the receiver).
    pub server: usize,
    /// The server's port (for a datagram: the destination port).
    pub port: u16,
    /// Which of the client's connections to that port (`u64::MAX`: a segment of no known
    /// connection; datagrams: 0).
    pub ordinal: u64,
    /// The server-to-client direction.
    pub reply: bool,
    /// A datagram flow.
    pub datagram: bool,
}

/// A message's [`Flow`] and its index in that flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meaning {
    /// The flow.
    pub flow: Flow,
    /// The message's index in the flow (0 for the first).
    pub index: u64,
}

impl Meaning {
    /// The bytes a decision of this message keys on; `draw` tells apart the decisions of one
    /// message (its latency, the extra delay of a reordering, the duplicate's latency, …).
    fn key(&self, draw: u8) -> [u8; 31] {
        let f = &self.flow;
        let mut out = [0u8; 31];
        out[..4].copy_from_slice(&(f.client as u32).to_le_bytes());
        out[4..8].copy_from_slice(&(f.server as u32).to_le_bytes());
        out[8..10].copy_from_slice(&f.port.to_le_bytes());
        out[10..18].copy_from_slice(&f.ordinal.to_le_bytes());
        out[18] = u8::from(f.reply) | u8::from(f.datagram) << 1;
        out[19..27].copy_from_slice(&self.index.to_le_bytes());
        out[27] = draw;
        out
    }
}

/// The draws of one message (see [`Meaning::key`]).
mod draw {
    pub const LATENCY: u8 = 0;
    pub const LOSS: u8 = 1;
    pub const REORDER: u8 = 2;
    pub const REORDER_DELAY: u8 = 3;
    pub const DUPLICATE: u8 = 4;
    pub const DUPLICATE_LATENCY: u8 = 5;
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
    /// TCP packets held by a cut, per direction, in order, with their meanings.
    held: BTreeMap<(usize, usize), Vec<(Packet, Meaning)>>,
    /// The flow of each TCP connection direction (named at its SYN).
    flows: BTreeMap<(SockAddr, SockAddr), Flow>,
    /// Connections opened so far per (client node, server node, server port).
    opened: BTreeMap<(usize, usize, u16), u64>,
    /// Messages sent so far per flow.
    sent_on: BTreeMap<Flow, u64>,
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
            flows: BTreeMap::new(),
            opened: BTreeMap::new(),
            sent_on: BTreeMap::new(),
            last: BTreeMap::new(),
            pending_syn: BTreeMap::new(),
            stats: NetStats::default(),
        }
    }

    /// The node `a` names: by its IPv4 address, or its IPv6 one (see
    /// [`deja_kernel::net::NODE_PREFIX6`]).
    pub fn node_of(&self, a: SockAddr) -> Option<usize> {
        a.node_v4().and_then(|ip| self.addrs.get(&ip).copied())
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

    /// The meaning of a packet `from` node sends to node `to`: its flow (named here for a
    /// SYN) and its index in it.
    fn meaning(&mut self, from: usize, to: usize, p: &Packet) -> Meaning {
        let flow = if !p.payload.is_stream() {
            Flow { client: from, server: to, port: p.dst.port, ordinal: 0, reply: false, datagram: true }
        } else if p.payload == Payload::Syn {
            let n = self.opened.entry((from, to, p.dst.port)).or_default();
            let forward =
                Flow { client: from, server: to, port: p.dst.port, ordinal: *n, reply: false, datagram: false };
            *n += 1;
            self.flows.insert((p.src, p.dst), forward);
            self.flows.insert((p.dst, p.src), Flow { reply: true, ..forward });
            forward
        } else {
            self.flows.get(&(p.src, p.dst)).copied().unwrap_or(Flow {
                client: from,
                server: to,
                port: p.dst.port,
                ordinal: u64::MAX,
                reply: false,
                datagram: false,
            })
        };
        let n = self.sent_on.entry(flow).or_default();
        let index = *n;
        *n += 1;
        Meaning { flow, index }
    }

    /// A latency draw, in ns.
    fn latency(&self, log: &mut DecisionLog, meaning: &Meaning, draw: u8) -> u64 {
        let [lo, hi] = self.cfg.latency_ms;
        let (lo, hi) = ((lo * 1e6) as u64, (hi * 1e6) as u64);
        if hi <= lo {
            return lo;
        }
        let steps = ((hi - lo) / 1000).clamp(1, LATENCY_STEPS);
        let k = log.decide_keyed(DecisionPoint::NetworkLatency, steps + 1, &meaning.key(draw));
        lo + (hi - lo) * k / steps
    }

    /// Decides whether a fault of probability `p` strikes, drawn from the log's stream (a
    /// random fault of the schedule: it has no message to be keyed by).
    pub(crate) fn strike(log: &mut DecisionLog, p: f64, point: DecisionPoint) -> bool {
        p > 0.0 && log.decide(point, PPM) < ppm(p)
    }

    /// Decides whether a fault of probability `p` strikes a message, keyed by its `meaning`.
    fn strike_keyed(log: &mut DecisionLog, p: f64, point: DecisionPoint, meaning: &[u8]) -> bool {
        p > 0.0 && log.decide_keyed(point, PPM, meaning) < ppm(p)
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
        let Some(to) = self.node_of(p.dst) else {
            self.stats.unroutable += 1;
            return Vec::new();
        };
        let meaning = self.meaning(from, to, &p);
        if self.is_cut(from, to) {
            if p.payload == Payload::Rst {
                // The sender gave up on a connection whose SYN never got through: nothing
                // reached the peer, so nothing is retransmitted at the heal.
                let q = self.held.entry((from, to)).or_default();
                let before = q.len();
                q.retain(|(h, _)| !(h.payload == Payload::Syn && h.src == p.src && h.dst == p.dst));
                if q.len() < before {
                    return Vec::new();
                }
            }
            if p.payload.is_stream() {
                self.stats.held += 1;
                self.held.entry((from, to)).or_default().push((p, meaning));
            } else {
                self.stats.cut_datagrams += 1;
            }
            return Vec::new();
        }
        self.deliveries(log, ledger, now, to, p, &meaning)
    }

    fn deliveries(
        &mut self,
        log: &mut DecisionLog,
        ledger: &mut Vec<FaultEvent>,
        now: u64,
        to: usize,
        p: Packet,
        meaning: &Meaning,
    ) -> Vec<Delivery> {
        let lat = self.latency(log, meaning, draw::LATENCY);
        if p.payload.is_stream() {
            let key = (p.src, p.dst);
            let at = (now + lat).max(self.last.get(&key).copied().unwrap_or(0));
            self.last.insert(key, at);
            self.stats.delivered += 1;
            return vec![Delivery { at, node: to, packet: p }];
        }
        let what = format!("{} -> {}", p.src, p.dst);
        if Self::strike_keyed(log, self.cfg.udp_loss, DecisionPoint::UdpLoss, &meaning.key(draw::LOSS)) {
            self.stats.lost += 1;
            ledger.push(FaultEvent::new(now, "udp-loss", what));
            return Vec::new();
        }
        let mut at = now + lat;
        if Self::strike_keyed(log, self.cfg.udp_reorder, DecisionPoint::UdpReorder, &meaning.key(draw::REORDER)) {
            self.stats.reordered += 1;
            // Held back behind what is sent during the next few latencies.
            let extra = self.latency(log, meaning, draw::REORDER_DELAY) * 3 + 1_000_000;
            at += extra;
            ledger.push(FaultEvent::new(now, "udp-reorder", format!("{what} held back {} µs", extra / 1000)));
        }
        let mut out = vec![Delivery { at, node: to, packet: p.clone() }];
        if Self::strike_keyed(log, self.cfg.udp_duplicate, DecisionPoint::UdpDuplicate, &meaning.key(draw::DUPLICATE)) {
            self.stats.duplicated += 1;
            let again = now + self.latency(log, meaning, draw::DUPLICATE_LATENCY);
            ledger.push(FaultEvent::new(now, "udp-duplicate", what));
            out.push(Delivery { at: again, node: to, packet: p });
        }
        self.stats.delivered += out.len() as u64;
        out
    }

    /// Cuts every direction between different `groups` (node indices). A node in no group is
    /// not cut: it keeps reaching, and being reached by, every node.
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

    /// The TCP packets held by a cut now: (from node, to node, packet), by direction, in order.
    pub fn held_packets(&self) -> Vec<(usize, usize, &Packet)> {
        self.held.iter().flat_map(|(&(from, to), q)| q.iter().map(move |(p, _)| (from, to, p))).collect()
    }

    /// Removes every cut; the held TCP packets are delivered in order from `now`.
    pub fn heal(&mut self, log: &mut DecisionLog, ledger: &mut Vec<FaultEvent>, now: u64) -> Vec<Delivery> {
        self.cut.clear();
        self.epoch += 1;
        let held = std::mem::take(&mut self.held);
        let mut out = Vec::new();
        for ((_, to), packets) in held {
            for (p, meaning) in packets {
                out.extend(self.deliveries(log, ledger, now, to, p, &meaning));
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
            packets.retain(|(p, _)| !(p.payload == Payload::Syn && p.src == src && p.dst == dst));
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

#[cfg(test)]
mod tests {
    use super::*;

    const A: [u8; 4] = [10, 0, 0, 1];
    const B: [u8; 4] = [10, 0, 0, 2];
    const C: [u8; 4] = [10, 0, 0, 3];

    fn addr(ip: [u8; 4], port: u16) -> SockAddr {
        SockAddr::new(ip, port)
    }

    fn packet(src: SockAddr, dst: SockAddr, payload: Payload) -> Packet {
        Packet { src, dst, payload }
    }

    fn lossy() -> NetworkConfig {
        NetworkConfig {
            latency_ms: [1.0, 50.0],
            udp_loss: 0.3,
            udp_duplicate: 0.2,
            udp_reorder: 0.2,
            ..NetworkConfig::default()
        }
    }

    /// A network over nodes A, B, C and a log keyed by meaning (or not).
    fn world(keyed: bool) -> (Network, DecisionLog) {
        let mut log = DecisionLog::new("network test", 7);
        if keyed {
            log.key_by_meaning("network test by meaning", 7);
        }
        (Network::new(lossy(), &[A, B, C]), log)
    }

    /// Traffic on two connections (A→B:80 and A→C:90, each a SYN and `n` data segments, and
    /// their replies) and a datagram flow A→C:53, interleaved; `extra` more data segments go on
    /// the first connection before anything else. Returns every delivery, tagged by flow.
    fn traffic(keyed: bool, extra: usize, n: usize) -> BTreeMap<&'static str, Vec<(u64, Payload)>> {
        let (mut net, mut log) = world(keyed);
        let mut ledger = Vec::new();
        let (ab, ba) = (addr(A, 40000 + extra as u16), addr(B, 80));
        let (ac, ca) = (addr(A, 40100 + extra as u16), addr(C, 90));
        let mut out: BTreeMap<&'static str, Vec<(u64, Payload)>> = BTreeMap::new();
        let mut send =
            |net: &mut Network, log: &mut DecisionLog, tag: &'static str, now: u64, from: usize, p: Packet| {
                for d in net.route(log, &mut ledger, now, from, p) {
                    out.entry(tag).or_default().push((d.at - now, d.packet.payload));
                }
            };
        send(&mut net, &mut log, "ab", 0, 0, packet(ab, ba, Payload::Syn));
        send(&mut net, &mut log, "ba", 0, 1, packet(ba, ab, Payload::SynAck));
        for k in 0..extra {
            send(&mut net, &mut log, "extra", 1, 0, packet(ab, ba, Payload::Data(vec![k as u8])));
        }
        send(&mut net, &mut log, "ac", 2, 0, packet(ac, ca, Payload::Syn));
        send(&mut net, &mut log, "ca", 2, 2, packet(ca, ac, Payload::SynAck));
        for i in 0..n as u64 {
            // 100 ms apart: more than the latest latency, so TCP's order holds nothing back.
            let t = 100_000_000 + i * 100_000_000;
            send(&mut net, &mut log, "ab", t, 0, packet(ab, ba, Payload::Data(vec![i as u8])));
            send(&mut net, &mut log, "ac", t, 0, packet(ac, ca, Payload::Data(vec![i as u8])));
            send(&mut net, &mut log, "ca", t + 1, 2, packet(ca, ac, Payload::Ack(i)));
            send(
                &mut net,
                &mut log,
                "udp",
                t + 2,
                0,
                packet(addr(A, 5353), addr(C, 53), Payload::Datagram(vec![i as u8])),
            );
        }
        out
    }

    #[test]
    fn keyed_fates_of_other_connections_survive_one_more_message() {
        let (base, more) = (traffic(true, 0, 40), traffic(true, 1, 40));
        // One more segment on A→B (on a different ephemeral port, too): the other flows'
        // fates are those of the base, message for message.
        for flow in ["ac", "ca", "udp", "ba"] {
            assert_eq!(base[flow], more[flow], "flow {flow}");
        }
        // On A→B itself each later message takes the fate of the next place in its order.
        let latencies = |v: &[(u64, Payload)]| v.iter().map(|d| d.0).collect::<Vec<_>>();
        assert_eq!(latencies(&base["ab"][2..]), latencies(&more["ab"][1..40]), "A→B shifted by one place");
        // The fates are not constant: latencies and datagram losses vary.
        let lat: BTreeSet<u64> = base["ac"].iter().map(|d| d.0).collect();
        assert!(lat.len() > 10, "latencies {lat:?}");
        assert!(base["udp"].len() != 40, "some datagrams lost or duplicated: {}", base["udp"].len());
    }

    #[test]
    fn stream_fates_shift_with_one_more_message() {
        // The same change with fates from the stream moves the other connections' fates: what
        // keying by meaning is for.
        let (base, more) = (traffic(false, 0, 40), traffic(false, 1, 40));
        assert_ne!(base["ac"], more["ac"]);
    }

    #[test]
    fn keyed_fates_depend_on_the_seed_and_repeat() {
        assert_eq!(traffic(true, 0, 30), traffic(true, 0, 30));
        let (mut net, mut log) = world(true);
        let mut other = DecisionLog::new("network test", 7);
        other.key_by_meaning("network test by meaning", 8);
        let (mut net2, mut ledger) = (net.clone(), Vec::new());
        let (a, b) = (addr(A, 40000), addr(C, 90));
        let mut first = Vec::new();
        let mut second = Vec::new();
        for i in 0..30u8 {
            first.extend(net.route(&mut log, &mut ledger, 0, 0, packet(a, b, Payload::Datagram(vec![i]))));
            second.extend(net2.route(&mut other, &mut ledger, 0, 0, packet(a, b, Payload::Datagram(vec![i]))));
        }
        assert_ne!(first, second, "another seed, other fates");
    }

    #[test]
    fn overrides_still_apply_by_index_when_keyed() {
        let (mut net, mut log) = world(true);
        let mut ledger = Vec::new();
        let (a, b) = (addr(A, 40000), addr(B, 80));
        net.route(&mut log, &mut ledger, 0, 0, packet(a, b, Payload::Syn));
        let first = log.records()[0].clone();
        assert_eq!(first.point, "network latency");
        let (mut net, mut log) = world(true);
        log.set_overrides(BTreeMap::from([(0, first.options - 1)]));
        let d = net.route(&mut log, &mut ledger, 0, 0, packet(a, b, Payload::Syn));
        assert_eq!(d[0].at, 50_000_000, "the override picked the highest latency");
    }

    #[test]
    fn a_partition_holds_tcp_in_order_and_drops_datagrams() {
        let (mut net, mut log) = world(false);
        let mut ledger = Vec::new();
        let (a, b) = (addr(A, 40000), addr(B, 80));
        net.partition(&[vec![0], vec![1, 2]]);
        assert!(net.is_cut(0, 1) && net.is_cut(2, 0) && !net.is_cut(1, 2));
        for i in 0..5u8 {
            assert!(net.route(&mut log, &mut ledger, 0, 0, packet(a, b, Payload::Data(vec![i]))).is_empty());
        }
        assert!(net.route(&mut log, &mut ledger, 0, 0, packet(a, b, Payload::Datagram(vec![9]))).is_empty());
        assert_eq!((net.stats.held, net.stats.cut_datagrams), (5, 1));
        let healed = net.heal(&mut log, &mut ledger, 1_000);
        let order: Vec<_> = healed.iter().map(|d| d.packet.payload.clone()).collect();
        assert_eq!(order, (0..5u8).map(|i| Payload::Data(vec![i])).collect::<Vec<_>>());
        assert!(healed.windows(2).all(|w| w[0].at <= w[1].at), "TCP stays in order");
        assert!(!net.partitioned());
    }

    #[test]
    fn a_node_no_group_names_reaches_both_sides_of_a_partition() {
        // Members 0, 1, 2 and a client 3: [2] | [0, 1] cuts member 2 off from its peers, and the
        // client, in no group, still reaches all three and is reached by them.
        let mut net = Network::new(lossy(), &[A, B, C, [10, 0, 0, 4]]);
        net.partition(&[vec![2], vec![0, 1]]);
        for (a, b) in [(2, 0), (2, 1), (0, 2), (1, 2)] {
            assert!(net.is_cut(a, b), "{a} -> {b}");
        }
        assert!(!net.is_cut(0, 1) && !net.is_cut(1, 0), "one group's members reach each other");
        for m in 0..3 {
            assert!(!net.is_cut(3, m) && !net.is_cut(m, 3), "client <-> {m}");
        }
        assert_eq!(net.cuts().len(), 4);
        // Its traffic goes through while the cut holds member 2's.
        let mut log = DecisionLog::new("network test", 7);
        let mut ledger = Vec::new();
        let client = addr([10, 0, 0, 4], 40000);
        for to in [A, B, C] {
            let d = net.route(&mut log, &mut ledger, 0, 3, packet(client, addr(to, 80), Payload::Data(vec![1])));
            assert_eq!(d.len(), 1, "client -> {to:?}");
        }
        assert!(net
            .route(&mut log, &mut ledger, 0, 2, packet(addr(C, 80), addr(A, 80), Payload::Data(vec![2])))
            .is_empty());
        assert_eq!(net.stats.held, 1);
    }

    #[test]
    fn an_unanswered_syn_expires_once_and_leaves_the_queue() {
        let (mut net, mut log) = world(false);
        let mut ledger = Vec::new();
        let (a, b) = (addr(A, 40000), addr(B, 80));
        net.cut_one_way(&[0], &[1]);
        net.route(&mut log, &mut ledger, 0, 0, packet(a, b, Payload::Syn));
        assert!(net.syn_expired(a, b));
        assert!(!net.syn_expired(a, b), "a second expiry finds nothing");
        assert!(net.heal(&mut log, &mut ledger, 5).is_empty(), "the SYN is not delivered at the heal");
        assert_eq!(net.route(&mut log, &mut ledger, 0, 0, packet(a, addr([1, 2, 3, 4], 80), Payload::Syn)), vec![]);
        assert_eq!(net.stats.unroutable, 1);
    }
}
