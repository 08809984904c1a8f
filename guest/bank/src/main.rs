//! A small bank that uses every kind of deja assertion.
//!
//! `bank [--overdraft-bug] [--rare-bug] [--mode careful|bulk] [transfers]` opens three accounts,
//! then makes `transfers` random transfers (amounts and accounts are deja decisions). With
//! `--overdraft-bug` it forgets to check the balance, and `assert_always!` catches the
//! negative balance. With `--rare-bug` a transfer of more than 76 out of account 2 is credited
//! twice: only some random choices reach it, which is what exploration is for. `--mode` picks one of two code paths, so coverage differs between them.
//!
//! `--fraud fixed|buggy` adds fraud protection to the careful mode: four large transfers (over
//! 60) in a row out of one account freeze it; money sent to a frozen account is held; the next
//! transfer the owner tries out of it is refused, thaws the account and releases the held money.
//! The buggy variant releases it twice when that transfer is itself large (it goes through manual
//! review, which releases the hold again). The bug needs a freeze, then a hold, then a large
//! transfer, in that order: a few random runs in a hundred reach it. Each step is a `sometimes`
//! assertion, which is how coverage guidance can climb to it.
use deja_sdk::serde_json::json;
use deja_sdk::{
    assert_always, assert_always_or_unreachable, assert_reachable, assert_sometimes, assert_unreachable, lifecycle,
    random,
};

struct Bank {
    balances: [i64; 3],
    overdraft_bug: bool,
    rare_bug: bool,
    fraud: Option<Fraud>,
}

/// Fraud protection: per-account streaks of large transfers, freezes and held money.
struct Fraud {
    streak: [u32; 3],
    frozen: [bool; 3],
    held: [i64; 3],
    buggy: bool,
}

/// Transfers over this are large.
const LARGE: i64 = 60;
/// Large transfers in a row out of one account that freeze it.
const FREEZE_AFTER: u32 = 4;

impl Bank {
    fn transfer(&mut self, from: usize, to: usize, amount: i64) -> bool {
        if !self.overdraft_bug && self.balances[from] < amount {
            return false;
        }
        self.balances[from] -= amount;
        self.balances[to] += amount;
        if self.rare_bug && from == 2 && amount > 76 {
            // A retry path that credits twice: only large transfers out of account 2 take it.
            self.balances[to] += amount;
        }
        assert_always!(self.balances[from] >= 0, "balance never negative", &json!({"account": from, "balance": self.balances[from]}));
        true
    }

    fn total(&self) -> i64 {
        self.balances.iter().sum::<i64>() + self.fraud.as_ref().map_or(0, |f| f.held.iter().sum())
    }

    /// A transfer under fraud protection; `false` when it was refused.
    fn guarded_transfer(&mut self, from: usize, to: usize, amount: i64) -> bool {
        let Some(f) = self.fraud.as_mut() else { return self.transfer(from, to, amount) };
        if f.frozen[from] {
            // The owner is asked to confirm: the account thaws and the held money is released.
            f.frozen[from] = false;
            let held = std::mem::take(&mut f.held[from]);
            self.balances[from] += held;
            if f.buggy && amount > LARGE {
                // Manual review of a large transfer releases the hold a second time.
                self.balances[from] += held;
            }
            assert_sometimes!(held > 0, "held money is released when an account thaws");
            return false;
        }
        f.streak[from] = if amount > LARGE { f.streak[from] + 1 } else { 0 };
        assert_sometimes!(f.streak[from] == 2, "an account makes two large transfers in a row");
        assert_sometimes!(f.streak[from] + 1 == FREEZE_AFTER, "an account is one large transfer short of a freeze");
        if f.streak[from] >= FREEZE_AFTER {
            f.streak[from] = 0;
            f.frozen[from] = true;
            assert_reachable!("fraud protection freezes an account");
            return false;
        }
        if self.balances[from] < amount {
            return false;
        }
        if f.frozen[to] {
            self.balances[from] -= amount;
            f.held[to] += amount;
            assert_reachable!("money sent to a frozen account is held");
            return true;
        }
        self.transfer(from, to, amount)
    }
}

fn careful(bank: &mut Bank, transfers: u32) -> u32 {
    let mut rejected = 0;
    for _ in 0..transfers {
        let from = *random::random_choice(&[0usize, 1, 2]).unwrap_or(&0);
        let to = (from + 1 + (random::get_random() % 2) as usize) % 3;
        let amount = (random::get_random() % 80) as i64 + 1;
        let ok = bank.guarded_transfer(from, to, amount);
        if !ok {
            rejected += 1;
        }
        lifecycle::send_event("transfer", &json!({"from": from, "to": to, "amount": amount, "ok": ok}));
        assert_sometimes!(!ok, "some transfer is rejected for lack of funds");
    }
    rejected
}

fn bulk(bank: &mut Bank, transfers: u32) -> u32 {
    // Moves everything through account 0 in fixed steps: a different code path.
    let mut moved = 0;
    for i in 0..transfers {
        let from = (i % 2 + 1) as usize;
        if bank.transfer(from, 0, 5) {
            moved += 1;
        }
    }
    assert_always_or_unreachable!(bank.balances[0] >= 100, "bulk mode only ever adds to account 0");
    transfers - moved
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let overdraft_bug = args.iter().any(|a| a == "--overdraft-bug");
    let rare_bug = args.iter().any(|a| a == "--rare-bug");
    let mode = args.iter().position(|a| a == "--mode").and_then(|i| args.get(i + 1)).map(String::as_str).unwrap_or("careful");
    let fraud = match args.iter().position(|a| a == "--fraud").and_then(|i| args.get(i + 1)).map(String::as_str) {
        None => None,
        Some("fixed") => Some(Fraud { streak: [0; 3], frozen: [false; 3], held: [0; 3], buggy: false }),
        Some("buggy") => Some(Fraud { streak: [0; 3], frozen: [false; 3], held: [0; 3], buggy: true }),
        Some(other) => {
            eprintln!("bank: --fraud takes fixed or buggy, not {other:?}");
            std::process::exit(2);
        }
    };
    let transfers: u32 = args.iter().filter_map(|a| a.parse().ok()).next().unwrap_or(20);

    let mut bank = Bank { balances: [100, 100, 100], overdraft_bug, rare_bug, fraud };
    lifecycle::setup_complete(&json!({"accounts": 3, "mode": mode}));
    let rejected = match mode {
        "careful" => careful(&mut bank, transfers),
        "bulk" => bulk(&mut bank, transfers),
        _ => {
            assert_unreachable!("an unknown mode is refused before it runs");
            0
        }
    };
    assert_always!(bank.total() == 300, "money is neither created nor destroyed", &json!({"total": bank.total()}));
    if rejected > transfers {
        assert_reachable!("more rejections than transfers (never happens)");
    }
    assert_reachable!("all transfers processed");
    println!("bank: mode {mode}, {transfers} transfers, {rejected} rejected, balances {:?}", bank.balances);
}
