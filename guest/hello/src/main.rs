//! The smallest guest: prints a greeting.
fn main() {
    println!("Hello from a deja guest!");
}
