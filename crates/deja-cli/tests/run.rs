//! `deja run` end to end on real KVM: output, determinism, bad input, faults.

use crate::common::*;
use std::process::Command;

fn s(p: &std::path::Path) -> String {
    p.to_string_lossy().into_owned()
}

#[test]
fn hello_world_prints_its_output_and_a_summary() {
    let out = deja(&["run", &s(&guest("hello"))]);
    assert_eq!(stdout(&out), "Hello from a deja guest!\n", "deja's stdout carries only the program's stdout");
    assert_eq!(out.status.code(), Some(0));
    let err = stderr(&out);
    assert!(err.contains("deja: exited with code 0"), "{err}");
    assert!(err.contains("deja: trace digest "), "{err}");
    assert!(err.contains("deja: host determinism hazards"), "{err}");
    assert!(err.contains("virtual time"), "{err}");
}

#[test]
fn non_pie_static_executable_runs_too() {
    guests();
    let nopie = root().join("target/guests/nopie/hello");
    let (out, v) = run_json(&[&s(&nopie)]);
    assert_eq!(stdout(&out), "Hello from a deja guest!\n");
    assert_eq!(v["exit_code"], 0);
}

#[test]
fn same_seed_same_output_other_seed_other_output() {
    let t = s(&guest("timerand"));
    let a = deja(&["run", "--no-probe", "--seed", "7", &t]);
    let b = deja(&["run", "--no-probe", "--seed", "7", &t]);
    let c = deja(&["run", "--no-probe", "--seed", "8", &t]);
    assert_eq!(a.status.code(), Some(0), "{}", stderr(&a));
    assert_eq!(a.stdout, b.stdout, "same seed must print byte-identical output");
    assert_ne!(a.stdout, c.stdout, "another seed must print different output");
    let text = stdout(&a);
    assert!(text.contains("slept; monotonic elapsed: 250"), "virtual sleep is exact: {text}");
}

#[test]
fn audit_five_runs_are_identical() {
    let t = s(&guest("timerand"));
    let out = deja(&["run", "--no-probe", "--audit", "5", "--seed", "3", &t]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("deja: audit: identical over 5 runs (this process and 4 fresh processes"), "{err}");
}

#[test]
fn digests_match_across_processes_and_differ_across_seeds() {
    let t = s(&guest("timerand"));
    let (_, a) = run_json(&["--seed", "1", &t]);
    let (_, b) = run_json(&["--seed", "1", &t]);
    let (_, c) = run_json(&["--seed", "2", &t]);
    assert_eq!(a["digest"], b["digest"]);
    assert_ne!(a["digest"], c["digest"]);
    assert!(a["digest"].as_str().unwrap().len() == 64);
}

#[test]
fn cpu_bound_program_matches_native_output() {
    let p = guest("cpuburn");
    let native = Command::new(&p).arg("20").output().unwrap();
    let (out, v) = run_json(&[&s(&p), "--", "20"]);
    assert_eq!(out.stdout, native.stdout);
    assert_eq!(v["exit_code"], 0);
}

#[test]
fn memory_hungry_program_runs_and_gets_enomem_past_the_vm() {
    let p = s(&guest("memhog"));
    let (out, v) = run_json(&[&p, "--", "128"]);
    assert_eq!(v["exit_code"], 0, "{}", stderr(&out));
    let native = Command::new(guest("memhog")).arg("128").output().unwrap();
    assert_eq!(out.stdout, native.stdout);
    let (out, v) = run_json(&["--memory", "256", &p, "--", "1024"]);
    assert_eq!(v["exit_code"], 3, "{}", stderr(&out));
    assert!(stdout(&out).contains("allocation of 1024 MiB refused (ENOMEM)"));
}

