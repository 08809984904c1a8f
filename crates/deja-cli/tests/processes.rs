//! Processes end to end, through real shells: Debian's busybox (static, `/usr/bin/busybox`, from
//! the `busybox-static` package `.ci/run` installs) runs `sh -c` scripts under `deja run
//! --audit 3` (pipelines, subshells, command substitution, background jobs and `wait`,
//! here-documents, redirections, `xargs`, traps, functions in pipelines, `exec`, `#!` scripts),
//! and the host's bash (dynamically linked: `deja run` declares its libraries) runs a script
//! with external commands. Each script runs natively too, by the same binary, with the same
//! `PATH` and an empty environment otherwise, in a fresh directory; stdout and the exit status
//! must be the same, and every run under deja the same over 3 runs.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common::*;

const BUSYBOX: &str = "/usr/bin/busybox";
const PATH: &str = "/usr/bin:/bin";

/// What a run showed: stdout, and the exit status (128 + signal for a signal).
#[derive(Debug, PartialEq, Eq)]
struct Ran {
    stdout: String,
    status: i32,
}

/// Busybox (the test fails without it).
fn busybox() -> &'static str {
    needs(&[BUSYBOX], "busybox-static");
    BUSYBOX
}

/// A fresh directory under the host's temporary directory.
fn scratch() -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "deja-processes-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `prog args` natively: an empty environment but `PATH`, stdin empty, in a fresh directory.
fn native(prog: &str, args: &[&str]) -> Ran {
    use std::os::unix::process::ExitStatusExt;
    let dir = scratch();
    let out = Command::new(prog)
        .args(args)
        .env_clear()
        .env("PATH", PATH)
        .current_dir(&dir)
        .stdin(Stdio::null())
        .output()
        .expect("run natively");
    std::fs::remove_dir_all(&dir).ok();
    let status = out.status.code().unwrap_or_else(|| 128 + out.status.signal().unwrap_or(0));
    Ran { stdout: stdout(&out), status }
}

/// `prog args` under `deja run --audit 3` with `PATH` and the declared `files` (`HOST:GUEST`);
/// the runs must be identical. Returns what the program did and deja's stderr.
fn under_deja(prog: &str, files: &[&str], args: &[&str]) -> (Ran, String) {
    let env = format!("PATH={PATH}");
    let mut full = vec!["run", "--no-probe", "--audit", "3", "--env", &env];
    for f in files {
        full.extend(["--file", f]);
    }
    full.push(prog);
    full.push("--");
    full.extend_from_slice(args);
    let out = deja(&full);
    let err = stderr(&out);
    assert!(
        err.contains("deja: audit: identical over 3 runs"),
        "{prog} {args:?} is not deterministic under deja:\n{err}"
    );
    (Ran { stdout: stdout(&out), status: out.status.code().expect("deja exits") }, err)
}

/// Runs `busybox sh -c script` natively and under deja, and compares; returns what it printed
fn sh(script: &str) -> Ran {
    let bb = busybox();
    let n = native(bb, &["sh", "-c", script]);
    let (d, err) = under_deja(bb, &[], &["sh", "-c", script]);
    assert_eq!(d, n, "under deja (left) and natively (right) differ; deja said:\n{err}");
    d
}

/// Each of `lines` is a whole line of what the script printed: it ran to there.
fn printed(ran: &Ran, lines: &[&str]) {
    for line in lines {
        assert!(ran.stdout.lines().any(|l| l == *line), "no {line:?} in:\n{}", ran.stdout);
    }
}

#[test]
fn busybox_pipelines_match_linux() {
    let script = r#"
echo b | tr a-z A-Z
printf 'c\nb\na\n' | sort | head -n 2
echo one two three | wc -w
seq 1 100 | grep 7 | wc -l
yes x | head -n 3
echo "after yes died of SIGPIPE: $?"
false | true; echo "false | true: $?"
true | false; echo "true | false: $?"
set -o pipefail; false | true; echo "pipefail: $?"; set +o pipefail
printf '1\n2\n3\n' | while read n; do echo "n=$n"; done
seq 1 2000 | sort -rn | head -n 1
seq 1 20000 | cat | wc -c
"#;
    let ran = sh(script);
    printed(&ran, &["B", "3", "19", "x", "false | true: 0", "true | false: 1", "pipefail: 1", "n=3", "2000", "108894"]);
    assert_eq!(ran.status, 0);
}

