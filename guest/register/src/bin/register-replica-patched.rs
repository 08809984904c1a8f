//! `register-replica` with the split-brain fix built in, as a patched build would have it: the
//! same replica, running the fixed variant whatever `--variant` says. `deja check` judges it as
//! the candidate for a bug found on the buggy replicas.

#[allow(dead_code)]
#[path = "register-replica.rs"]
mod replica;

fn main() {
    replica::run(true);
}
