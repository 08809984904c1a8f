//! Repository tasks, run as `cargo xtask <task>`:
//!
//! * `guests`: builds the example guests static, for the host target, with the stable toolchain,
//!   into `target/guests/`: static-PIE executables, a non-PIE (`ET_EXEC`) `hello` in `nopie/`,
//!   a coverage-instrumented `bank` in `cov/`, and the guests in other languages: `hostchan`
//!   (C, with the system's C compiler) and `go-goroutines` (Go, with Debian's `golang-go`).
//!   Some are also packed as container images in `target/guests/images/` ([`images`]).
//!   Once per checkout: `target/guests/.built-from` records what they were built from, and
//!   they are built again only when a file under `guest/`, this program or a compiler's
//!   version changed, or a file built is missing.
//! * `dogfood`: regenerates `dogfood-results/explore.md` (rounds to the first bug, coverage
//!   guidance against the random baseline).
//! * `demo`: builds the guests and `deja`, runs an example, then explores the bundled key-value
//!   store with a planted durability bug: finds it, replays it, minimizes it.
//! * `modules`: each crate's module cycles ([`modules`]).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

mod images;
mod layers;
mod modules;
mod placement;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the repository").to_path_buf()
}

fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

fn status(what: &str, cmd: &mut Command) -> Result<(), String> {
    let s = cmd.status().map_err(|e| format!("{what}: cannot start: {e}"))?;
    if s.success() {
        Ok(())
    } else {
        Err(format!("{what} failed ({s})"))
    }
}

/// The example guests' executables (the `sys` crate is a library; `credit` has one binary
/// per variant).
const GUESTS: [&str; 50] = [
    "hello",
    "timerand",
    "cpuburn",
    "memhog",
    "badptr",
    "privileged",
    "cat",
    "syscalls",
    "dirty",
    "bank",
    "kv",
    "fserr",
    "credit-buggy",
    "credit-misleading-green",
    "credit-mark-first",
    "credit-atomic",
    "threads",
    "echo-server",
    "echo-client",
    "udp-ping",
    "udp-pong",
    "tokio-echo-server",
    "tokio-echo-client",
    "register-replica",
    "register-replica-patched",
    "register-client",
    "register-workload",
    "raftkv-node",
    "raftkv-client",
    "loopback",
    "hostinfo",
    "pagestore-buggy",
    "pagestore-fixed",
    "pagestore-retry",
    "ackstore-buggy",
    "ackstore-fixed",
    "ackstore-rejecting",
    "walkv-buggy",
    "walkv-fixed",
    "walkv-wrong",
    "walkv-client",
    "ledger",
    "spin",
    "attack",
    "overflow",
    "etcd-client",
    "spawner",
    "batchdb",
    "votes",
    "climb",
];

/// Flags every guest is built with: a static executable.
const STATIC: &str = "-C target-feature=+crt-static";

/// SanitizerCoverage with inline 8-bit counters, which deja reads from guest memory.
const COVERAGE: &str = "-C passes=sancov-module -C llvm-args=-sanitizer-coverage-level=3 \
     -C llvm-args=-sanitizer-coverage-inline-8bit-counters";

/// Builds one flavour of the guests (`packages`, or the whole guest workspace when empty) and
/// copies the executables `binaries` into `out`.
fn build_flavour(what: &str, rustflags: &str, packages: &[&str], binaries: &[&str], out: &Path) -> Result<(), String> {
    let root = root();
    let build_dir = root.join("target/guest-build").join(what);
    let mut cmd = cargo();
    cmd.current_dir(root.join("guest"))
        .args(["build", "--release", "--quiet", "--target", TARGET, "--target-dir"])
        .arg(&build_dir)
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env("RUSTFLAGS", rustflags);
    for p in packages {
        cmd.args(["-p", p]);
    }
    status(&format!("building the {what} guests"), &mut cmd)?;
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    for p in binaries {
        let from = build_dir.join(TARGET).join("release").join(p);
        let to = out.join(p);
        std::fs::copy(&from, &to).map_err(|e| format!("copying {}: {e}", from.display()))?;
    }
    Ok(())
}