#[test]
fn busybox_subshells_and_exit_codes_match_linux() {
    let script = r#"
(exit 3); echo "subshell: $?"
( echo in a subshell; exit 4 ); echo "then: $?"
x=outer; (x=inner; echo "inside: $x"); echo "outside: $x"
sh -c 'exit 5'; echo "nested sh: $?"
sh -c 'sh -c "echo two levels down; exit 6"; echo "middle saw $?"; exit 7'; echo "outer saw $?"
sh -c 'kill -TERM $$'; echo "killed by TERM: $?"
sh -c 'kill -KILL $$'; echo "killed by KILL: $?"
sh -c 'kill -USR1 $$; echo not reached'; echo "killed by USR1: $?"
if sh -c 'exit 0'; then echo "if: true"; fi
! true; echo "negated: $?"
sh -c 'exit 300'; echo "exit 300: $?"
i=0; s=0
while [ $i -lt 30 ]; do sh -c "exit $((i % 7))"; s=$((s + $?)); i=$((i + 1)); done
echo "sum of 30 exit codes: $s"
{ echo grouped; false; }; echo "group: $?"
sh -c 'echo $0 $1 $2' zero one two
exit 42
"#;
    let ran = sh(script);
    printed(
        &ran,
        &[
            "subshell: 3",
            "then: 4",
            "outside: outer",
            "middle saw 6",
            "outer saw 7",
            "killed by TERM: 143",
            "killed by KILL: 137",
            "killed by USR1: 138",
            "exit 300: 44",
            "sum of 30 exit codes: 85",
            "zero one two",
        ],
    );
    assert_eq!(ran.status, 42);
}

#[test]
fn busybox_command_substitution_matches_linux() {
    let script = r#"
x=$(echo hello | tr a-z A-Z); echo "got $x"
y=`echo backticks`; echo "$y"
n=$(seq 1 10 | wc -l); echo "lines: $n"
nested=$(echo $(echo $(echo deep))); echo "$nested"
v=$(exit 9); echo "status of an assignment from a substitution: $?"
multi="$(printf 'a\nb\n\n\n')"; echo "trailing newlines dropped: [$multi]"
echo "in a string: $(echo inner) and $(( $(echo 6) * 7 ))"
files=$(for i in 1 2 3; do echo "f$i"; done); echo $files
"#;
    let ran = sh(script);
    printed(
        &ran,
        &[
            "got HELLO",
            "backticks",
            "lines: 10",
            "deep",
            "status of an assignment from a substitution: 9",
            "b]",
            "f1 f2 f3",
        ],
    );
    assert_eq!(ran.status, 0);
}

#[test]
fn busybox_background_jobs_and_wait_match_linux() {
    let script = r#"
(exit 3) & p1=$!
(exit 4) & p2=$!
wait $p1; echo "first: $?"
wait $p2; echo "second: $?"
[ "$p1" != "$p2" ] && echo "two different pids"
case $p1 in *[!0-9]*) echo "\$! is not a number" ;; *) echo "\$! is a number" ;; esac
(echo from the background) & wait
sleep 0.01 & wait $!; echo "sleep: $?"
sh -c 'kill -TERM $$' & wait $!; echo "killed in the background: $?"
(exit 5) & (exit 6) & wait; echo "wait for all: $?"
wait; echo "wait with nothing left: $?"
wait 99999; echo "wait for a pid that is not a child: $?"
T=$(mktemp -d /tmp/deja-bb-XXXXXX)
for i in 1 2 3; do (echo "job $i" > $T/$i) & done; wait
cat $T/1 $T/2 $T/3
rm -r $T
(read line; echo "the job read: $line") <<EOF &
from a here-doc
EOF
wait $!; echo "status: $?"
"#;
    let ran = sh(script);
    printed(
        &ran,
        &[
            "first: 3",
            "second: 4",
            "two different pids",
            "$! is a number",
            "from the background",
            "sleep: 0",
            "killed in the background: 143",
            "wait for all: 0",
            "wait for a pid that is not a child: 127",
            "job 3",
            "the job read: from a here-doc",
        ],
    );
    assert_eq!(ran.status, 0);
}

