//! Later forks: the same campaigns with them and without, side by side, in one fresh process per
//! vDSO setting.

use std::path::Path;
use std::time::Instant;

use deja_vmm::Settings;
use serde_json::{json, Value};
use snafu::{ensure, ResultExt};

use crate::cluster::{campaign, run_campaign, vdso_off_on};
use crate::timing::median_f64;
use crate::{BenchError, CampaignJsonSnafu, LateForksDifferSnafu, RoundsSnafu};

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
fn fingerprint(c: &deja_explore::Campaign, out: &Path, workload: &str) -> Result<String, BenchError> {
    let mut v = serde_json::to_value(c).context(CampaignJsonSnafu { workload })?;
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
pub(crate) fn campaigns(guests: &Path, register: &Path, settings: &Settings, quick: bool) -> Result<Value, BenchError> {
    let mut rows = Vec::new();
    for (name, args, mode, rounds, jobs) in CAMPAIGNS {
        let rounds = crate::sized(quick, rounds);
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
            let print = fingerprint(&c, &out, name)?;
            let _ = std::fs::remove_dir_all(&out);
            ensure!(c.rounds == rounds, RoundsSnafu { campaign: format!("{name} campaign"), ran: c.rounds, rounds });
            sides.push(json!({
                "late_forks": late, "rounds_per_s": rounds as f64 / secs, "campaign": print,
                "kept": p.late_taken, "rounds_from_one": p.late_children, "forked_rounds": p.children,
                "decisions_skipped_per_round_from_one": p.late_skipped as f64 / p.late_children.max(1) as f64,
            }));
        }
        ensure!(
            sides[0]["campaign"] == sides[1]["campaign"],
            LateForksDifferSnafu {
                workload: name,
                jobs,
                without: sides[0]["campaign"].to_string(),
                with: sides[1]["campaign"].to_string(),
            }
        );
        rows.push(json!({
            "workload": name, "mode": mode.name(), "rounds": rounds, "jobs": jobs,
            "off": sides[0], "on": sides[1],
            "speedup": sides[1]["rounds_per_s"].as_f64().unwrap_or(0.0) / sides[0]["rounds_per_s"].as_f64().unwrap_or(1.0).max(1e-9),
        }));
    }
    Ok(json!({ "vdso": settings.vdso, "rows": rows }))
}

/// The campaigns of [`campaigns`] in processes of `exe` of their own with the vDSO off and on
/// (`deja bench --late-forks-only` under `DEJA_VDSO=off` and `on`), alternated `repeat` times:
/// per campaign the medians of the four settings side by side, and what both together give
/// against neither.
pub(crate) fn late_fork_figures(
    exe: &Path,
    guests: &Path,
    repeat: u32,
    settings: &Settings,
    quick: bool,
) -> Result<Value, BenchError> {
    let (off, on) = vdso_off_on(exe, guests, "--late-forks-only", repeat, settings, quick)?;
    Ok(late_summary(repeat, &off, &on))
}

/// The later-fork figures from the [`campaigns`] of each run with the vDSO `off` and `on` (as
/// many of each, at least one): per campaign, the median rate of each of the four settings,
/// whether every run gave the first one's campaign, and the first run with both's counts.
fn late_summary(repeat: u32, off: &[Value], on: &[Value]) -> Value {
    let median = |runs: &[Value], row: usize, side: &str| {
        median_f64(runs.iter().map(|r| r["rows"][row][side]["rounds_per_s"].as_f64().unwrap_or(0.0)).collect())
    };
    let mut rows = Vec::new();
    for (i, (name, _, mode, _, jobs)) in CAMPAIGNS.iter().enumerate() {
        // The rounds each run took (a tenth of the campaign's under `--quick`).
        let rounds = &off[0]["rows"][i]["rounds"];
        let neither = median(off, i, "off");
        let both = median(on, i, "on");
        let same =
            |runs: &[Value]| runs.iter().all(|r| r["rows"][i]["on"]["campaign"] == off[0]["rows"][i]["on"]["campaign"]);
        rows.push(json!({
            "workload": name, "mode": mode.name(), "rounds": rounds, "jobs": jobs,
            "neither": neither, "late_forks": median(off, i, "on"), "vdso": median(on, i, "off"), "both": both,
            "both_speedup": both / neither.max(1e-9),
            "same_campaign_with_the_vdso": same(off) && same(on),
            "late": on[0]["rows"][i]["on"].clone(),
        }));
    }
    json!({ "repeat": repeat.max(1), "rows": rows })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One run of [`campaigns`], every campaign at the rates given (without later forks, with
    /// them) and with the fingerprint given.
    fn run(off_rate: f64, on_rate: f64, campaign: &str) -> Value {
        let side =
            |late: u64, rate: f64| json!({ "late_forks": late, "rounds_per_s": rate, "campaign": campaign, "kept": 2 });
        let rows: Vec<Value> = CAMPAIGNS
            .iter()
            .map(|c| json!({ "rounds": c.3, "off": side(0, off_rate), "on": side(4, on_rate) }))
            .collect();
        json!({ "rows": rows })
    }

    /// Each campaign's row holds the four settings' medians, what both give against neither, and
    /// whether the vDSO changed the campaign.
    #[test]
    fn the_later_fork_figures_put_the_four_settings_side_by_side() {
        let off = [run(10.0, 20.0, "a"), run(12.0, 22.0, "a"), run(11.0, 21.0, "a")];
        let on = [run(30.0, 60.0, "a"), run(32.0, 66.0, "a"), run(31.0, 64.0, "a")];
        let v = late_summary(3, &off, &on);
        assert_eq!(v["repeat"], 3);
        let rows = v["rows"].as_array().unwrap();
        assert_eq!(rows.len(), CAMPAIGNS.len());
        let r = &rows[2];
        assert_eq!(
            (r["workload"].as_str(), r["rounds"].as_u64(), r["jobs"].as_u64()),
            (Some("kv"), Some(300), Some(1))
        );
        assert_eq!(r["mode"], deja_explore::Mode::Both.name());
        assert_eq!((r["neither"].as_f64(), r["late_forks"].as_f64()), (Some(11.0), Some(21.0)));
        assert_eq!((r["vdso"].as_f64(), r["both"].as_f64()), (Some(31.0), Some(64.0)));
        assert_eq!(r["both_speedup"].as_f64(), Some(64.0 / 11.0));
        assert_eq!(r["same_campaign_with_the_vdso"], true);
        assert_eq!(r["late"]["kept"], 2);
        let changed = [run(30.0, 60.0, "a"), run(30.0, 60.0, "b")];
        assert_eq!(late_summary(2, &off, &changed)["rows"][0]["same_campaign_with_the_vdso"], false);
    }
}
