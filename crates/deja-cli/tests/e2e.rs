//! deja's end-to-end tests, each file a module of one test binary.
//!
//! One binary, not one per file: the test harness runs every test of the suite in one pool of
//! threads, so a file whose last test runs long no longer leaves the other core idle while the
//! next file waits, and the suite links once. Each module runs `deja` (and the programs it
//! tests) in processes of their own; the modules share only `common` (the guests, built once
//! per binary). Run one file's tests with `cargo test --release -p deja-cli --test e2e walkv::`.

mod common;

mod antithesis;
mod blocks;
mod check;
mod cluster;
mod cluster_fork;
mod compose;
mod conformance;
mod contracts;
mod cores;
mod crash;
mod debug;
mod dogfood;
mod etcd;
mod explore;
mod hostchan;
mod hostile;
mod image;
mod late_forks;
mod moments;
mod nix;
mod placement;
mod processes;
mod processes_faults;
mod raftkv;
mod readme;
mod run;
mod scale;
mod sdk;
mod serve;
mod snapshot;
mod storage;
mod syscall_sites;
mod tamper;
mod threads;
mod vdso;
mod verdicts;
mod walkv;