#[test]
fn busybox_here_documents_match_linux() {
    let script = r#"
cat <<EOF
line one
  indented $((1 + 2))
EOF
cat <<'EOF'
not $expanded
EOF
tr a-z A-Z <<EOF
shout
EOF
read a b <<EOF
first second third
EOF
echo "a=$a b=$b"
cat <<-EOF
	tab stripped
	EOF
x=value
sh <<EOF
echo "a shell reading a here-doc: $x"
exit 3
EOF
echo "its status: $?"
"#;
    let ran = sh(script);
    printed(
        &ran,
        &[
            "  indented 3",
            "not $expanded",
            "SHOUT",
            "a=first b=second third",
            "tab stripped",
            "a shell reading a here-doc: value",
            "its status: 3",
        ],
    );
}

#[test]
fn busybox_redirections_to_files_match_linux() {
    let script = r#"
T=$(mktemp -d /tmp/deja-bb-XXXXXX)
echo first > $T/f
echo second >> $T/f
cat $T/f
wc -l < $T/f
(echo out; echo err >&2) 2>&1 | sort
(echo out; echo err >&2) 2>$T/err >$T/out; cat $T/out $T/err
cat /deja/nonexistent 2>/dev/null; echo "cat of a missing file: $?"
exec 3>$T/three; echo via fd 3 >&3; exec 3>&-; cat $T/three
exec 4<$T/f; read line <&4; echo "read from fd 4: $line"; read line <&4; echo "then: $line"; exec 4<&-
{ echo grouped; echo output; } > $T/g; cat $T/g
set -C; (echo x > $T/f) 2>/dev/null || echo "noclobber refused"; set +C
echo appended >> $T/f; tail -n 1 $T/f
cat < $T/f > $T/copy; cmp $T/f $T/copy && echo "copied"
for i in 1 2 3; do echo "$i"; done > $T/loop; cat $T/loop | tr '\n' ' '; echo
while read n; do echo "read $n"; done < $T/loop
echo "fd 2 to fd 1" 2>&1 >&2 | cat
ls $T | sort
rm -r $T; [ -e $T ] || echo removed
"#;
    let ran = sh(script);
    printed(
        &ran,
        &[
            "2",
            "err",
            "cat of a missing file: 1",
            "via fd 3",
            "read from fd 4: first",
            "then: second",
            "noclobber refused",
            "appended",
            "copied",
            "1 2 3 ",
            "read 3",
            "three",
            "removed",
        ],
    );
    assert_eq!(ran.status, 0);
}

#[test]
fn busybox_xargs_matches_linux() {
    let script = r#"
printf '1\n2\n3\n' | xargs echo got
printf 'a b c d e\n' | xargs -n 2 echo
printf 'x\ny\n' | xargs -I{} echo item {}
echo 'a' | xargs sh -c 'exit 3'; echo "xargs after a failing command: $?"
echo 'a' | xargs false; echo "xargs false: $?"
T=$(mktemp -d /tmp/deja-bb-XXXXXX)
for i in 1 2 3; do echo "content $i" > $T/f$i; done
find $T -type f | sort | xargs cat
find $T -type f | xargs rm; rmdir $T && echo "emptied by xargs"
"#;
    let ran = sh(script);
    printed(
        &ran,
        &["got 1 2 3", "c d", "e", "item y", "xargs after a failing command: 123", "content 3", "emptied by xargs"],
    );
    assert_eq!(ran.status, 0);
}