/// The host target, named explicitly so that the static flag reaches the guests and not the
/// build scripts and proc-macros they depend on.
const TARGET: &str = "x86_64-unknown-linux-gnu";

/// Builds every guest into `target/guests/`: static-PIE executables, a non-PIE `hello` in
/// `nopie/`, and a coverage-instrumented `bank` in `cov/`.
fn guests() -> Result<(), String> {
    // The C and Go guests need Go, a C compiler and a static libc: on a fresh Debian machine
    // they are provisioned as the tests' other packages are.
    let go = Command::new("go").arg("version").output().is_ok_and(|o| o.status.success());
    if !go || !Path::new("/usr/lib/x86_64-linux-gnu/libc.a").exists() {
        provision(&["golang-go".into(), "gcc".into(), "libc6-dev".into()])?;
    }
    let out = root().join("target/guests");
    let inputs = guest_inputs(&root());
    if built_from(&out, &inputs) {
        println!("guests: up to date in {} (built from inputs {inputs})", out.display());
        return Ok(());
    }
    build_flavour("static-pie", STATIC, &[], &GUESTS, &out)?;
    build_flavour(
        "nopie",
        &format!("{STATIC} -C relocation-model=static"),
        &["hello"],
        &["hello"],
        &out.join("nopie"),
    )?;
    build_flavour(
        "coverage",
        &format!("{STATIC} {}", COVERAGE),
        &["bank", "register"],
        &["bank", "register-replica", "register-client"],
        &out.join("cov"),
    )?;
    foreign_guests(&out)?;
    images::write(&out, &out.join("images"))?;
    record_built(&out, &inputs)
}

/// The file in `target/guests/` that says what the guests there were built from: the
/// fingerprint of their inputs, then each file built, with its size.
const BUILT_FROM: &str = ".built-from";

/// A fingerprint of everything the guests are built from: every file under `guest/` (but build
/// output), this program's source (which holds the flags), and the versions of the compilers
/// (rustc, the C compiler, Go). The test binaries each ask for the guests; with this, a
/// checkout builds them once and again only when one of these changes.
fn guest_inputs(root: &Path) -> String {
    use std::hash::{Hash, Hasher};
    let mut files = vec![root.join("xtask/src/main.rs"), root.join("xtask/src/images.rs")];
    let mut dirs = vec![root.join("guest")];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for path in entries.flatten().map(|e| e.path()) {
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "target") {
                    dirs.push(path);
                }
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    let mut h = std::hash::DefaultHasher::new();
    for f in &files {
        f.strip_prefix(root).unwrap_or(f).hash(&mut h);
        std::fs::read(f).unwrap_or_default().hash(&mut h);
    }
    let cc = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    for (tool, arg) in [(rustc.as_os_str(), "-V"), (cc.as_os_str(), "--version"), ("go".as_ref(), "version")] {
        Command::new(tool).arg(arg).output().map(|o| o.stdout).unwrap_or_default().hash(&mut h);
    }
    format!("{:016x}", h.finish())
}

/// Every file under `dir`, relative to it, with its size, sorted (the record itself left out).
fn built_files(dir: &Path) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let path = e.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.file_name().is_some_and(|n| n != BUILT_FROM) {
                let rel = path.strip_prefix(dir).unwrap_or(&path).to_string_lossy().into_owned();
                out.push((rel, e.metadata().map(|m| m.len()).unwrap_or(0)));
            }
        }
    }
    out.sort();
    out
}

