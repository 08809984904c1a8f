//! Block coverage of programs built without SanitizerCoverage (`deja explore --block-coverage`):
//! one-shot breakpoints at the blocks the code rewriter finds, reported as blocks and functions,
//! scoped to the program's own code or with `--cover`, invisible to the run (a bug found with breakpoints replays without
//! them), and the same campaign in processes on different host cores.

use std::path::{Path, PathBuf};

use crate::common::*;
use serde_json::Value;

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("deja-blocks-{name}-{}", std::process::id()));
    std::fs::remove_dir_all(&d).ok();
    d
}

/// The names of the functions a block-coverage report lists (reached last and never reached).
fn listed_functions(b: &Value) -> Vec<String> {
    let list =
        |k: &str| b[k].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap().to_string()).collect::<Vec<_>>();
    [list("latest"), list("never")].concat()
}

fn explore_args<'a>(out: &'a str, program: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec!["explore", "--runs", "120", "--mode", "faults", "--seed", "3", "--jobs", "1", "--quiet"];
    a.extend_from_slice(extra);
    a.extend_from_slice(&["--out", out, program, "--", "6"]);
    a
}

#[test]
fn an_uninstrumented_store_reports_blocks_and_functions_and_its_bug_replays_without_breakpoints() {
    let out = dir("ackstore");
    let program = s(&guest("ackstore-buggy"));
    let o = deja(&explore_args(&s(&out), &program, &["--block-coverage", "--cover", "*"]));
    assert_eq!(o.status.code(), Some(1), "a bug in 120 rounds: {}", stderr(&o));
    let err = stderr(&o);
    let line = err.lines().find(|l| l.starts_with("deja: explored")).expect("a closing line");
    assert!(line.contains(" blocks, ") && line.contains(" functions"), "{line}");
    let c = campaign_report(&out);
    let b = &c["blocks"];
    let (hit, total) = (b["blocks_hit"].as_u64().unwrap(), b["blocks_total"].as_u64().unwrap());
    assert!(hit > 500 && total > 10 * hit / 2 && hit < total, "blocks reached {hit} of {total}");
    assert_eq!(c["edges_total"].as_u64(), Some(total), "the coverage map is the block map");
    assert_eq!(c["edges_hit"].as_u64(), Some(hit));
    let (reached, functions) = (b["functions_reached"].as_u64().unwrap(), b["functions_total"].as_u64().unwrap());
    assert!(reached > 50 && reached < functions, "functions reached {reached} of {functions}");
    let names = listed_functions(b);
    assert!(names.iter().all(|n| !n.starts_with("_ZN")), "Rust names are demangled: {names:?}");
    // What the campaign learned later than its bootstrap: functions first reached in later rounds.
    assert!(b["functions_over_rounds"].as_array().unwrap().len() > 1, "{b}");
    let text = std::fs::read_to_string(out.join("report.txt")).unwrap();
    assert!(text.contains("functions never reached") && text.contains(" blocks ("), "{text}");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("\"functions_reached\""), "the page embeds the block coverage");
    // The bug's run had breakpoints in it; its replay has none, and gives the same run.
    let bug = bug_file(&out);
    let r = deja(&["replay", &s(&bug)]);
    assert_eq!(r.status.code(), Some(1), "{}", stderr(&r));
    assert!(stderr(&r).contains("reproduced bug"), "{}", stderr(&r));
}