#[test]
fn busybox_traps_match_linux() {
    let script = r#"
sh -c 'trap "echo exit trap ran" EXIT; echo body'
sh -c 'trap "echo the trap saw \$?" EXIT; exit 4'; echo "status: $?"
sh -c 'trap "echo got USR1" USR1; kill -USR1 $$; echo after'
(trap 'echo subshell trap' EXIT; echo in the subshell)
sh -c 'trap "" TERM; kill -TERM $$; echo survived TERM'
sh -c 'trap "echo caught TERM; exit 9" TERM; kill -TERM $$; echo not reached'; echo "status: $?"
trap 'echo the outer exit trap' EXIT
echo end of script
"#;
    let ran = sh(script);
    assert_eq!(
        ran.stdout,
        "body\nexit trap ran\nthe trap saw 4\nstatus: 4\ngot USR1\nafter\nin the subshell\nsubshell trap\n\
         survived TERM\ncaught TERM\nstatus: 9\nend of script\nthe outer exit trap\n"
    );
    assert_eq!(ran.status, 0);
}

#[test]
fn busybox_functions_in_pipelines_match_linux() {
    let script = r#"
up() { tr a-z A-Z; }
printf 'a\nb\n' | up
f() { echo "in f: $1"; return 3; }
f x | cat; echo "pipeline status: $?"
f y; echo "f status: $?"
g() { local v=local; echo $v; }; g | tr a-z A-Z
r() { if [ $1 -gt 0 ]; then echo "depth $1"; r $(($1 - 1)); fi; }; r 3 | cat
h() { echo "from h"; exit 5; }; (h); echo "exit in a subshell function: $?"
echo data | { read x; echo "a group read: $x"; }
"#;
    let ran = sh(script);
    printed(
        &ran,
        &[
            "B",
            "in f: x",
            "pipeline status: 0",
            "f status: 3",
            "LOCAL",
            "depth 1",
            "exit in a subshell function: 5",
            "a group read: data",
        ],
    );
    assert_eq!(ran.status, 0);
}

#[test]
fn busybox_exec_and_the_environment_match_linux() {
    let script = r#"
sh -c 'exec echo replaced; echo not reached'
sh -c 'exec sh -c "exit 8"'; echo "the exec'd shell: $?"
T=$(mktemp -d /tmp/deja-bb-XXXXXX)
sh -c "exec > $T/out; echo redirected for the rest; echo twice"; cat $T/out
sh -c "exec 3> $T/fd3; echo on three >&3"; cat $T/fd3
sh -c "exec < $T/out; read a; read b; echo \"\$b / \$a\""
(exec 2>&1; echo via a moved stderr >&2) | cat
rm -r $T
env -i A=1 sh -c 'echo "env -i: A=$A"'
env B=2 sh -c 'echo "env: B=$B"'
X=exported; export X; sh -c 'echo "exported: $X"'
Y=not; sh -c 'echo "not exported: [$Y]"'
Z=prefix sh -c 'echo "a prefix assignment: $Z"'
sh -c 'echo "PATH: $PATH"'
exec sh -c 'echo the script replaced by exec; exit 6'
echo not reached
"#;
    let ran = sh(script);
    printed(
        &ran,
        &[
            "replaced",
            "the exec'd shell: 8",
            "twice",
            "on three",
            "twice / redirected for the rest",
            "via a moved stderr",
            "env -i: A=1",
            "env: B=2",
            "exported: exported",
            "not exported: []",
            "a prefix assignment: prefix",
            "PATH: /usr/bin:/bin",
            "the script replaced by exec",
        ],
    );
    assert!(!ran.stdout.contains("not reached"));
    assert_eq!(ran.status, 6);
}

