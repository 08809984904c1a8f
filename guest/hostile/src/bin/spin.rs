//! `spin [always|sometimes|threaded]`: a guest that stops making progress. It prints one line,
//! then loops forever without a syscall or an exception — always, or (`sometimes`) when an SDK
//! random choice out of four comes out 0, after which it would have exited 0, or (`threaded`)
//! in two threads, one of which then waits behind the other for ever. Under deja the
//! no-progress watchdog must end the run as NO_PROGRESS, after the same syscall every time, and
//! an explorer must count such rounds without calling them bugs.

use std::hint::black_box;

fn spin() -> ! {
    let mut x = 1u64;
    loop {
        x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407));
    }
}

fn main() {
    let when = std::env::args().nth(1).unwrap_or_else(|| "always".into());
    println!("spin {when}");
    match when.as_str() {
        "always" => spin(),
        "threaded" => {
            std::thread::spawn(|| spin());
            spin()
        }
        "sometimes" => {
            if deja_sdk::random::random_choice(&[0u8, 1, 2, 3]) == Some(&0) {
                spin();
            }
            println!("done");
        }
        _ => {
            eprintln!("usage: spin [always|sometimes|threaded]");
            std::process::exit(2);
        }
    }
}
