//! Prints its arguments, selected environment, stdin and the files named in argv[1..].
use std::io::Read;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    println!("argv: {args:?}");
    let mut env: Vec<(String, String)> = std::env::vars().collect();
    env.sort();
    println!("env: {env:?}");
    let mut stdin = String::new();
    let _ = std::io::stdin().read_to_string(&mut stdin);
    println!("stdin: {stdin:?}");
    let mut failed = false;
    for path in &args[1..] {
        match std::fs::read_to_string(path) {
            Ok(text) => println!("{path}: {text:?}"),
            Err(e) => {
                eprintln!("cat: {path}: {e}");
                failed = true;
            }
        }
    }
    std::process::exit(if failed { 1 } else { 0 });
}