/// True when `out` holds what a build from `inputs` wrote: the record names these inputs and
/// every file it lists is there with its size.
fn built_from(out: &Path, inputs: &str) -> bool {
    let Ok(record) = std::fs::read_to_string(out.join(BUILT_FROM)) else { return false };
    let mut lines = record.lines();
    if lines.next() != Some(inputs) {
        return false;
    }
    let listed: Vec<&str> = lines.collect();
    !listed.is_empty()
        && listed.iter().all(|l| {
            l.split_once(' ')
                .is_some_and(|(size, rel)| std::fs::metadata(out.join(rel)).is_ok_and(|m| size.parse() == Ok(m.len())))
        })
}

/// Writes the record [`built_from`] reads.
fn record_built(out: &Path, inputs: &str) -> Result<(), String> {
    let mut text = format!("{inputs}\n");
    for (rel, size) in built_files(out) {
        text.push_str(&format!("{size} {rel}\n"));
    }
    std::fs::write(out.join(BUILT_FROM), text).map_err(|e| format!("{}: {e}", out.join(BUILT_FROM).display()))
}

/// The guests written in other languages, built static with their own toolchains (except
/// `store-buggy` and `store-fixed`, C linked dynamically against the host's libc, as most C
/// programs ship: a record saved by rename, without and with an fsync before it): `hostchan`
/// (C: every host-channel instruction in inline assembly), `go-goroutines` (Go: goroutines,
/// timers, a loopback socket and an fsynced file), `go-recover` (Go: faults turned into
/// panics and recovered), `go-unix` (Go: serving on Unix-domain sockets), `go-nettest` (the
/// tests of Go's own `net` package) and the C cases of the conformance suite (`guest/conformance/*.c`,
/// as `conformance-<name>`). A missing toolchain is an error that says what to install.
fn foreign_guests(out: &Path) -> Result<(), String> {
    let root = root();
    let cc = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    let c = root.join("guest/c/hostchan.c");
    status(
        "building guest/c/hostchan.c (a C compiler and static libc: Debian's gcc and libc6-dev)",
        Command::new(&cc).args(["-static", "-O2", "-o"]).arg(out.join("hostchan")).arg(&c),
    )?;
    // A record saved by rename, as C programs ship: dynamically linked against the host's libc.
    let store = root.join("guest/c/store.c");
    for (name, flags) in [("store-buggy", &[][..]), ("store-fixed", &["-DFIXED"][..])] {
        status(
            &format!("building guest/c/store.c as {name} (dynamically linked)"),
            Command::new(&cc).args(["-O2"]).args(flags).arg("-o").arg(out.join(name)).arg(&store),
        )?;
    }
    // A program that speaks the Antithesis SDKs' protocol through /usr/lib/libvoidstar.so,
    // which it loads with dlopen: dynamically linked.
    status(
        "building guest/c/voidstar.c (dynamically linked)",
        Command::new(&cc).args(["-O2", "-o"]).arg(out.join("voidstar")).arg(root.join("guest/c/voidstar.c")),
    )?;
    // Multi-process programs: a supervisor that restarts its worker, and a server with a
    // process per connection.
    for name in ["supervisor", "forkserver"] {
        status(
            &format!("building guest/c/{name}.c"),
            Command::new(&cc)
                .args(["-static", "-O2", "-o"])
                .arg(out.join(name))
                .arg(root.join(format!("guest/c/{name}.c"))),
        )?;
    }
    let dir = root.join("guest/conformance");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "c"))
        .collect();
    cases.sort();
    for case in cases {
        let name = case.file_stem().unwrap_or_default().to_string_lossy().into_owned();
        status(
            &format!("building guest/conformance/{name}.c"),
            Command::new(&cc).args(["-static", "-O2", "-o"]).arg(out.join(format!("conformance-{name}"))).arg(&case),
        )?;
    }
    // The Go program twice: as built, and stripped of its symbols as release builds often are
    // (the rewriter then finds its functions in the pc-line table alone).
    let cache = root.join("target/guest-build/go-cache");
    for (name, dir, ldflags) in [
        ("go-goroutines", "goroutines", ""),
        ("go-goroutines-stripped", "goroutines", "-s -w"),
        ("go-recover", "recover", ""),
        ("go-unix", "unixsock", ""),
        ("go-exec", "exec", ""),
        ("go-sdkjson", "sdkjson", ""),
    ] {
        status(
            &format!("building guest/go/{dir} (Go: Debian's golang-go)"),
            Command::new("go")
                .current_dir(root.join("guest/go").join(dir))
                .env("CGO_ENABLED", "0")
                .env("GOCACHE", &cache)
                .env("GOFLAGS", "-mod=mod")
                .env("GOTOOLCHAIN", "local")
                .args(["build", "-trimpath", &format!("-ldflags={ldflags}"), "-o"])
                .arg(out.join(name))
                .arg("."),
        )?;
    }
    // Go's own `net` package tests, as the toolchain ships them: a real runtime's standard
    // library suite, run natively and under deja by the conformance suite.
    status(
        "building Go's net package tests (Go: Debian's golang-go)",
        Command::new("go")
            .current_dir(root.join("guest/go/unixsock"))
            .env("CGO_ENABLED", "0")
            .env("GOCACHE", &cache)
            .env("GOTOOLCHAIN", "local")
            .args(["test", "-c", "-o"])
            .arg(out.join("go-nettest"))
            .arg("net"),
    )?;
    Ok(())
}

