//! std threads under deja: a shared counter behind a Mutex, a channel, and a log of which thread
//! got the lock when — the order is a scheduling decision, so it follows the seed.
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;

fn main() {
    let workers: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(4);
    let rounds = 5;
    let counter = Arc::new(Mutex::new(0u64));
    let order = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = mpsc::channel();
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let (counter, order, tx) = (counter.clone(), order.clone(), tx.clone());
            thread::spawn(move || {
                for r in 0..rounds {
                    *counter.lock().unwrap() += 1;
                    order.lock().unwrap().push(w);
                    tx.send((w, r)).unwrap();
                    thread::yield_now();
                }
                w * 10
            })
        })
        .collect();
    drop(tx);
    let received = rx.iter().count();
    let results: Vec<usize> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let order = order.lock().unwrap();
    println!("threads: {workers} workers, counter {}, {received} messages, results {results:?}", *counter.lock().unwrap());
    println!("threads: lock order {:?}", *order);
}