#[test]
fn a_fault_that_repeats_across_syscalls_is_a_program_retrying() {
    // The same store faults on the same fresh page in each of 40 rounds of mmap, touch, munmap:
    // every fault is served, and none is mistaken for a mapping the monitor failed to install.
    let out = deja(&["run", "--no-probe", &s(&guest("memhog")), "--", "remap", "40"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("memhog: remapped 40 times"), "{}", stdout(&out));
}

#[test]
fn wild_pointers_get_efault() {
    let (out, v) = run_json(&[&s(&guest("badptr"))]);
    assert!(stdout(&out).contains("all EFAULT: true"), "{}", stdout(&out));
    assert_eq!(v["exit_code"], 0);
}

#[test]
fn privileged_instruction_ends_the_program_like_linux() {
    let p = s(&guest("privileged"));
    for (what, code, signal) in [
        ("hlt", 139, "SIGSEGV"),
        ("cli", 139, "SIGSEGV"),
        ("ud2", 132, "SIGILL"),
        ("null", 139, "SIGSEGV"),
        ("int3", 133, "SIGTRAP"),
        ("div0", 136, "SIGFPE"),
        ("in", 139, "SIGSEGV"),
        ("out", 139, "SIGSEGV"),
    ] {
        let out = deja(&["run", "--no-probe", &p, "--", what]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(code), "{what}: {err}");
        assert!(err.contains(signal) && err.contains("at rip 0x"), "{what}: {err}");
        assert!(stdout(&out).contains(&format!("about to: {what}")));
        assert!(!stdout(&out).contains("survived"));
    }
    let out = deja(&["run", "--no-probe", &p, "--", "null"]);
    assert!(stderr(&out).contains("address 0x10"), "{}", stderr(&out));
}

#[test]
fn rdtsc_keeps_the_program_running() {
    let (out, v) = run_json(&[&s(&guest("privileged")), "--", "rdtsc"]);
    assert_eq!(v["exit_code"], 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("rdtsc: true"));
}

#[test]
fn declared_files_stdin_env_and_args_reach_the_program() {
    let dir = std::env::temp_dir().join(format!("deja-cat-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let data = dir.join("data.txt");
    std::fs::write(&data, "file contents").unwrap();
    let input = dir.join("input.txt");
    std::fs::write(&input, "from stdin").unwrap();
    let file_decl = format!("{}:/etc/data.txt", data.display());
    let (out, v) = run_json(&[
        "--file",
        &file_decl,
        "--stdin",
        &s(&input),
        "--env",
        "GREETING=hi",
        &s(&guest("cat")),
        "--",
        "/etc/data.txt",
    ]);
    let text = stdout(&out);
    assert_eq!(v["exit_code"], 0, "{text}{}", stderr(&out));
    assert!(text.contains(r#"argv: ["/bin/cat", "/etc/data.txt"]"#), "{text}");
    // What it was given and the variable that names deja's device for the Antithesis SDKs'
    // messages, nothing of the host's.
    let want = r#"env: [("ANTITHESIS_SDK_LOCAL_OUTPUT", "/dev/antithesis-sdk.jsonl"), ("GREETING", "hi")]"#;
    assert!(text.contains(want), "host environment must not leak: {text}");
    assert!(text.contains(r#"stdin: "from stdin""#), "{text}");
    assert!(text.contains(r#"/etc/data.txt: "file contents""#), "{text}");
    // An undeclared host file is invisible.
    let (out, v) = run_json(&[&s(&guest("cat")), "--", &s(&data)]);
    assert_eq!(v["exit_code"], 1);
    assert!(stderr(&out).contains("No such file"), "{}", stderr(&out));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_declared_directory_brings_every_file_below_it() {
    let dir = std::env::temp_dir().join(format!("deja-tree-{}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    std::fs::create_dir_all(dir.join("sub/deeper")).unwrap();
    std::fs::write(dir.join("a.txt"), "top").unwrap();
    std::fs::write(dir.join("sub/deeper/b.txt"), "below").unwrap();
    // A symlink back up the tree is followed once, a dangling one is no input.
    std::os::unix::fs::symlink("..", dir.join("sub/up")).unwrap();
    std::os::unix::fs::symlink("/nonexistent-deja-target", dir.join("dangling")).unwrap();
    let decl = format!("{}:/srv/tree", dir.display());
    let (out, v) =
        run_json(&["--file", &decl, &s(&guest("cat")), "--", "/srv/tree/a.txt", "/srv/tree/sub/deeper/b.txt"]);
    let text = stdout(&out);
    assert_eq!(v["exit_code"], 0, "{text}{}", stderr(&out));
    assert!(text.contains(r#"/srv/tree/a.txt: "top""#), "{text}");
    assert!(text.contains(r#"/srv/tree/sub/deeper/b.txt: "below""#), "{text}");
    // Only what is below the directory: its siblings stay invisible.
    let sibling = dir.with_extension("other");
    std::fs::write(&sibling, "not declared").unwrap();
    let (out, v) = run_json(&["--file", &decl, &s(&guest("cat")), "--", "/srv/tree/../tree.other", &s(&sibling)]);
    assert_eq!(v["exit_code"], 1, "{}", stdout(&out));
    std::fs::remove_file(&sibling).ok();
    // A missing directory is a clear error before the run.
    let out = deja(&["run", "--no-probe", "--file", "/nonexistent-deja-dir:/x", &s(&guest("cat"))]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("cannot read declared file /nonexistent-deja-dir"), "{}", stderr(&out));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_dynamically_linked_debian_binary_runs_with_its_loader_and_libraries() {
    // /bin/echo as the host has it: glibc's loader and libc come from the host, declared as
    // inputs, and the run is the same in fresh processes on every core.
    let out = deja(&["run", "--no-probe", "--audit", "3", "/bin/echo", "--", "hello", "from", "ld.so"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(stdout(&out), "hello from ld.so\n");
    assert!(err.contains("deja: audit: identical over 3 runs"), "{err}");
    assert!(err.contains("code rewritten: /lib64/ld-linux-x86-64.so.2"), "the loader's code is rewritten: {err}");
    assert!(err.contains("libc.so.6"), "so is libc's: {err}");
    // The report names the loader and libc among the code it rewrote.
    let (_, v) = run_json(&["/bin/echo", "--", "x"]);
    let objects = v["host_channels"]["objects"].as_array().expect("objects").clone();
    let names: Vec<&str> = objects.iter().filter_map(|o| o["name"].as_str()).collect();
    assert!(names.contains(&"/lib64/ld-linux-x86-64.so.2"), "{names:?}");
    assert!(names.iter().any(|n| n.ends_with("/libc.so.6")), "{names:?}");
}

#[test]
fn a_programs_own_library_is_found_through_its_origin_relative_run_path() {
    // A C program and its shared library, as a project ships them: the library beside the
    // program (in lib/), found through DT_RUNPATH $ORIGIN/lib, and glibc's from the host.
    let dir = std::env::temp_dir().join(format!("deja-origin-{}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    std::fs::create_dir_all(dir.join("lib")).unwrap();
    std::fs::write(dir.join("greet.c"), "const char *greeting(void) { return \"hello from libgreet\"; }\n").unwrap();
    std::fs::write(
        dir.join("main.c"),
        "#include <stdio.h>\nconst char *greeting(void);\nint main(void) { puts(greeting()); return 0; }\n",
    )
    .unwrap();
    let cc = |args: &[&str]| {
        let out = std::process::Command::new("gcc").args(args).current_dir(&dir).output().expect("gcc");
        assert!(out.status.success(), "gcc {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    cc(&["-shared", "-fPIC", "-o", "lib/libgreet.so", "greet.c"]);
    cc(&["-o", "prog", "main.c", "-Llib", "-lgreet", "-Wl,--enable-new-dtags,-rpath,$ORIGIN/lib"]);
    let prog = s(&dir.join("prog"));
    let out = deja(&["run", "--no-probe", "--audit", "2", &prog]);
    assert_eq!(stdout(&out), "hello from libgreet\n", "{}", stderr(&out));
    assert!(stderr(&out).contains("deja: audit: identical over 2 runs"), "{}", stderr(&out));
    // Named relatively, from its own directory: $ORIGIN is that directory, not the host's `/`.
    let out =
        std::process::Command::new(deja_bin()).args(["run", "--no-probe", "prog"]).current_dir(&dir).output().unwrap();
    assert_eq!(stdout(&out), "hello from libgreet\n", "{}", stderr(&out));
    // Without the library, the run is refused before it starts, naming what is missing.
    std::fs::remove_file(dir.join("lib/libgreet.so")).unwrap();
    let out = deja(&["run", "--no-probe", &prog]);
    assert_eq!(out.status.code(), Some(126), "{}", stderr(&out));
    assert!(stderr(&out).contains("needs libgreet.so, which is in none of"), "{}", stderr(&out));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_library_found_only_through_ld_so_cache_runs_with_the_cache_declared() {
    // A program needing libgreet.so.1, which is only in /opt/lib, a directory that only the
    // root's /etc/ld.so.conf lists: `ldconfig -r` writes the root's /etc/ld.so.cache (the
    // host's /etc is not touched), glibc's loader and libc come from the host.
    let dir = std::env::temp_dir().join(format!("deja-ldcache-{}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    let root = dir.join("root");
    for d in ["opt/lib/glibc-hwcaps/x86-64-v3", "opt/bin", "etc"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    let greet = |text: &str| format!("const char *greeting(void) {{ return \"{text}\"; }}\n");
    std::fs::write(dir.join("greet.c"), greet("hello from the cache")).unwrap();
    std::fs::write(dir.join("greet-v3.c"), greet("hello from x86-64-v3")).unwrap();
    std::fs::write(
        dir.join("main.c"),
        "#include <stdio.h>\nconst char *greeting(void);\nint main(void) { puts(greeting()); return 0; }\n",
    )
    .unwrap();
    let cc = |args: &[&str]| {
        let out = Command::new("gcc").args(args).current_dir(&dir).output().expect("gcc");
        assert!(out.status.success(), "gcc {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    cc(&["-shared", "-fPIC", "-Wl,-soname,libgreet.so.1", "-o", "root/opt/lib/libgreet.so.1", "greet.c"]);
    cc(&["-o", "root/opt/bin/prog", "main.c", "root/opt/lib/libgreet.so.1"]);
    let echo = std::fs::read("/bin/echo").unwrap();
    for (path, data) in deja_inputs::dynlink::host_closure(&echo, "/bin/echo".as_ref(), "/bin/echo").unwrap() {
        let at = root.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::fs::write(at, data).unwrap();
    }
    std::fs::write(root.join("etc/ld.so.conf"), "/opt/lib\n").unwrap();
    let ldconfig = ["/usr/sbin/ldconfig", "/sbin/ldconfig"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("glibc's ldconfig");
    let ldconfig = |extra: &[&str]| {
        let out = Command::new(ldconfig).arg("-r").arg(&root).args(extra).output().unwrap();
        assert!(out.status.success(), "ldconfig: {}", String::from_utf8_lossy(&out.stderr));
    };
    ldconfig(&[]);
    let native = Command::new(root.join("opt/bin/prog")).env("LD_LIBRARY_PATH", root.join("opt/lib")).output().unwrap();
    assert_eq!(stdout(&native), "hello from the cache\n");

    // The root as it is: the loader in the guest reads the root's cache.
    let out = deja(&["run", "--no-probe", "--root", &s(&root), "/opt/bin/prog"]);
    assert_eq!(stdout(&out), stdout(&native), "{}", stderr(&out));

    // The closure of the program, found in the root as on a host with that cache, holds the
    // cache and the library; a root of nothing but those files runs the program, and does not
    // without the cache.
    let prog = std::fs::read(root.join("opt/bin/prog")).unwrap();
    let closure = |cache_format: &[&str]| {
        ldconfig(cache_format);
        let cache = std::fs::read(root.join("etc/ld.so.cache")).unwrap();
        let read = |p: &str| std::fs::read(root.join(p.trim_start_matches('/')));
        deja_inputs::dynlink::closure(&prog, "/opt/bin/prog".as_ref(), "/opt/bin/prog", Some(&cache), &read).unwrap()
    };
    let declared = dir.join("declared");
    let run_declared = |files: &std::collections::BTreeMap<String, Vec<u8>>, leave_out: &str| {
        std::fs::remove_dir_all(&declared).ok();
        for (path, data) in files.iter().filter(|f| f.0 != leave_out) {
            let at = declared.join(path.trim_start_matches('/'));
            std::fs::create_dir_all(at.parent().unwrap()).unwrap();
            std::fs::write(at, data).unwrap();
        }
        std::fs::create_dir_all(declared.join("opt/bin")).unwrap();
        std::fs::write(declared.join("opt/bin/prog"), &prog).unwrap();
        deja(&["run", "--no-probe", "--root", &s(&declared), "/opt/bin/prog"])
    };
    for format in [&[][..], &["-c", "compat"]] {
        let files = closure(format);
        assert!(files.contains_key("/etc/ld.so.cache"), "{format:?}: {:?}", files.keys());
        assert!(files.contains_key("/opt/lib/libgreet.so.1"), "{format:?}: {:?}", files.keys());
        let out = run_declared(&files, "");
        assert_eq!(stdout(&out), "hello from the cache\n", "{format:?}: {}", stderr(&out));
        let out = run_declared(&files, "/etc/ld.so.cache");
        assert_eq!(out.status.code(), Some(127), "{}", stderr(&out));
        assert!(stderr(&out).contains("libgreet.so.1: cannot open shared object file"), "{}", stderr(&out));
    }

    // A build for x86-64-v3 beside it, in the cache as a glibc-hwcaps entry (glibc 2.33 on).
    // deja's CPU is x86-64-v3 on every host, so the loader takes that build: it is declared
    // too, and without it the loader, not finding the file the cache names, goes on to the
    // default directories and fails.
    let v3 = "/opt/lib/glibc-hwcaps/x86-64-v3/libgreet.so.1";
    cc(&["-shared", "-fPIC", "-Wl,-soname,libgreet.so.1", "-o", &format!("root{v3}"), "greet-v3.c"]);
    let files = closure(&[]);
    let cache = deja_inputs::ldcache::LdCache::parse(&files["/etc/ld.so.cache"]).unwrap();
    if !cache.lookup("libgreet.so.1").choices.contains(&v3) {
        eprintln!("this ldconfig writes no glibc-hwcaps entries: the hwcaps part is skipped");
    } else {
        assert!(files.contains_key(v3) && files.contains_key("/opt/lib/libgreet.so.1"), "{:?}", files.keys());
        let out = run_declared(&files, "");
        assert_eq!(stdout(&out), "hello from x86-64-v3\n", "{}", stderr(&out));
        let out = run_declared(&files, v3);
        assert_eq!(out.status.code(), Some(127), "{}", stderr(&out));
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn unsupported_syscalls_are_listed_by_name() {
    let out = deja(&["run", "--no-probe", &s(&guest("syscalls")), "--", "10"]);
    let err = stderr(&out);
    assert!(stdout(&out).contains("io_uring_setup -> -38"), "{}", stdout(&out));
    assert!(err.contains("unsupported syscalls (answered ENOSYS): io_uring_setup ×1"), "{err}");
    let (_, v) = run_json(&[&s(&guest("syscalls")), "--", "10"]);
    assert_eq!(v["unsupported_syscalls"]["io_uring_setup"], 1);
    assert!(v["syscall_counts"]["getppid"].as_u64().unwrap() >= 10);
}

#[test]
fn trace_out_writes_every_syscall() {
    let path = std::env::temp_dir().join(format!("deja-trace-{}.jsonl", std::process::id()));
    let (_, v) = run_json(&["--trace-out", &s(&path), &s(&guest("hello"))]);
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len() as u64, v["syscalls"].as_u64().unwrap());
    assert!(lines.iter().any(|l| l["name"] == "write"));
    assert_eq!(lines.last().unwrap()["name"], "exit_group");
    std::fs::remove_file(&path).ok();
}

#[test]
fn trace_out_renders_every_syscall_by_its_argument_kinds() {
    let path = std::env::temp_dir().join(format!("deja-trace-text-{}.jsonl", std::process::id()));
    run_json(&["--trace-out", &s(&path), &s(&guest("hello"))]);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).ok();
    let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    for l in &lines {
        let name = l["name"].as_str().unwrap();
        assert!(l["text"].as_str().unwrap().starts_with(&format!("{name}(")), "{l}");
    }
    let writes: Vec<&serde_json::Value> = lines.iter().filter(|l| l["name"] == "write").collect();
    assert!(!writes.is_empty());
    for w in &writes {
        let (fd, buf, len, ret) = (&w["args"][0], w["args"][1].as_u64().unwrap(), &w["args"][2], &w["ret"]);
        assert_eq!(w["text"].as_str().unwrap(), format!("write({fd}, {buf:#x}, {len}) = {ret}"));
    }
    let greeting = "Hello from a deja guest!\n".len();
    let shown = format!(", {greeting}) = {greeting}");
    assert!(
        writes
            .iter()
            .any(|w| w["text"].as_str().unwrap().starts_with("write(1, 0x")
                && w["text"].as_str().unwrap().ends_with(&shown)),
        "{text}"
    );
    assert_eq!(lines.last().unwrap()["text"], "exit_group(0) = ?");
}

#[test]
fn bad_programs_get_clear_errors() {
    let dir = std::env::temp_dir().join(format!("deja-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Not ELF.
    let text = dir.join("script.sh");
    std::fs::write(&text, "#!/bin/sh\necho hi\n").unwrap();
    let out = deja(&["run", "--no-probe", &s(&text)]);
    assert_eq!(out.status.code(), Some(126));
    assert!(stderr(&out).contains("not an ELF"), "{}", stderr(&out));
    // 32-bit ELF header.
    let mut elf32 = vec![0x7f, b'E', b'L', b'F', 1, 1, 1, 0];
    elf32.resize(64, 0);
    let p32 = dir.join("prog32");
    std::fs::write(&p32, &elf32).unwrap();
    let out = deja(&["run", "--no-probe", &s(&p32)]);
    assert_eq!(out.status.code(), Some(126));
    assert!(stderr(&out).contains("32-bit"), "{}", stderr(&out));
    // Truncated ELF.
    let trunc = dir.join("trunc");
    let hello = std::fs::read(guest("hello")).unwrap();
    std::fs::write(&trunc, &hello[..200]).unwrap();
    let out = deja(&["run", "--no-probe", &s(&trunc)]);
    assert_eq!(out.status.code(), Some(126), "{}", stderr(&out));
    // Dynamically linked, with a loader that is not there.
    let mut dynamic = std::fs::read("/bin/true").unwrap();
    let at = dynamic.windows(27).position(|w| w == b"/lib64/ld-linux-x86-64.so.2").expect("PT_INTERP");
    dynamic[at..at + 27].copy_from_slice(b"/lib64/ld-deja-missing.so.2");
    let nold = dir.join("noloader");
    std::fs::write(&nold, &dynamic).unwrap();
    let out = deja(&["run", "--no-probe", &s(&nold)]);
    assert_eq!(out.status.code(), Some(126), "{}", stderr(&out));
    assert!(stderr(&out).contains("cannot read the interpreter /lib64/ld-deja-missing.so.2"), "{}", stderr(&out));
    // Missing.
    let out = deja(&["run", "--no-probe", "/nonexistent/program"]);
    assert_eq!(out.status.code(), Some(127));
    assert!(stderr(&out).contains("cannot read program"), "{}", stderr(&out));
    // Nonsense guest RAM.
    let out = deja(&["run", "--no-probe", "--memory", "1", &s(&guest("hello"))]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("between 16 and 65536 MiB"), "{}", stderr(&out));
    // Missing declared file.
    let out = deja(&["run", "--no-probe", "--file", "/nonexistent/data", &s(&guest("hello"))]);
    assert_eq!(out.status.code(), Some(127));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn doctor_reports_kvm_and_hazards() {
    let out = deja(&["doctor"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("/dev/kvm opens"), "{text}");
    assert!(text.contains("Host channels: what closes each on this host"), "{text}");
    for channel in ["cpuid", "rdtsc", "rdtscp", "rdpid", "rdrand", "rdseed", "xgetbv"] {
        assert!(text.contains(&format!("closed  {channel:<7} Rewriting: ")), "{channel}: {text}");
    }
    let out = deja(&["doctor", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["usable"], true);
    assert!(v["cpu_identity"]["probe"]["rdtsc_trapped"].is_boolean());
    assert!(text.contains("CPU identity: what a guest can learn about this host's CPU"), "{text}");
    assert!(text.contains("remedy in force: "), "{text}");
    assert!(text.contains("host CPU fingerprint "), "{text}");
    // Either the host's own CPUID varies with the core, or doctor says it does not.
    assert!(
        text.contains("hazard  CPUID varies with the host core")
            || text.contains("ok      CPUID does not vary with the host core"),
        "{text}"
    );
}

#[test]
fn audit_catches_a_program_that_reads_host_time() {
    // With rewriting (the default) the program's rdtsc traps to deja on every host and the
    // runs agree. Without it, whether raw RDTSC is deterministic depends on the host: where it
    // traps (CR4.TSD), deja serves it from the virtual clock; where it does not, the program
    // sees host time and the audit must say so.
    let p = s(&guest("privileged"));
    let (out, v) = run_json(&["--audit", "3", &p, "--", "rdtsc-value"]);
    assert_eq!(v["audit"]["result"], "identical", "{}", stderr(&out));
    assert_eq!(out.status.code(), Some(0));
    assert!(v["host_channels"]["traps"]["rdtsc"].as_u64().unwrap() >= 1, "{}", v["host_channels"]);
    let off = [("DEJA_REWRITE", "off")];
    let with_env =
        |args: &[&str]| std::process::Command::new(deja_bin()).args(args).envs(off).output().expect("start deja");
    let doctor: serde_json::Value = serde_json::from_slice(&with_env(&["doctor", "--json"]).stdout).unwrap();
    let trapped = doctor["cpu_identity"]["probe"]["rdtsc_trapped"].as_bool().unwrap();
    let out = with_env(&["run", "--json", "--no-probe", "--audit", "3", &p, "--", "rdtsc-value"]);
    let v: serde_json::Value = serde_json::from_str(stderr(&out).lines().last().unwrap()).unwrap();
    if trapped {
        assert_eq!(v["audit"]["result"], "identical", "{}", stderr(&out));
        assert_eq!(out.status.code(), Some(0));
    } else {
        assert_eq!(v["audit"]["result"], "diverged", "{}", stderr(&out));
        assert_eq!(out.status.code(), Some(124));
        // The first syscall that differs is the write of the counter's digits.
        let index = v["audit"]["first_diverging_syscall"].as_u64().unwrap();
        let trace = std::env::temp_dir().join(format!("deja-rdtsc-{}.jsonl", std::process::id()));
        with_env(&["run", "--no-probe", "--trace-out", &s(&trace), &p, "--", "rdtsc-value"]);
        let lines: Vec<serde_json::Value> =
            std::fs::read_to_string(&trace).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        std::fs::remove_file(&trace).ok();
        assert_eq!(lines[index as usize]["name"], "write", "{:?}", lines[index as usize]);
        let text = with_env(&["run", "--no-probe", "--audit", "2", &p, "--", "rdtsc-value"]);
        assert!(stderr(&text).contains("deja: audit: DIVERGED: fresh process 1"), "{}", stderr(&text));
        assert!(stderr(&text).contains("the syscall trace, first at syscall"), "{}", stderr(&text));
        let named = ["the bytes it moved: data ", "the result: "].iter().any(|f| stderr(&text).contains(f));
        assert!(named, "names the field that differs: {}", stderr(&text));
    }
}