#[test]
fn the_scope_keeps_only_the_functions_it_names() {
    let out = dir("scope");
    let program = s(&guest("ackstore-buggy"));
    let o = deja(&explore_args(&s(&out), &program, &["--block-coverage", "--cover", "ackstore::*"]));
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", stderr(&o));
    let b = campaign_report(&out)["blocks"].clone();
    let names = listed_functions(&b);
    assert!(!names.is_empty() && names.iter().all(|n| n.starts_with("ackstore::")), "{names:?}");
    assert_eq!(b["scope"], serde_json::json!(["ackstore::*"]));
    let functions = b["functions_total"].as_u64().unwrap();
    assert!(functions > 0 && functions < 100, "the store's own functions, not the runtime's: {functions}");
    assert!(b["blocks_hit"].as_u64().unwrap() > 0);
    // A pattern that names nothing leaves nothing to arm: the program has no block coverage.
    let none = dir("scope-none");
    let o = deja(&explore_args(&s(&none), &program, &["--block-coverage", "--cover", "no_such_crate::*"]));
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", stderr(&o));
    assert_eq!(campaign_report(&none)["blocks"], Value::Null);
    let o = deja(&["explore", "--no-block-coverage", "--cover", "x::*", &program]);
    assert_eq!(o.status.code(), Some(2), "--cover needs block coverage: {}", stderr(&o));
}

#[test]
fn without_a_scope_coverage_is_the_programs_own_code() {
    let out = dir("own");
    let program = s(&guest("pagestore-buggy"));
    let o = deja(&explore_args(&s(&out), &program, &["--block-coverage"]));
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", stderr(&o));
    let line = stderr(&o).lines().find(|l| l.starts_with("deja: explored")).expect("a closing line").to_string();
    assert!(line.contains("(scope pagestore::*, <pagestore::*, pagestore_buggy::*, <pagestore_buggy::*)"), "{line}");
    let b = campaign_report(&out)["blocks"].clone();
    let names = listed_functions(&b);
    let own = |n: &String| {
        ["pagestore::", "<pagestore::", "pagestore_buggy::", "<pagestore_buggy::"].iter().any(|p| n.starts_with(p))
    };
    assert!(!names.is_empty() && names.iter().all(own), "the store's library and binary, nothing else: {names:?}");
    assert!(names.iter().any(|n| n.starts_with("pagestore_buggy::")), "the binary's crate is in: {names:?}");
    assert!(names.iter().any(|n| n.starts_with("pagestore::")), "so is its library: {names:?}");
    let (total, hit) = (b["blocks_total"].as_u64().unwrap(), b["blocks_hit"].as_u64().unwrap());
    assert!(hit > 0 && total < 5_000, "{hit} of {total} blocks: the store's, not std's or libc's");

    // A Go program's own code is its main package, not the runtime.
    let go = dir("own-go");
    let program = s(&guest("go-goroutines"));
    let o = deja(
        &["explore", "--runs", "10", "--mode", "faults", "--seed", "1", "--jobs", "1", "--quiet"]
            .into_iter()
            .chain(["--block-coverage", "--out", &s(&go), &program])
            .collect::<Vec<_>>(),
    );
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", stderr(&o));
    let b = campaign_report(&go)["blocks"].clone();
    assert_eq!(b["scope"], serde_json::json!(["main.*"]));
    let names = listed_functions(&b);
    assert!(names.contains(&"main.main".to_string()) && names.iter().all(|n| n.starts_with("main.")), "{names:?}");
    for d in [out, go] {
        std::fs::remove_dir_all(d).ok();
    }
}

/// A C store in two source files, built static with debug information (Debian's gcc and libc6-dev,
/// which `.ci/run` installs): its libc has none.
const C_STORE: &str = r#"#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
int checksum(const char *s, int n);
__attribute__((noinline)) static int save(const char *path, const char *data, int n) {
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    if (fd < 0) { perror("open"); return 2; }
    if (write(fd, data, n) != n) { perror("write"); return 3; }
    if (fsync(fd) != 0) { perror("fsync"); return 4; }
    return close(fd) == 0 ? 0 : 5;
}
int main(void) {
    const char rec[] = "complete";
    int rc = save("/data/record", rec, 8);
    printf("saved %d, checksum %d\n", rc, checksum(rec, 8));
    return rc;
}
"#;
const C_UTIL: &str = "__attribute__((noinline)) int checksum(const char *s, int n) {
    int c = 0;
    for (int i = 0; i < n; i++) c = c * 31 + s[i];
    return c;
}
";