#[test]
fn busybox_runs_scripts_with_and_without_a_shebang_as_linux() {
    // The interpreter is busybox itself, by the path /proc/self/exe gives (its own natively,
    // /bin/busybox under deja).
    let script = r#"
bb=$(readlink /proc/self/exe)
T=$(mktemp -d /tmp/deja-bb-XXXXXX)
printf '#!%s sh\necho "script: $# args: $*"\nexit 4\n' "$bb" > $T/s
chmod 755 $T/s
$T/s a "b c"; echo "status: $?"
cd $T && ./s relative; echo "status: $?"; cd /
PATH=$T:$PATH s found-on-path; echo "status: $?"
printf 'echo "no #! line, run by the shell: $1"\n' > $T/plain
chmod 755 $T/plain
$T/plain x; echo "status: $?"
chmod 644 $T/s; $T/s 2>/dev/null; echo "not executable: $?"
$T/missing 2>/dev/null; echo "missing: $?"
rm -r $T
"#;
    let ran = sh(script);
    assert_eq!(
        ran.stdout,
        "script: 2 args: a b c\nstatus: 4\nscript: 1 args: relative\nstatus: 4\nscript: 1 args: found-on-path\n\
         status: 4\nno #! line, run by the shell: x\nstatus: 0\nnot executable: 126\nmissing: 127\n"
    );
}

#[test]
fn a_script_file_given_to_busybox_matches_linux() {
    let bb = busybox();
    let dir = scratch();
    let script = dir.join("t.sh");
    std::fs::write(
        &script,
        "echo \"args: $# $1 $2\"\nfor i in 1 2 3; do sh -c \"echo child \\$0\" $i; done\nread -r x || echo \"stdin is empty\"\nexit 7\n",
    )
    .unwrap();
    let decl = format!("{}:/t.sh", script.display());
    let n = native(bb, &["sh", script.to_str().unwrap(), "one", "two"]);
    let (d, err) = under_deja(bb, &[&decl], &["sh", "/t.sh", "one", "two"]);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(d, n, "under deja (left) and natively (right) differ; deja said:\n{err}");
    assert_eq!(d.stdout, "args: 2 one two\nchild 1\nchild 2\nchild 3\nstdin is empty\n");
    assert_eq!(d.status, 7);
}

/// Host programs a bash script runs: dynamically linked, as bash is, declared with `--file`.
const BASH_COMMANDS: &[&str] = &["/usr/bin/cat", "/usr/bin/sleep", "/usr/bin/rm"];

#[test]
fn a_bash_script_with_external_commands_matches_linux() {
    let bash = "/bin/bash";
    needs(&[bash], "bash");
    needs(BASH_COMMANDS, "coreutils");
    let dir = scratch();
    let script = dir.join("t.bash");
    std::fs::write(
        &script,
        r#"set -u
arr=(one two "three four")
echo "array: ${#arr[@]} ${arr[2]}"
declare -A m=([k]=v [x]=y)
echo "assoc: ${m[k]} ${m[x]}"
echo hello | cat
printf 'b\na\n' | cat | cat
x=$(echo substituted | cat); echo "$x"
true | false | true; echo "PIPESTATUS: ${PIPESTATUS[*]}"
(exit 7); echo "subshell: $?"
sleep 0.01 & p=$!; wait $p; echo "sleep in the background: $?"
fn() { echo "fn $1"; return 2; }; fn a | cat; fn b; echo "fn status: $?"
cat <<EOF
here-doc $((6 * 7))
EOF
while read -r line; do echo "line: $line"; done < <(printf '1\n2\n')
echo "$(cat <(echo from process substitution))"
f=/tmp/deja-bash-$$.txt
echo saved > "$f"; cat < "$f"; rm "$f"; [ -e "$f" ] || echo "removed"
{ echo grouped; } | cat
cat /deja/nonexistent 2>/dev/null; echo "cat of a missing file: $?"
sleep 10 & k=$!; kill $k; wait $k; echo "killed: $?"
bash -c 'exit 4'; echo "bash -c: $?"
trap 'echo "exit trap, status $?"' EXIT
exit 3
"#,
    )
    .unwrap();
    let mut files: Vec<String> = BASH_COMMANDS.iter().map(|c| format!("{c}:{c}")).collect();
    files.push(format!("{}:/t.bash", script.display()));
    files.push(format!("{bash}:/usr/bin/bash"));
    let files: Vec<&str> = files.iter().map(String::as_str).collect();
    let n = native(bash, &[script.to_str().unwrap()]);
    let (d, err) = under_deja(bash, &files, &["/t.bash"]);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(d, n, "under deja (left) and natively (right) differ; deja said:\n{err}");
    printed(
        &d,
        &[
            "array: 3 three four",
            "assoc: v y",
            "hello",
            "substituted",
            "PIPESTATUS: 0 1 0",
            "subshell: 7",
            "sleep in the background: 0",
            "fn status: 2",
            "here-doc 42",
            "line: 2",
            "from process substitution",
            "saved",
            "removed",
            "cat of a missing file: 1",
            "killed: 143",
            "bash -c: 4",
            "exit trap, status 3",
        ],
    );
    assert_eq!(d.status, 3);
}