fn demo() -> Result<(), String> {
    guests()?;
    let root = root();
    status("building deja", cargo().current_dir(&root).args(["build", "--release", "--quiet", "-p", "deja-cli"]))?;
    let deja = release_deja(&root);
    let g = root.join("target/guests");
    let step = |title: &str, args: &[&str]| -> Result<(), String> {
        println!("\n$ deja {}", args.join(" "));
        println!("# {title}");
        let s = Command::new(&deja).args(args).status().map_err(|e| e.to_string())?;
        if s.success() {
            Ok(())
        } else {
            Err(format!("deja {} failed ({s})", args.join(" ")))
        }
    };
    let path = |name: &str| g.join(name).to_string_lossy().into_owned();
    let (hello, timerand, kv) = (path("hello"), path("timerand"), path("kv"));
    let out = root.join("target/demo-explore");
    let _ = std::fs::remove_dir_all(&out);
    let out = out.to_string_lossy().into_owned();
    step("a static Rust program, unchanged, in a KVM VM whose kernel is deja", &["run", &hello])?;
    step(
        "clock and randomness come from the seed: --audit runs it 3 times and compares digests",
        &["run", "--seed", "7", "--no-probe", "--audit", "3", &timerand],
    )?;
    // Runs `deja explore <args>`, which must find a bug (exit 1), and returns its bug file.
    let explore_to_bug = |title: &str, args: &[&str], out: &str| -> Result<String, String> {
        println!("\n$ deja explore {}", args.join(" "));
        println!("# {title}");
        let s = Command::new(&deja).arg("explore").args(args).status().map_err(|e| e.to_string())?;
        if s.code() != Some(1) {
            return Err(format!("deja explore should have found a bug (exit 1), got {s}"));
        }
        let bug = std::fs::read_dir(out)
            .map_err(|e| e.to_string())?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("bug-")))
            .ok_or(format!("no bug file written in {out}"))?;
        Ok(bug.to_string_lossy().into_owned())
    };
    let bug = explore_to_bug(
        "explore a key-value store that acknowledges writes before they are durable",
        &["--runs", "60", "--mode", "faults", "--out", &out, &kv, "--", "--variant", "buggy", "6"],
        &out,
    )?;
    println!("\n$ deja replay {bug}\n# replays the failure exactly (exit 1: reproduced)");
    let s = Command::new(&deja).args(["replay", &bug]).status().map_err(|e| e.to_string())?;
    if s.code() != Some(1) {
        return Err(format!("the bug did not replay ({s})"));
    }
    step("minimize the failing input with delta debugging", &["minimize", &bug])?;
    println!("\nthe report: {out}/report.html");

    let clusters = root.join("examples/clusters");
    let cluster = |name: &str| clusters.join(name).to_string_lossy().into_owned();
    step(
        "a cluster: an echo server and a client in two VMs on the simulated network",
        &["run", "--no-probe", &cluster("echo.toml")],
    )?;
    let cout = root.join("target/demo-cluster-explore");
    let _ = std::fs::remove_dir_all(&cout);
    let cout = cout.to_string_lossy().into_owned();
    let register = cluster("register-buggy.toml");
    let bug = explore_to_bug(
        "explore partitions of a 3-replica register whose leaders may both accept writes (split brain)",
        &["--runs", "60", "--stop-at-first-bug", "--mode", "faults", "--out", &cout, &register],
        &cout,
    )?;
    step("cut the failure's faults down to the few that cause it", &["minimize", &bug])?;
    Ok(())
}

