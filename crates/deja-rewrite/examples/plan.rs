//! Prints the rewriting plan of an ELF file: `cargo run -p deja-rewrite --example plan -- FILE`.
fn main() {
    let path = std::env::args().nth(1).expect("usage: plan FILE");
    let image = std::fs::read(&path).expect("readable file");
    let t = std::time::Instant::now();
    let p = deja_rewrite::plan_elf(&image).expect("an ELF");
    let el = t.elapsed();
    println!("{path}: {:?} in {:?}", p.stats, el);
    for c in deja_rewrite::Channel::ALL {
        println!("  {c}: {} rewritten, {} refused", p.count(c), p.refused_count(c));
    }
    for r in &p.refused {
        println!("  refused {r}");
    }
}