#[test]
fn a_c_program_with_debug_information_is_covered_by_its_source_files() {
    let src = dir("c-src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("store.c"), C_STORE).unwrap();
    std::fs::write(src.join("util.c"), C_UTIL).unwrap();
    let cc = std::process::Command::new("gcc")
        .args(["-g", "-O1", "-static", "-o", "store", "store.c", "util.c"])
        .current_dir(&src)
        .output()
        .expect("gcc (Debian's gcc and libc6-dev)");
    assert!(cc.status.success(), "{}", String::from_utf8_lossy(&cc.stderr));
    let program = s(&src.join("store"));
    let args = |out: &str, extra: &[&'static str]| {
        let mut a = vec!["explore", "--runs", "40", "--mode", "faults", "--seed", "2", "--jobs", "1", "--quiet"];
        a.extend_from_slice(extra);
        a.extend_from_slice(&["--out", out, &program]);
        a.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let run = |a: Vec<String>| deja(&a.iter().map(String::as_str).collect::<Vec<_>>());

    // By default: the functions whose sources the debug information puts in the program's
    // directory, not libc's.
    let out = dir("c-own");
    let o = run(args(&s(&out), &["--block-coverage"]));
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", stderr(&o));
    let line = stderr(&o).lines().find(|l| l.starts_with("deja: explored")).expect("a closing line").to_string();
    assert!(line.contains(&format!("(scope {}/)", src.display())), "{line}");
    let b = campaign_report(&out)["blocks"].clone();
    let names = listed_functions(&b);
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(sorted, ["checksum", "main", "save"], "the store's functions and only them");
    let files: Vec<(String, u64)> = b["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["file"].as_str().unwrap().to_string(), f["functions"].as_u64().unwrap()))
        .collect();
    assert_eq!(files, [(s(&src.join("store.c")), 2), (s(&src.join("util.c")), 1)]);
    assert_eq!(b["functions_reached"].as_u64(), Some(3), "{b}");
    let text = std::fs::read_to_string(out.join("report.txt")).unwrap();
    assert!(text.contains("checksum (util.c)") && text.contains("source files (2 of 2 reached):"), "{text}");
    // The page draws the functions with their files, and the files.
    let dom = chromium_dom(&format!("file://{}", out.join("report.html").display()));
    assert!(dom.contains("class=\"functions-files\"") && dom.contains("checksum (util.c)"), "{dom}");
    assert!(dom.contains(&s(&src.join("util.c"))), "the source files' table");

    // A pattern with a slash names source files.
    let one = dir("c-file");
    let o = run(args(&s(&one), &["--block-coverage", "--cover", "/util.c"]));
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", stderr(&o));
    let b = campaign_report(&one)["blocks"].clone();
    assert_eq!(listed_functions(&b), ["checksum"], "{b}");
    assert_eq!(b["scope"], serde_json::json!(["/util.c"]));
    for d in [src, out, one] {
        std::fs::remove_dir_all(d).ok();
    }
}

#[test]
fn a_block_coverage_campaign_is_the_same_in_processes_on_different_cores() {
    let cores = host_cores();
    let (a, b) = (dir("core-a"), dir("core-b"));
    let program = s(&guest("pagestore-buggy"));
    let (sa, sb) = (s(&a), s(&b));
    let first = deja_on(cores[0], &[], &explore_args(&sa, &program, &["--block-coverage"]));
    let second = deja_on(*cores.last().unwrap(), &[], &explore_args(&sb, &program, &["--block-coverage"]));
    assert_eq!(first.status.code(), second.status.code(), "{}\n{}", stderr(&first), stderr(&second));
    let (ra, rb) = (campaign_report(&a), campaign_report(&b));
    assert!(ra["blocks"]["blocks_hit"].as_u64().unwrap() > 0);
    // The program's path and each bug's replay command name the campaign's own directory.
    let strip = |v: Value, dir: &str| {
        let mut v: Value = serde_json::from_str(&v.to_string().replace(dir, "OUT")).unwrap();
        v["program"] = Value::Null;
        v
    };
    assert_eq!(strip(ra, &sa), strip(rb, &sb), "same blocks, functions, corpus and bugs");
}

/// A shared object a program loads, compiled without debug information: three functions, one
/// never called (the program copies its code out through `write`).
const KV_LIB: &str = r#"
int kv_digest(const char *s, int n) {
    int h = 7;
    for (int i = 0; i < n; i++)
        h = h * 31 + s[i];
    return h;
}

int kv_records(const char *s, int n) {
    int count = 0;
    for (int i = 0; i + 3 < n; i++)
        if (s[i] == 'r' && s[i + 1] == 'e' && s[i + 2] == 'c' && s[i + 3] == ' ')
            count++;
    return count;
}

int kv_never(int x) {
    if (x > 100)
        return x / 3;
    return x * 3 + 1;
}
"#;

/// A store linked against that object. It acknowledges its records (`/data/ack`, synced)
/// before it syncs them (the bug: a crash between the two loses acknowledged records, and the
/// restart exits with code 3). It first writes the code of the library's `kv_never` into its
/// log through the kernel, which reads the mapping's original bytes whether breakpoints sit on
/// them or not.
const KV_STORE: &str = r#"
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

int kv_digest(const char *, int);
int kv_records(const char *, int);
int kv_never(int);

int main(void) {
    char buf[512];
    int fd = open("/data/log", O_CREAT | O_RDWR, 0644);
    if (fd < 0)
        return 2;
    if (access("/data/ack", F_OK) == 0) {
        int n = pread(fd, buf, sizeof buf, 0);
        if (n < 0)
            return 2;
        printf("%d\n", kv_digest(buf, n));
        return n > 16 && kv_records(buf + 16, n - 16) == 4 ? 0 : 3;
    }
    if (pwrite(fd, (const void *)kv_never, 16, 0) != 16)
        return 2;
    for (int i = 0; i < 4; i++) {
        char rec[32];
        int len = snprintf(rec, sizeof rec, "rec %d\n", i);
        if (pwrite(fd, rec, len, 16 + len * i) != len)
            return 2;
    }
    int ack = open("/data/ack", O_CREAT | O_WRONLY, 0644);
    int dir = open("/data", O_RDONLY | O_DIRECTORY);
    if (ack < 0 || dir < 0 || fsync(ack) != 0 || fsync(dir) != 0)
        return 2;
    return fsync(fd) == 0 ? 0 : 2;
}
"#;

#[test]
fn a_shared_library_is_covered_where_the_loader_maps_it() {
    let src = dir("dyn-src");
    std::fs::create_dir_all(src.join("lib")).unwrap();
    std::fs::write(src.join("kvlib.c"), KV_LIB).unwrap();
    std::fs::write(src.join("kvstore.c"), KV_STORE).unwrap();
    let cc = |args: &[&str]| {
        let o = std::process::Command::new("gcc").args(args).current_dir(&src).output().expect("gcc");
        assert!(o.status.success(), "gcc {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    };
    cc(&["-shared", "-fPIC", "-O1", "-o", "lib/libkv.so", "kvlib.c"]);
    cc(&["-O1", "-o", "kvstore", "kvstore.c", "-Llib", "-lkv", "-Wl,--enable-new-dtags,-rpath,$ORIGIN/lib"]);
    let program = s(&src.join("kvstore"));
    let args = |out: &str, extra: &[&'static str]| {
        let mut a = vec!["explore", "--runs", "60", "--mode", "faults", "--seed", "1", "--jobs", "1", "--quiet"];
        a.extend_from_slice(extra);
        a.extend_from_slice(&["--out", out, &program]);
        a.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let cores = host_cores();
    let on = |core: u32, a: Vec<String>| deja_on(core, &[], &a.iter().map(String::as_str).collect::<Vec<_>>());

    // By default: the program and its own library, not libc or the loader.
    let (a, b) = (dir("dyn-a"), dir("dyn-b"));
    let o = on(cores[0], args(&s(&a), &[]));
    assert_eq!(o.status.code(), Some(1), "the lost acknowledged records in 60 rounds: {}", stderr(&o));
    let report = campaign_report(&a);
    let blocks = &report["blocks"];
    assert_eq!(blocks["scope"], serde_json::json!(["/bin/kvstore", "/bin/lib/libkv.so"]), "{blocks}");
    let files: Vec<(String, u64, u64)> = blocks["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["file"].as_str().unwrap().to_string(),
                f["functions"].as_u64().unwrap(),
                f["functions_reached"].as_u64().unwrap(),
            )
        })
        .collect();
    // The library's three functions and what the compiler added (`frame_dummy`, `_init`, ...),
    // each reached but kv_never.
    assert!(
        matches!(&files[..], [(f, n, r)] if f == "/bin/lib/libkv.so" && *n >= 3 && *r == n - 1),
        "the library and only it, all its functions reached but one: {files:?}"
    );
    let never: Vec<&str> = blocks["never"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert!(never.contains(&"kv_never"), "{never:?}");
    let latest: Vec<&str> = blocks["latest"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert!(latest.contains(&"kv_digest") && latest.contains(&"kv_records"), "{latest:?}");
    // The bug's run wrote kv_never's code while its breakpoints were armed (it is never
    // reached, so never disarmed); the replay, without breakpoints, gives the same run.
    let r = deja(&["replay", &s(&bug_file(&a))]);
    assert_eq!(r.status.code(), Some(1), "{}", stderr(&r));
    assert!(stderr(&r).contains("reproduced bug"), "{}", stderr(&r));

    // The same campaign in another process on another core: the same blocks, corpus and bug.
    let o = on(*cores.last().unwrap(), args(&s(&b), &[]));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let strip = |v: Value, dir: &str| {
        let mut v: Value = serde_json::from_str(&v.to_string().replace(dir, "OUT")).unwrap();
        v["program"] = Value::Null;
        v
    };
    assert_eq!(strip(report, &s(&a)), strip(campaign_report(&b), &s(&b)));

    // Every function: libc and the loader too, each shown in its object.
    let all = dir("dyn-all");
    let o = on(cores[0], args(&s(&all), &["--cover", "*"]));
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", stderr(&o));
    let blocks = campaign_report(&all)["blocks"].clone();
    // The report's line of the object whose path holds `name`.
    let object = |name: &str| {
        let files = blocks["files"].as_array().unwrap();
        let line = files.iter().find(|f| f["file"].as_str().unwrap().contains(name));
        line.unwrap_or_else(|| panic!("{name}'s functions: {blocks}")).clone()
    };
    let libc = object("/libc.so.");
    assert!(libc["blocks_reached"].as_u64().unwrap() > 100, "{libc}");
    // The ELF interpreter too, which the kernel maps before the program runs.
    let loader = object("/ld-linux");
    assert!(loader["blocks_reached"].as_u64().unwrap() > 20, "{loader}");
    for d in [src, a, b, all] {
        std::fs::remove_dir_all(d).ok();
    }
}

#[test]
fn a_clusters_nodes_are_covered_and_the_campaign_is_the_same_on_two_cores() {
    let cores = host_cores();
    let file = s(&root().join("examples/clusters/walkv-buggy.toml"));
    guests();
    let (a, b) = (dir("cluster-a"), dir("cluster-b"));
    let args = |out: &Path| {
        let out = s(out);
        let a = [
            "explore", "--runs", "40", "--mode", "faults", "--seed", "3", "--jobs", "1", "--quiet", "--out", &out,
            &file,
        ];
        a.iter().map(|x| x.to_string()).collect::<Vec<_>>()
    };
    let on = |core: u32, a: Vec<String>| deja_on(core, &[], &a.iter().map(String::as_str).collect::<Vec<_>>());
    let first = on(cores[0], args(&a));
    assert_eq!(first.status.code(), Some(1), "the lost acknowledged write: {}", stderr(&first));
    let line = stderr(&first).lines().find(|l| l.starts_with("deja: explored")).expect("a closing line").to_string();
    assert!(line.contains(" blocks, ") && line.contains("(scope walkv::*"), "{line}");
    let report = campaign_report(&a);
    let blocks = &report["blocks"];
    let (hit, total) = (blocks["blocks_hit"].as_u64().unwrap(), blocks["blocks_total"].as_u64().unwrap());
    assert!(hit > 100 && hit < total, "blocks reached {hit} of {total}");
    // The server's program and the client's, one id space, their functions by name.
    let names = listed_functions(blocks);
    assert!(
        names.iter().any(|n| n == "walkv::Store::open") && names.iter().any(|n| n == "walkv::Client::put"),
        "{names:?}"
    );
    let r = deja(&["replay", &s(&bug_file(&a))]);
    assert_eq!(r.status.code(), Some(1), "the bug, found with breakpoints, replays without: {}", stderr(&r));
    let second = on(*cores.last().unwrap(), args(&b));
    assert_eq!(second.status.code(), Some(1), "{}", stderr(&second));
    let strip = |v: Value, dir: &str| serde_json::from_str::<Value>(&v.to_string().replace(dir, "OUT")).unwrap();
    assert_eq!(strip(report, &s(&a)), strip(campaign_report(&b), &s(&b)), "same blocks, corpus and bugs");
    for d in [a, b] {
        std::fs::remove_dir_all(d).ok();
    }
}

/// A program that executes itself again (with an argument that takes it to a function nothing
/// else reaches) and another program, each in a forked child.
const EXEC_MAIN: &str = r#"
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

__attribute__((noinline)) int only_in_the_child(int n) {
    int s = 0;
    for (int i = 0; i < n; i++)
        s += i * 7;
    return s;
}

static void run(const char *path, const char *name, const char *arg) {
    pid_t pid = fork();
    if (pid == 0) {
        execl(path, name, arg, (char *)0);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "child") == 0) {
        printf("%d\n", only_in_the_child(10));
        return 0;
    }
    run("/bin/execer", "execer", "child");
    run("/bin/helper", "helper", (const char *)0);
    return 0;
}
"#;

const EXEC_HELPER: &str = r#"
#include <stdio.h>

__attribute__((noinline)) int helper_work(int x) {
    return x * 2 + 1;
}

int main(int argc, char **argv) {
    (void)argv;
    printf("%d\n", helper_work(20 + argc));
    return 0;
}
"#;

#[test]
fn code_a_process_executes_is_covered_the_program_itself_again_and_another() {
    let src = dir("exec-src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("execer.c"), EXEC_MAIN).unwrap();
    std::fs::write(src.join("helper.c"), EXEC_HELPER).unwrap();
    for name in ["execer", "helper"] {
        let o = std::process::Command::new("gcc")
            .args(["-g", "-O1", "-static", "-o", name, &format!("{name}.c")])
            .current_dir(&src)
            .output()
            .expect("gcc");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let out = dir("exec-out");
    let helper = format!("{}:/bin/helper", src.join("helper").display());
    let mut args: Vec<&str> = "explore --runs 5 --mode faults --seed 1 --jobs 1 --quiet --file".split(' ').collect();
    let (out_s, program) = (s(&out), s(&src.join("execer")));
    args.extend([helper.as_str(), "--out", &out_s, &program]);
    let o = deja(&args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let b = campaign_report(&out)["blocks"].clone();
    // Both programs' own functions (their sources are in one directory), none of libc's.
    assert_eq!(b["scope"], serde_json::json!([format!("{}/", src.display())]), "{b}");
    assert_eq!(b["functions_total"].as_u64(), Some(5), "execer's main, run and only_in_the_child; helper's two: {b}");
    let reached: Vec<String> = b["latest"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| format!("{} ({})", f["name"].as_str().unwrap(), f["file"].as_str().unwrap_or("")))
        .collect();
    for f in ["only_in_the_child", "helper_work", "main", "run"] {
        assert!(reached.iter().any(|r| r.starts_with(&format!("{f} ("))), "{f} reached: {reached:?}");
    }
    assert!(reached.iter().any(|r| r == &format!("helper_work ({})", src.join("helper.c").display())), "{reached:?}");
    assert_eq!(b["never"].as_array().unwrap().len(), 0, "{b}");
    for d in [src, out] {
        std::fs::remove_dir_all(d).ok();
    }
}
