//! The storage reference workloads: the crash sweep with crash states against the sweep right
//! after each durable write, in fresh `deja run --crash-sweep` processes side by side, and
//! exploration with the whole fault menu.

use std::path::Path;
use std::time::Instant;

use deja_kernel::ProgramSpec;
use deja_vmm::Settings;
use snafu::ResultExt;

use crate::cluster::campaign;
use crate::timing::{deja, output, summary};
use crate::{BenchError, ExploreSnafu, GuestSnafu};

/// The crash sweep with crash states against the sweep right after each durable write, on the
/// storage reference workloads, in fresh processes of `exe` side by side; and exploration with
/// the whole fault menu (otherwise under `settings`).
pub(crate) fn storage_figures(
    exe: &Path,
    dir: &Path,
    settings: &Settings,
    quick: bool,
) -> Result<serde_json::Value, BenchError> {
    let sweep = |program: &str, args: &[&str], old: bool| -> Result<serde_json::Value, BenchError> {
        let mut cmd = deja(exe, settings);
        cmd.args(["run", "--json", "--no-probe", "--crash-sweep"]);
        if old {
            cmd.arg("--after-writes-only");
        }
        cmd.arg(dir.join(program)).arg("--").args(args);
        let what = format!("the sweep of {program}");
        let start = Instant::now();
        let out = output(&mut cmd, exe, &what)?;
        let wall = start.elapsed().as_secs_f64();
        let v = summary(&out, &what)?;
        let points = v["crash_points"].as_f64().unwrap_or(0.0).max(1.0);
        Ok(serde_json::json!({
            "wall_s": wall, "verdict": v["verdict"], "crash_points": v["crash_points"],
            "states_tried": v["states_tried"], "distinct_states": v["distinct_states"], "restarts": v["restarts"],
            "states_per_s": v["states_tried"].as_f64().unwrap_or(0.0) / wall,
            "distinct_per_point": v["distinct_states"].as_f64().unwrap_or(0.0) / points,
        }))
    };
    let mut rows = Vec::new();
    for (program, args) in [
        ("kv", vec!["--variant", "fixed", "8"]),
        ("pagestore-fixed", vec!["6"]),
        ("pagestore-buggy", vec!["6"]),
        ("ackstore-fixed", vec!["6"]),
    ] {
        let states = sweep(program, &args, false)?;
        let old = sweep(program, &args, true)?;
        let path = dir.join(program);
        let image = std::fs::read(&path).context(GuestSnafu { path })?;
        let mut target = deja_explore::Target {
            spec: ProgramSpec::for_program(image, program, args.iter().map(|a| a.to_string()), 0),
            memory: deja_vmm::DEFAULT_MEMORY,
            path: program.to_string(),
            root: None,
        };
        target.spec.seed = 0;
        let out = std::env::temp_dir().join(format!("deja-bench-storage-{}-{program}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        let rounds = crate::sized(quick, 100);
        let cfg = campaign(rounds, &out, deja_explore::Mode::Faults, 1, settings);
        let start = Instant::now();
        deja_explore::explore(&target, &cfg, &mut |_| {})
            .with_context(|_| ExploreSnafu { what: format!("the {program} campaign with the whole fault menu") })?;
        let explore_s = start.elapsed().as_secs_f64();
        let _ = std::fs::remove_dir_all(&out);
        rows.push(serde_json::json!({
            "workload": program, "states": states, "after_writes_only": old,
            "explore_rounds_per_s_full_menu": rounds as f64 / explore_s,
        }));
    }
    Ok(serde_json::json!({ "rows": rows }))
}
