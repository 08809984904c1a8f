//! The reader of glibc's `/etc/ld.so.cache`: any bytes as a cache, then looked into.
#![no_main]

use deja_inputs::ldcache::LdCache;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(cache) = LdCache::parse(data) else { return };
    let names: Vec<String> = cache.entries().iter().take(64).map(|e| e.name.clone()).collect();
    for name in names.iter().map(String::as_str).chain(["libc.so.6", "", "lib"]) {
        let l = cache.lookup(name);
        // The plain build, when there is one, is among the choices the loader may take.
        assert!(l.plain.is_none_or(|p| l.choices.contains(&p)));
    }
});
