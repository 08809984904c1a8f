//! `deja inspect FILE`: what a deja artifact holds — a snapshot (binary envelope) or one of the
//! JSON artifacts (bug file, capsule, certificate, reports), after verifying what it carries.

use std::path::PathBuf;

use deja_format::Kind;
use deja_vmm::Snapshot;

use crate::exit::Exit;
use crate::run::Failure;

/// Arguments of `deja inspect`.
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// Print as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// The artifact.
    pub file: PathBuf,
}

fn describe(args: &InspectArgs, settings: &deja_vmm::Settings) -> Result<serde_json::Value, Failure> {
    let host = |recorded| host(recorded, settings);
    let bytes = std::fs::read(&args.file).map_err(|e| {
        let code = if e.kind() == std::io::ErrorKind::NotFound { Exit::NotFound } else { Exit::NotLoadable };
        Failure::new(code, format!("cannot read {}: {e}", args.file.display()))
    })?;
    if !bytes.starts_with(&deja_format::MAGIC) {
        if let Some(v) = describe_json(&args.file, &bytes, settings)? {
            return Ok(v);
        }
    }
    let env = deja_format::decode(&bytes)
        .map_err(|e| Failure::new(Exit::NotLoadable, format!("{}: {e}", args.file.display())))?;
    let mut v = serde_json::json!({
        "file": args.file.display().to_string(),
        "kind": env.kind.name(),
        "id": env.id(),
        "schema": env.schema,
        "file_bytes": bytes.len(),
        "payload_bytes": env.payload.len(),
    });
    match env.kind {
        Kind::Snapshot => {
            let snap = Snapshot::from_artifact(&bytes)
                .map_err(|e| Failure::new(Exit::NotLoadable, format!("{}: {e}", args.file.display())))?;
            v["snapshot"] = serde_json::json!({
                "program_blake3": snap.meta.program_blake3,
                "exe_path": snap.meta.exe_path,
                "argv": snap.meta.argv,
                "seed": snap.meta.seed,
                "deja_version": snap.meta.deja_version,
                "syscall_index": snap.meta.syscall_index,
                "virtual_time_ns": snap.meta.virtual_time_ns,
                "memory_bytes": snap.memory_size,
                "ram_image_bytes": snap.ram.len(),
                "free_frames": snap.frames.free.len(),
                "page_table_frames": snap.frames.pt_frames.len(),
                "kernel_state_bytes": snap.kernel.len(),
                "rip": snap.vcpu.regs.rip,
                "rsp": snap.vcpu.regs.rsp,
                "syscall_nr": snap.vcpu.regs.rax,
                "fs_base": snap.fs_base,
                "msrs": snap.vcpu.msrs.len(),
                "host": host(snap.meta.host.clone()),
            });
        }
    }
    Ok(v)
}

/// The host CPU fingerprint an artifact records, and how it compares with this host's under
/// `settings`.
fn host(recorded: Option<deja_vmm::Fingerprint>, settings: &deja_vmm::Settings) -> serde_json::Value {
    let Some(f) = recorded else { return "not recorded (written by an older deja)".into() };
    match deja_vmm::identity::compare_recorded(Some(&f), settings) {
        None => format!("{} (the same as this host's)", f.id).into(),
        Some(note) => format!("{}: {note}", f.id).into(),
    }
}

fn recorded(v: &serde_json::Value) -> Option<deja_vmm::Fingerprint> {
    serde_json::from_value(v.clone()).ok()
}