/// Several processes that called `execve`, alive at once: their address spaces come and go
/// while the others run, and a frame that held page tables of a freed space is only ever a page
/// table again. (Reused as a data page, a nested host's shadow MMU kept it write-protected and
/// KVM had to emulate the program's AVX store into it, which it cannot: the VM stopped.)
#[test]
fn busybox_runs_several_exec_d_processes_at_once() {
    let script = r#"
echo a | cat | cat | cat
printf 'a\nb\n' | tr a-z A-Z | wc -l
sh -c 'exit 3' & sh -c 'exit 4' & wait; echo "both: $?"
echo a | cat | cat | cat | cat | cat | cat | cat | tr a A
for i in 1 2 3 4 5 6; do sh -c "exit $i" & done; wait; echo all
"#;
    let ran = sh(script);
    assert_eq!(ran.stdout, "a\n2\nboth: 0\nA\nall\n");
}

/// A Rust program that runs itself with `std::process::Command` (`clone(CLONE_VM |
/// CLONE_VFORK)`, `execve` of `/proc/self/exe`, the child's output through a pipe): the run is
/// the same over 3 runs, and an SDK assertion that fails in the child names the child's pid,
/// its name and its thread, while the parent's holds.
#[test]
fn assertions_name_the_process_that_made_them() {
    let spawner = guest("spawner");
    let spawner = spawner.to_string_lossy();
    let audit = deja(&["run", "--no-probe", "--audit", "3", &spawner]);
    assert!(stderr(&audit).contains("deja: audit: identical over 3 runs"), "{}", stderr(&audit));
    assert_eq!(stdout(&audit), "child 2: parent 1\nparent 1: the child exited with Some(7)\n");
    let (out, r) = run_json(&[&spawner, "--", "--fail"]);
    assert_eq!(stdout(&out), "child 2: parent 1\nparent 1: the child exited with Some(7)\n");
    let site = |m: &str| {
        r["assertions"].as_array().unwrap().iter().find(|a| a["message"] == m).cloned().unwrap_or_else(|| panic!("{m}"))
    };
    let child = site("the child's books balance");
    assert_eq!(child["failures"], 1, "{child}");
    let at = &child["first_failure"];
    assert_eq!((at["pid"].as_u64(), at["process"].as_str(), at["thread"].as_u64()), (Some(2), Some("exe"), Some(2)));
    assert_eq!(at["details"], "{\"pid\":2}");
    assert_eq!(site("the parent runs")["passes"], 1);
}

/// A snapshot taken in the middle of a pipeline (several processes alive, each in its own
/// address space) continues to the same end: the same output and the same digest as the run
/// it was taken from, in a fresh VM.
#[test]
fn a_snapshot_in_the_middle_of_a_pipeline_continues_to_the_same_end() {
    let bb = busybox();
    let dir = scratch();
    let script = "echo one > /tmp/f; cat /tmp/f | tr a-z A-Z | while read l; do echo \"got $l\"; done; \
                  (sleep 0.01; echo late) & wait; echo end";
    let whole = deja(&["run", "--no-probe", "--json", bb, "--", "sh", "-c", script]);
    let want: serde_json::Value = serde_json::from_str(stderr(&whole).lines().last().unwrap()).unwrap();
    assert_eq!(stdout(&whole), "got ONE\nlate\nend\n");
    let syscalls = want["syscalls"].as_u64().unwrap();
    assert!(syscalls > 100, "{want}");
    for at in [syscalls / 3, syscalls / 2, 2 * syscalls / 3] {
        let snap = dir.join(format!("at-{at}.snap"));
        let (snap_s, at_s) = (snap.to_string_lossy().into_owned(), at.to_string());
        let taken = deja(&[
            "run",
            "--no-probe",
            "--snapshot-at",
            &at_s,
            "--snapshot-out",
            &snap_s,
            bb,
            "--",
            "sh",
            "-c",
            script,
        ]);
        assert_eq!(stdout(&taken), stdout(&whole), "{}", stderr(&taken));
        let resumed = deja(&["run", "--no-probe", "--json", "--from-snapshot", &snap_s]);
        let got: serde_json::Value = serde_json::from_str(stderr(&resumed).lines().last().unwrap()).unwrap();
        assert_eq!(got["digest"], want["digest"], "from syscall {at}: {}", stderr(&resumed));
        assert_eq!(got["exit_code"], 0);
    }
}

