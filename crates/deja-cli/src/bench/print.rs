//! `deja bench`'s figures as text, for people (`--json` prints the same figures whole).

/// Prints `v`, the figures [`deja_bench::figures`] measured.
pub(super) fn text(v: &serde_json::Value) {
    let c = &v["cpu_bound"];
    println!("deja bench (median of {} runs each, measured side by side)", v["repeat"]);
    if v["quick"].as_bool() == Some(true) {
        println!(
            "  (--quick: campaigns at a tenth of their rounds; the figures show the bench runs, not what to quote)"
        );
    }
    println!(
        "  cpu-bound  cpuburn {}M steps: native {:.3} s, deja {:.3} s, speed {:.3}x native (target >= 0.9x)",
        c["million_steps"],
        c["native_s"].as_f64().unwrap_or(0.0),
        c["deja_s"].as_f64().unwrap_or(0.0),
        c["speed_vs_native"].as_f64().unwrap_or(0.0)
    );
    let s = &v["syscall_round_trip"];
    println!(
        "  syscall    round trip: {:.1} us per syscall with sync regs (used), {:.1} us with register ioctls ({} syscalls)",
        s["us_per_syscall"].as_f64().unwrap_or(0.0),
        s["us_per_syscall_register_ioctls"].as_f64().unwrap_or(0.0),
        s["syscalls"]
    );
    let p = &v["placement"];
    if p["built"].as_bool() == Some(true) {
        let (h, g, n) = (&p["host"], &p["guest"], &p["native"]);
        let f = |x: &serde_json::Value| x.as_f64().unwrap_or(0.0);
        println!(
            "  placement  {}: kernel on the host {:.1} us per syscall ({:.0}x native), {:.1} exits per 100 syscalls",
            p["program"].as_str().unwrap_or(""),
            f(&h["us_per_syscall"]),
            f(&h["per_call_vs_native"]),
            f(&h["exits_per_100_syscalls"])
        );
        let t = &p["guest_trap"];
        println!(
            "             kernel in the guest, reached by the syscall trap {:.1} us per syscall ({:.0}x native)",
            f(&t["us_per_syscall"]),
            f(&t["per_call_vs_native"])
        );
        println!(
            "             kernel in the guest, reached by {} jump sites {:.2} us per syscall ({:.1}x native), {:.2} exits per 100 syscalls (targets <= 10x, <= 1); natively {:.3} us; same digests as the host placement's run with the same jump sites: {}",
            g["jump_sites"],
            f(&g["us_per_syscall"]),
            f(&g["per_call_vs_native"]),
            f(&g["exits_per_100_syscalls"]),
            f(&n["us_per_syscall"]),
            p["same_digest"]
        );
    } else {
        println!("  placement  the guest placement's kernel image is not built (cargo xtask guest-kernel)");
    }
    let k = &v["sdk_call"];
    println!(
        "  sdk        assert_always!: {:.1} us per call in deja, {:.4} us natively (SDK evaluates locally)",
        k["us_per_call_in_deja"].as_f64().unwrap_or(0.0),
        k["us_per_call_native"].as_f64().unwrap_or(0.0)
    );
    let d = &v["demand_paging"];
    println!(
        "  paging     {:.1} us per demand-paging fault (64 KiB mapped per fault, {} faults)",
        d["us_per_fault_including_page_work"].as_f64().unwrap_or(0.0),
        d["extra_page_faults"]
    );
    println!("  fork       reset to the parent vs whole-memory restore, 256 MiB guest:");
    for row in v["fork_reset"]["rows"].as_array().into_iter().flatten() {
        println!(
            "             {:>6} pages dirtied: reset {:>9.1} us ({} frames rewritten, {} entries resynced), whole restore {:>9.1} us, {:.0}x",
            row["dirtied_pages"],
            row["reset_us"].as_f64().unwrap_or(0.0),
            row["frames_rewritten"],
            row["entries_resynced"],
            row["whole_memory_restore_us"].as_f64().unwrap_or(0.0),
            row["speedup"].as_f64().unwrap_or(0.0)
        );
    }
    let c = &v["crash"];
    println!(
        "  crash      kv (fixed, 8 puts, {} durable writes): run {:.1} ms, crash + restart {:.1} ms, whole sweep {:.0} ms",
        c["durable_writes"],
        c["plain_run_ms"].as_f64().unwrap_or(0.0),
        c["crash_and_restart_ms"].as_f64().unwrap_or(0.0),
        c["sweep_ms"].as_f64().unwrap_or(0.0)
    );
    for t in v["explore_throughput"].as_array().into_iter().flatten() {
        println!(
            "  explore    {:<14} {:>6.1} rounds/s, {:>8.0} forks/s, {:>4.1}% of a round spent resetting the fork",
            t["workload"].as_str().unwrap_or(""),
            t["rounds_per_s"].as_f64().unwrap_or(0.0),
            t["forks_per_s"].as_f64().unwrap_or(0.0),
            100.0 * t["fork_share"].as_f64().unwrap_or(0.0)
        );
    }
    let f = &v["forked_cluster"];
    println!(
        "  cluster    {} rounds of {} ({} nodes) steered the same way: booted {:.1} rounds/s, forked at setup ({:.0} ms virtual) {:.1} rounds/s: {:.1}x, same digests; a node's reset {:.0} us ({:.0} frames)",
        f["rounds"],
        f["file"].as_str().unwrap_or("").rsplit('/').next().unwrap_or(""),
        f["nodes"],
        f["booted_rounds_per_s"].as_f64().unwrap_or(0.0),
        f["fork_point_virtual_ms"].as_f64().unwrap_or(0.0),
        f["forked_rounds_per_s"].as_f64().unwrap_or(0.0),
        f["speedup"].as_f64().unwrap_or(0.0),
        f["us_per_node_reset"].as_f64().unwrap_or(0.0),
        f["frames_per_node_reset"].as_f64().unwrap_or(0.0)
    );
    let t = &f["time_split"];
    let kinds: Vec<String> = t["top_syscalls"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|k| {
            format!(
                "{} {:.1}% ({:.0} us each)",
                k["syscall"].as_str().unwrap_or(""),
                100.0 * k["share"].as_f64().unwrap_or(0.0),
                k["us_each"].as_f64().unwrap_or(0.0)
            )
        })
        .collect();
    let pct = |k: &str| 100.0 * t[k].as_f64().unwrap_or(0.0);
    println!(
        "  round      a forked round, {:.1} ms: KVM_RUN {:.0}% ({} exits, {:.1} us each with the guest's code), deja's syscalls {:.1}%, exceptions {:.1}%, resets {:.1}%, the cluster driver and the rest {:.0}%",
        t["round_ms"].as_f64().unwrap_or(0.0),
        pct("kvm_run"),
        t["exits_per_round"],
        t["kvm_run_us_per_exit"].as_f64().unwrap_or(0.0),
        pct("syscalls"),
        pct("exceptions"),
        pct("resets"),
        pct("driver_and_rest")
    );
    println!("             deja's syscall time by kind: {}", kinds.join(", "));
    println!(
        "             where an exit costs 1 us (bare metal), at most {:.1} rounds/s",
        t["rounds_per_s_with_1us_exits_at_most"].as_f64().unwrap_or(0.0)
    );
    let d = &v["vdso"];
    for (label, s) in [("vDSO off", &d["off"]), ("vDSO on ", &d["on"])] {
        println!(
            "  clock      {label}: {:.1} rounds/s booted, {:.1} forked (median of {}); {} syscalls of which {} clock reads ({:.0}%); {} vDSO calls served without an exit",
            s["booted_rounds_per_s"].as_f64().unwrap_or(0.0),
            s["forked_rounds_per_s"].as_f64().unwrap_or(0.0),
            d["repeat"],
            s["syscalls"],
            s["clock_syscalls"],
            100.0 * s["clock_share_of_syscalls"].as_f64().unwrap_or(0.0),
            s["vdso_calls"]
        );
    }
    println!(
        "             the vDSO: {:.2}x booted, {:.2}x forked (each setting's forked rounds checked against its booted ones, digest by digest)",
        d["booted_speedup"].as_f64().unwrap_or(0.0),
        d["forked_speedup"].as_f64().unwrap_or(0.0)
    );
    let l = &v["late_forks"];
    for r in l["rows"].as_array().into_iter().flatten() {
        let f = |k: &str| r[k].as_f64().unwrap_or(0.0);
        println!(
            "  late forks {:<9} {} rounds ({}, {} worker(s)), rounds/s: neither {:.1}, later forks {:.1}, vDSO {:.1}, both {:.1}: {:.2}x (median of {}; each pair the same campaign{})",
            r["workload"].as_str().unwrap_or(""),
            r["rounds"],
            r["mode"].as_str().unwrap_or(""),
            r["jobs"],
            f("neither"),
            f("late_forks"),
            f("vdso"),
            f("both"),
            f("both_speedup"),
            l["repeat"],
            if r["same_campaign_with_the_vdso"].as_bool() == Some(true) { ", and the same with the vDSO off and on" } else { "" }
        );
        let s = &r["late"];
        println!(
            "             {} later forks kept; {} of {} forked rounds ran from one, skipping {:.0} decisions each",
            s["kept"],
            s["rounds_from_one"],
            s["forked_rounds"],
            s["decisions_skipped_per_round_from_one"].as_f64().unwrap_or(0.0)
        );
    }
    for r in v["scale"]["rows"].as_array().into_iter().flatten() {
        println!(
            "  workers    {:<18} {} rounds: 1 worker {:>6.1} rounds/s, {} workers {:>6.1} rounds/s: {:.2}x",
            r["workload"].as_str().unwrap_or(""),
            r["rounds"],
            r["one_worker_rounds_per_s"].as_f64().unwrap_or(0.0),
            r["workers"],
            r["all_workers_rounds_per_s"].as_f64().unwrap_or(0.0),
            r["speedup"].as_f64().unwrap_or(0.0)
        );
    }
    if let Some(core) = v["scale"]["pinned_core"].as_u64() {
        println!(
            "             every worker's VMs ran on host core {core}: the CPU identity remedy pins every vCPU thread to one core (DEJA_REWRITE=off on a host that does not honour CPUID faulting, or DEJA_CPU_IDENTITY=pinned; deja doctor)"
        );
    }
    let j = &v["check"];
    println!(
        "  check      `deja check` credit-buggy vs credit-atomic: {:.0} ms ({})",
        j["wall_ms"].as_f64().unwrap_or(0.0),
        j["verdict"].as_str().unwrap_or("")
    );
    let j = &v["cluster_check"];
    println!(
        "  check      `deja check` of a split brain in register-buggy (found in round {}, {:.1} s) against the patched replicas: {:.1} s for {} checks in {} worlds ({})",
        j["found_in_rounds"],
        j["explore_s"].as_f64().unwrap_or(0.0),
        j["wall_s"].as_f64().unwrap_or(0.0),
        j["checks"],
        j["worlds"],
        j["verdict"].as_str().unwrap_or("")
    );
    for r in v["history"]["rows"].as_array().into_iter().flatten() {
        println!(
            "  history    linearizability of {:>6} kv operations ({} keys, {} in flight): {:>8.2} ms ({:.1} us per operation)",
            r["operations"],
            r["keys"],
            r["in_flight"],
            r["ms"].as_f64().unwrap_or(0.0),
            r["us_per_operation"].as_f64().unwrap_or(0.0)
        );
    }
    let c = &v["cluster"];
    println!(
        "  cluster    {}: {:.1} simulated s per wall s, {:.0} syscalls/s ({:.2} s virtual in {:.3} s wall, {} syscalls)",
        c["file"].as_str().unwrap_or(""),
        c["simulated_s_per_wall_s"].as_f64().unwrap_or(0.0),
        c["syscalls_per_s"].as_f64().unwrap_or(0.0),
        c["virtual_s"].as_f64().unwrap_or(0.0),
        c["wall_s"].as_f64().unwrap_or(0.0),
        c["syscalls"]
    );
    println!(
        "             time: {:.0}% guest code, {:.0}% VM exits (estimated: {} exits x {:.1} us), {:.0}% monitor and scheduler",
        100.0 * c["guest_share"].as_f64().unwrap_or(0.0),
        100.0 * c["exit_share"].as_f64().unwrap_or(0.0),
        c["vm_exits"],
        c["us_per_exit_estimate"].as_f64().unwrap_or(0.0),
        100.0 * c["monitor_share"].as_f64().unwrap_or(0.0)
    );
    for r in v["storage"]["rows"].as_array().into_iter().flatten() {
        let line = |w: &serde_json::Value| {
            format!(
                "{} points, {} states tried ({:.0}/s), {:.2} distinct per point, {} restarts, {:.2} s, {}",
                w["crash_points"],
                w["states_tried"],
                w["states_per_s"].as_f64().unwrap_or(0.0),
                w["distinct_per_point"].as_f64().unwrap_or(0.0),
                w["restarts"],
                w["wall_s"].as_f64().unwrap_or(0.0),
                w["verdict"].as_str().unwrap_or("")
            )
        };
        println!("  storage    {:<16} crash states: {}", r["workload"].as_str().unwrap_or(""), line(&r["states"]));
        println!("             {:<16} after writes only: {}", "", line(&r["after_writes_only"]));
        println!(
            "             {:<16} explore, whole fault menu: {:.1} rounds/s",
            "",
            r["explore_rounds_per_s_full_menu"].as_f64().unwrap_or(0.0)
        );
    }
    let c = &v["cpuid"];
    if c["faulting_honoured"] == true {
        println!(
            "  cpuid      `deja run hostinfo`, not rewritten ({} cpuid traps): {:.1} ms with CPUID faulting, {:.1} ms with KVM's table, {:.1} us per trapped cpuid",
            c["cpuid_exits"],
            c["faulting_ms"].as_f64().unwrap_or(0.0),
            c["table_ms"].as_f64().unwrap_or(0.0),
            c["us_per_cpuid"].as_f64().unwrap_or(0.0)
        );
    } else {
        println!("  cpuid      this host does not honour CPUID faulting: CPUID comes from KVM's table");
    }
    let r = &v["rewrite"];
    for p in r["plans"].as_array().into_iter().flatten() {
        println!(
            "  rewrite    plan {:<14} {:>6} KiB of code: {:>6.1} ms, {:>5.1} ms per MiB, {} sites, {} left alone, descent reached {:.0}%",
            p["program"].as_str().unwrap_or(""),
            p["code_kib"],
            p["plan_ms"].as_f64().unwrap_or(0.0),
            p["ms_per_mib"].as_f64().unwrap_or(0.0),
            p["sites"],
            p["refused"],
            100.0 * p["reached_share"].as_f64().unwrap_or(0.0)
        );
    }
    println!(
        "             a trap at a rewritten rdtsc: {:.1} us ({} traps); `deja run hostchan`: {:.1} ms rewritten, {:.1} ms with DEJA_REWRITE=off",
        r["trap"]["us_per_trap"].as_f64().unwrap_or(0.0),
        r["trap"]["traps"],
        r["run_hostchan"]["rewriting_ms"].as_f64().unwrap_or(0.0),
        r["run_hostchan"]["off_ms"].as_f64().unwrap_or(0.0)
    );
    let b = &v["block_coverage"];
    println!(
        "  blocks     {} ({} blocks, forked at syscall {}): first round {:.2} ms with {} breakpoints (unarmed {:.2} ms); \
         steady round {:.3} ms against {:.3} ms unarmed: {:+.1}% (target under {:.0}%), {} breakpoints",
        b["program"].as_str().unwrap_or(""),
        b["blocks"],
        b["fork_at_syscall"],
        b["first_round_ms"].as_f64().unwrap_or(0.0),
        b["first_round_breakpoints"],
        b["first_round_plain_ms"].as_f64().unwrap_or(0.0),
        b["steady_round_ms"].as_f64().unwrap_or(0.0),
        b["plain_round_ms"].as_f64().unwrap_or(0.0),
        100.0 * b["steady_overhead"].as_f64().unwrap_or(0.0),
        100.0 * b["target_overhead"].as_f64().unwrap_or(0.0),
        b["steady_breakpoints"]
    );
    let h = &v["deja_run_hello"];
    println!(
        "  startup    `deja run hello`: {:.1} ms wall (native hello {:.1} ms)",
        h["wall_ms"].as_f64().unwrap_or(0.0),
        h["native_ms"].as_f64().unwrap_or(0.0)
    );
}
