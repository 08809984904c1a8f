//! Later forks: the same campaigns with them and without, side by side, in one fresh process per
//! vDSO setting.

use std::path::Path;
use std::time::Instant;

use deja_vmm::Settings;
use serde_json::{json, Value};

use super::cluster::{bench_with_vdso, campaign, run_campaign};

/// The campaigns measured: name, program arguments (none: the register cluster), mode, rounds
/// and workers.
const CAMPAIGNS: [(&str, &[&str], deja_explore::Mode, u64, u64); 4] = [
    ("register", &[], deja_explore::Mode::Faults, 40, 1),
    ("register", &[], deja_explore::Mode::Faults, 48, 2),
    ("kv", &["--variant", "fixed", "6"], deja_explore::Mode::Both, 300, 1),
    ("bank", &["20"], deja_explore::Mode::Both, 300, 1),
];

/// A campaign's report without what the host's speed shapes (its wall times), where it was
/// written, or the host's settings (the vDSO's among them): two runs of one campaign give the
/// same.
fn fingerprint(c: &deja_explore_report::Campaign, out: &Path) -> Result<String, String> {
    let mut v = serde_json::to_value(c).map_err(|e| e.to_string())?;
    if let Some(o) = v.as_object_mut() {
        o.remove("wall_timeline");
        o.remove("wall_seconds");
        o.remove("host");
    }
    let text = v.to_string().replace(&out.display().to_string(), "OUT");
    Ok(blake3::hash(text.as_bytes()).to_hex().to_string())
}

/// `deja bench --late-forks-only`: each campaign with later forks off, then on (each worker
/// keeping [`deja_cluster::LATE_FORKS`]), under `settings`; each pair must be the same campaign.
pub(super) fn campaigns(guests: &Path, register: &Path, settings: &Settings) -> Result<Value, String> {
    let mut rows = Vec::new();
    for (name, args, mode, rounds, jobs) in CAMPAIGNS {
        let mut sides = Vec::new();
        for late in [0, deja_cluster::LATE_FORKS] {
            let out = std::env::temp_dir().join(format!("deja-bench-late-{}-{name}-{jobs}-{late}", std::process::id()));
            let _ = std::fs::remove_dir_all(&out);
            let cfg = deja_explore::CampaignConfig { late_forks: late, ..campaign(rounds, &out, mode, jobs, settings) };
            let profiled = deja_vmm::profile::snapshot();
            let start = Instant::now();
            let program = (!args.is_empty()).then(|| (guests.join(name), args));
            let c = run_campaign(program, register, &cfg)?;
            let secs = start.elapsed().as_secs_f64();
            let p = deja_vmm::profile::snapshot().since(&profiled);
            let print = fingerprint(&c, &out)?;
            let _ = std::fs::remove_dir_all(&out);
            if c.rounds != rounds {
                return Err(format!("the {name} campaign ran {} rounds of {rounds}", c.rounds));
            }
            sides.push(json!({
                "late_forks": late, "rounds_per_s": rounds as f64 / secs, "campaign": print,
                "kept": p.late_taken, "rounds_from_one": p.late_children, "forked_rounds": p.children,
                "decisions_skipped_per_round_from_one": p.late_skipped as f64 / p.late_children.max(1) as f64,
            }));
        }
        if sides[0]["campaign"] != sides[1]["campaign"] {
            return Err(format!(
                "the {name} campaign on {jobs} worker(s) differs with later forks: {} without, {} with",
                sides[0]["campaign"], sides[1]["campaign"]
            ));
        }
        rows.push(json!({
            "workload": name, "mode": mode.name(), "rounds": rounds, "jobs": jobs,
            "off": sides[0], "on": sides[1],
            "speedup": sides[1]["rounds_per_s"].as_f64().unwrap_or(0.0) / sides[0]["rounds_per_s"].as_f64().unwrap_or(1.0).max(1e-9),
        }));
    }
    Ok(json!({ "vdso": settings.vdso, "rows": rows }))
}

/// The campaigns of [`campaigns`] in processes of their own with the vDSO off and on
/// (`deja bench --late-forks-only` under `DEJA_VDSO=off` and `on`), alternated `repeat` times:
/// per campaign the medians of the four settings side by side, and what both together give
/// against neither.
pub(super) fn late_fork_figures(exe: &Path, guests: &Path, repeat: u32, settings: &Settings) -> Result<Value, String> {
    let (mut off, mut on) = (Vec::new(), Vec::new());
    for _ in 0..repeat.max(1) {
        off.push(bench_with_vdso(exe, guests, "--late-forks-only", "off", settings)?);
        on.push(bench_with_vdso(exe, guests, "--late-forks-only", "on", settings)?);
    }
    let median = |runs: &[Value], row: usize, side: &str| {
        let mut xs: Vec<f64> =
            runs.iter().map(|r| r["rows"][row][side]["rounds_per_s"].as_f64().unwrap_or(0.0)).collect();
        xs.sort_by(f64::total_cmp);
        xs[xs.len() / 2]
    };
    let mut rows = Vec::new();
    for (i, (name, _, mode, rounds, jobs)) in CAMPAIGNS.iter().enumerate() {
        let neither = median(&off, i, "off");
        let both = median(&on, i, "on");
        let same =
            |runs: &[Value]| runs.iter().all(|r| r["rows"][i]["on"]["campaign"] == off[0]["rows"][i]["on"]["campaign"]);
        rows.push(json!({
            "workload": name, "mode": mode.name(), "rounds": rounds, "jobs": jobs,
            "neither": neither, "late_forks": median(&off, i, "on"), "vdso": median(&on, i, "off"), "both": both,
            "both_speedup": both / neither.max(1e-9),
            "same_campaign_with_the_vdso": same(&off) && same(&on),
            "late": on[0]["rows"][i]["on"].clone(),
        }));
    }
    Ok(json!({ "repeat": repeat.max(1), "rows": rows }))
}