/// A shell in a directory tree given as the root (`--root`): the programs it runs are the
/// root's, found through `PATH` and their symbolic links (`/bin/cat` → `busybox`, as busybox
/// images ship), and a program the root does not have is not found, whatever the host has.
#[test]
fn a_shell_in_a_root_runs_the_roots_programs_through_their_links() {
    let bb = busybox();
    let root = scratch();
    std::fs::create_dir_all(root.join("bin")).unwrap();
    std::fs::copy(bb, root.join("bin/busybox")).unwrap();
    for applet in ["sh", "cat", "tr"] {
        std::os::unix::fs::symlink("busybox", root.join("bin").join(applet)).unwrap();
    }
    let r = root.to_string_lossy();
    let script = "echo hello | cat | tr a-z A-Z; /usr/bin/perl -e 1; echo \"status $?\"";
    let out =
        deja(&["run", "--no-probe", "--audit", "3", "--root", &r, "--env", "PATH=/bin", "/bin/sh", "--", "-c", script]);
    assert_eq!(stdout(&out), "HELLO\nstatus 127\n", "{}", stderr(&out));
    assert!(stderr(&out).contains("deja: audit: identical over 3 runs"), "{}", stderr(&out));
    assert!(stderr(&out).contains("/usr/bin/perl: not found"), "{}", stderr(&out));
}

/// `/proc/<pid>` of every process of the node, and `/proc/self` a link to the caller's pid.
/// A command reading its own `comm`, state and status prints what it prints natively; and
/// under deja, where pids are the same in every run (the shell is pid 1, each process it
/// starts the next pid), busybox reads its own directory and its children's: `readlink
/// /proc/self` in a child names the child, `stat` names the parent, `cmdline` is the argv the
/// shell was started with, a reaped child is gone, the shell's glob of `/proc` lists the pids
/// alive, and the shell waiting for `grep` is asleep.
#[test]
fn proc_shows_every_process_by_its_pid() {
    let bb = busybox();
    let ran = sh("cat /proc/self/comm; cut -d' ' -f3 /proc/self/stat; grep -c '^Pid:' /proc/self/status");
    assert_eq!(ran.stdout, "cat\nR\n1\n");
    let script = r#"echo $$
readlink /proc/self
cat /proc/$$/comm
cut -d' ' -f1-6 /proc/self/stat
tr '\0' '\n' < /proc/$$/cmdline | head -n 3
sleep 0 & p=$!
wait
test -e /proc/$p/stat || echo "$p reaped"
readlink /proc/$$/exe
echo /proc/[0-9]*
grep -E '^(Name|State|Pid|PPid)' /proc/$$/status
echo end"#;
    let (ran, err) = under_deja(bb, &[], &["sh", "-c", script]);
    assert_eq!(ran.status, 0, "{err}");
    assert_eq!(
        ran.stdout,
        "1\n2\nbusybox\n4 (cut) R 1 1 1\n/bin/busybox\nsh\n-c\n7 reaped\n/bin/busybox\n/proc/1\n\
         Name:\tbusybox\nState:\tS (sleeping)\nPid:\t1\nPPid:\t0\nend\n",
        "{err}"
    );
}