/// Regenerates `dogfood-results/explore.md` from the reference workloads.
fn dogfood() -> Result<(), String> {
    guests()?;
    let root = root();
    status("building deja", cargo().current_dir(&root).args(["build", "--release", "--quiet", "-p", "deja-cli"]))?;
    status(
        "deja dogfood",
        Command::new(release_deja(&root))
            .args(["dogfood", "--out"])
            .arg(root.join("dogfood-results/explore.md"))
            .arg("--guests")
            .arg(root.join("target/guests")),
    )
}

fn main() -> ExitCode {
    let task = std::env::args().nth(1).unwrap_or_default();
    let result = match task.as_str() {
        "guests" => guests(),
        "demo" => demo(),
        "dogfood" => dogfood(),
        "provision" => provision(&std::env::args().skip(2).collect::<Vec<_>>()),
        "modules" => modules::report(&root().join("crates")),
        "layers" => layers::report(&root()),
        "guest-kernel" => placement::build(&root()),
        _ => {
            Err("usage: cargo xtask <guests|demo|dogfood|modules|layers|guest-kernel|provision PACKAGE...>".to_string())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Installs the Debian packages some tests run (etcd-server, redis-server, nginx-light,
/// busybox-static, sqlite3, chromium, ...) when they are not installed yet, so that the README's
/// test command passes on a fresh Debian machine: `apt-get install`, waiting for the package
/// lock when another test binary installs at the same time, then stopping the services a
/// package starts on the host (the tests need only the binaries). Needs root; a user without it
/// is told what to install.
fn provision(packages: &[String]) -> Result<(), String> {
    let installed = |p: &str| {
        Command::new("dpkg-query")
            .args(["-W", "-f=${Status}", p])
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
    };
    let missing: Vec<&str> = packages.iter().map(String::as_str).filter(|p| !installed(p)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if !root {
        return Err(format!("the tests need {}: apt-get install {} (as root)", missing.join(", "), missing.join(" ")));
    }
    let apt = |args: &[&str]| {
        let mut c = Command::new("apt-get");
        c.env("DEBIAN_FRONTEND", "noninteractive").args(["-o", "DPkg::Lock::Timeout=900", "-qq"]).args(args);
        status(&format!("apt-get {}", args.join(" ")), &mut c)
    };
    apt(&["update"])?;
    let mut install = vec!["install", "-y"];
    install.extend(&missing);
    apt(&install)?;
    for (package, service) in [("etcd-server", "etcd"), ("redis-server", "redis-server"), ("nginx-light", "nginx")] {
        if missing.contains(&package) {
            let _ = Command::new("systemctl").args(["stop", service]).output();
            let _ = Command::new("systemctl").args(["disable", service]).output();
        }
    }
    Ok(())
}

/// The `deja` a release build of the workspace makes: under `CARGO_TARGET_DIR` when it is set
/// (relative to the workspace root, as cargo takes it), `target/` otherwise.
fn release_deja(root: &Path) -> PathBuf {
    let dir = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), |d| root.join(d));
    dir.join("release/deja")
}
