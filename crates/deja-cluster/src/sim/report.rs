//! The report of a cluster run: the nodes still running stopped, each node's lives and output,
//! the ledger, the decisions and the digest over them.

use super::*;

impl<M: Machine> Sim<M> {
    /// The report of the run; the nodes still running are stopped (their fork VMs go back).
    pub(super) fn report(&mut self, outcome: Outcome, wall_ns: u64) -> ClusterReport {
        let end = self.now;
        let why = match outcome {
            Outcome::TimeLimit => "still running when the time budget ran out",
            _ => "still running when the cluster run ended",
        };
        for i in 0..self.nodes.len() {
            if let Some(mut live) = self.nodes[i].live.take() {
                let status = sigkill(why);
                let report = live.kernel.finish(live.vm.memory(), status);
                let name = self.nodes[i].cfg.name.clone();
                for (kind, point) in injected_errors(&report) {
                    self.note(&kind, format!("{name} {point}"));
                }
                self.nodes[i].lives.push(report);
                self.retire(i, live);
            }
        }
        let mut h = blake3::Hasher::new();
        h.update(b"deja cluster digest v1");
        for n in &self.nodes {
            h.update(n.cfg.name.as_bytes());
            for l in &n.lives {
                h.update(l.digest.as_bytes());
            }
        }
        for d in self.log.records() {
            h.update(&d.index.to_le_bytes());
            h.update(&d.choice.to_le_bytes());
        }
        for f in &self.ledger {
            h.update(&f.time_ns.to_le_bytes());
            h.update(f.kind.as_bytes());
            h.update(f.detail.as_bytes());
        }
        let template = self.template.as_ref().map(|t| t.composer.report(&self.nodes[t.node].cfg.name));
        let nodes = std::mem::take(&mut self.nodes)
            .into_iter()
            .map(|n| NodeReport {
                name: n.cfg.name.clone(),
                address: std::net::Ipv4Addr::from(n.cfg.address).to_string(),
                waited: n.cfg.wait,
                ended: match n.state {
                    State::Exited => "exited",
                    State::Down => "down",
                    _ => "running",
                }
                .to_string(),
                lives: n.lives,
                stdout: String::from_utf8_lossy(&n.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&n.stderr).into_owned(),
                vm_exits: n.exits,
                host_run_ns: n.host_run_ns,
                min_exit_ns: if n.min_exit_ns == u64::MAX { 0 } else { n.min_exit_ns },
                host_cores: n.host_cores,
                storage_faults: self.cfg.storage.targets_node(&n.cfg.name),
                blocks: n.blocks,
            })
            .collect();
        ClusterReport {
            schema: "deja.cluster-report/1".into(),
            outcome,
            seed: self.cfg.seed,
            virtual_time_ns: end,
            wall_ns,
            digest: h.finalize().to_hex().to_string(),
            nodes,
            faults: std::mem::take(&mut self.ledger),
            decisions: self.log.records().to_vec(),
            network: self.net.stats.clone(),
            binary_hashes: self.cfg.binary_hashes.clone(),
            crashes: std::mem::take(&mut self.crashes),
            template,
            cuts: std::mem::take(&mut self.cuts),
        }
    }
}