/// The JSON artifacts (bug files, capsules, certificates, reports): their schema and what they
/// say, after the checks each one carries (a capsule's content address, a certificate's chain).
fn describe_json(
    path: &std::path::Path,
    bytes: &[u8],
    settings: &deja_vmm::Settings,
) -> Result<Option<serde_json::Value>, Failure> {
    let host = |recorded| host(recorded, settings);
    let shown = path.display().to_string();
    let v = match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(v) => v,
        Err(e) if bytes.trim_ascii_start().starts_with(b"{") => {
            return Err(Failure::new(
                Exit::NotLoadable,
                format!("{shown}: the json check failed: not whole JSON ({e})"),
            ))
        }
        Err(_) => return Ok(None),
    };
    let schema = v["schema"].as_str().unwrap_or_default().to_string();
    let refuse =
        |e: String| Failure::new(Exit::NotLoadable, if e.starts_with(&shown) { e } else { format!("{shown}: {e}") });
    let family = schema.split('/').next().unwrap_or_default();
    let summary = match family {
        "deja.bug" => {
            let b = deja_explore::BugFile::read(path).map_err(|e| refuse(e.to_string()))?;
            serde_json::json!({
                "signature": b.signature, "program": b.program, "seed": b.seed, "input": b.input,
                "decisions": b.decisions.len(), "digest": b.digest, "reproduce": b.reproduce, "host": host(b.host),
            })
        }
        "deja.campaign-checkpoint" => {
            let (c, _) = deja_explore::campaign::CHECKPOINT_SCHEMA.open(path).map_err(|e| refuse(e.to_string()))?;
            serde_json::json!({
                "kind": c["kind"], "subject": c["subject"], "seed": c["seed"], "jobs": c["jobs"],
                "rounds": c["books"]["round"], "corpus": c["corpus"].as_array().map(|e| e.len()),
            })
        }
        "deja.cluster-bug" => {
            let b = deja_explore::ClusterBug::read(path).map_err(|e| refuse(e.to_string()))?;
            let schedule: Option<Vec<String>> =
                b.input.schedule.as_ref().map(|s| s.iter().map(deja_explore::cluster::describe_fault).collect());
            serde_json::json!({
                "signature": b.signature, "cluster": b.cluster, "seed": b.input.seed,
                "overrides": b.input.overrides.len(), "schedule": schedule, "faults": b.faults.len(),
                "decisions": b.decisions, "digest": b.digest, "reproduce": b.reproduce, "host": host(b.host),
            })
        }
        "deja.cluster-report/1" => {
            serde_json::json!({ "outcome": v["outcome"], "digest": v["digest"], "nodes": v["nodes"].as_array().map(|n| n.len()) })
        }
        "deja.capsule" => {
            let c = deja_judge::Capsule::read(path).map_err(|e| refuse(e.to_string()))?;
            serde_json::json!({ "id": c.id, "signature": c.signature, "trigger": c.trigger, "base_blake3": c.base_blake3, "timeline": c.timeline, "crash_model": c.faults.crash_model, "models": c.models, "host": host(c.host) })
        }
        "deja.certificate" => {
            let c = deja_judge::Certificate::read(path).map_err(|e| refuse(e.to_string()))?;
            c.verify().map_err(|e| refuse(e.to_string()))?;
            serde_json::json!({ "verdict": c.verdict, "exit_code": c.exit_code, "checks": c.checks.len(), "capsule_id": c.capsule_id, "crash_model": c.crash_model, "models": c.models, "certificate_hash": c.certificate_hash, "host": host(c.host) })
        }
        "deja.crash-sweep/2" | "deja.crash-sweep/3" => {
            serde_json::json!({ "verdict": v["verdict"], "model": v["model"], "fail_on": v["fail_on"], "failures": v["failures"], "hazards": v["hazards"], "restarts": v["restarts"], "digest": v["digest"] })
        }
        "deja.run-report/1" | "deja.crash-sweep/1" => {
            serde_json::json!({ "digest": v["digest"], "host": host(recorded(&v["host"]["fingerprint"])) })
        }
        _ if v["schema"] == "deja.explore-report/1" => {
            serde_json::json!({ "rounds": v["campaign"]["rounds"], "bugs": v["campaign"]["bugs"].as_array().map(|b| b.len()) })
        }
        _ => return Ok(None),
    };
    Ok(Some(serde_json::json!({
        "file": path.display().to_string(), "kind": schema, "schema": schema, "file_bytes": bytes.len(), "summary": summary,
    })))
}

/// `deja inspect`, comparing recorded fingerprints with this host's under `settings`: 0 when the
/// artifact is valid, 126 when it is refused, 127 when missing.
pub fn main(args: InspectArgs, settings: &deja_vmm::Settings) -> Exit {
    match describe(&args, settings) {
        Ok(v) => {
            if args.json {
                println!("{v:#}");
            } else {
                println!(
                    "{}: deja {} (schema {})",
                    args.file.display(),
                    v["kind"].as_str().unwrap_or("?"),
                    v["schema"]
                );
                if let Some(summary) = v.get("summary") {
                    for (k, val) in summary.as_object().into_iter().flatten() {
                        println!("  {k:<17} {}", val.as_str().map(String::from).unwrap_or_else(|| val.to_string()));
                    }
                    return Exit::Clean;
                }
                println!("  id                {}", v["id"].as_str().unwrap_or(""));
                println!(
                    "  size              {} bytes on disk, {} bytes of payload",
                    v["file_bytes"], v["payload_bytes"]
                );
                if let Some(s) = v.get("snapshot") {
                    let argv: Vec<String> = s["argv"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|a| a.as_str().map(String::from))
                        .collect();
                    println!(
                        "  program           {} (blake3 {})",
                        s["exe_path"].as_str().unwrap_or(""),
                        s["program_blake3"].as_str().unwrap_or("")
                    );
                    println!("  argv              {}", argv.join(" "));
                    println!("  seed              {}", s["seed"]);
                    println!(
                        "  at syscall        {} (about to make syscall nr {})",
                        s["syscall_index"], s["syscall_nr"]
                    );
                    println!("  virtual time      {} ns", s["virtual_time_ns"]);
                    println!(
                        "  guest RAM         {} MiB, {} bytes in use ({} page-table frames, {} free frames)",
                        s["memory_bytes"].as_u64().unwrap_or(0) >> 20,
                        s["ram_image_bytes"],
                        s["page_table_frames"],
                        s["free_frames"]
                    );
                    println!(
                        "  vCPU              rip {:#x}, rsp {:#x}, fs base {:#x}, {} MSRs",
                        s["rip"].as_u64().unwrap_or(0),
                        s["rsp"].as_u64().unwrap_or(0),
                        s["fs_base"].as_u64().unwrap_or(0),
                        s["msrs"]
                    );
                    println!("  syscall core      {} bytes of state", s["kernel_state_bytes"]);
                    println!("  host              {}", s["host"].as_str().unwrap_or(""));
                    println!("  written by        deja {}", s["deja_version"].as_str().unwrap_or(""));
                }
            }
            Exit::Clean
        }
        Err(Failure { code, message }) => {
            eprintln!("deja: error: {message}");
            code
        }
    }
}

/// Arguments of `deja reseal`.
#[derive(Debug, clap::Args)]
pub struct ResealArgs {
    /// The bug file, cluster bug file or campaign checkpoint that was edited on purpose.
    pub file: PathBuf,
}

/// `deja reseal`: seals a JSON artifact again after an edit that was meant. 0 when resealed, 126
/// when the file is not one deja seals or fails its json, schema or fields check, 127 when missing.
pub fn reseal(args: ResealArgs) -> Exit {
    let path = args.file.as_path();
    let text = match std::fs::read(path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("deja: error: cannot read {}: {e}", path.display());
            return if e.kind() == std::io::ErrorKind::NotFound { Exit::NotFound } else { Exit::NotLoadable };
        }
    };
    let schema = serde_json::from_slice::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| v["schema"].as_str().map(String::from))
        .unwrap_or_default();
    let family = schema.split('/').next().unwrap_or_default();
    let done = match family {
        "deja.bug" => deja_explore::input::BUG_SCHEMA.reseal::<deja_explore::BugFile>(path),
        "deja.cluster-bug" => deja_explore::cluster::CLUSTER_BUG_SCHEMA.reseal::<deja_explore::ClusterBug>(path),
        "deja.campaign-checkpoint" => deja_explore::campaign::CHECKPOINT_SCHEMA.reseal::<serde_json::Value>(path),
        _ => {
            eprintln!(
                "deja: error: {}: not a file deja seals (bug files, cluster bug files and campaign checkpoints are; \
                 capsules and certificates are content-addressed and cannot be resealed)",
                path.display()
            );
            return Exit::NotLoadable;
        }
    };
    match done {
        Ok(()) => {
            eprintln!("deja: resealed {}", path.display());
            Exit::Clean
        }
        Err(e) => {
            eprintln!("deja: error: {e}");
            Exit::NotLoadable
        }
    }
}
