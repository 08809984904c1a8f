//! Edge coverage from the program's own counters.
//!
//! A guest built with `-C passes=sancov-module -C llvm-args=-sanitizer-coverage-level=3
//! -C llvm-args=-sanitizer-coverage-inline-8bit-counters` carries an allocated ELF section
//! named [`SANCOV_SECTION`]: one byte counter per edge, incremented inline by the program
//! (wrapping). At load the kernel looks the section up in the section header table (see
//! [`elf::find_section`](crate::mm::elf::find_section)); it is used only when it lies inside one
//! `PT_LOAD` segment and holds at most [`MAX_COVERAGE_COUNTERS`] counters. For `ET_DYN` images
//! the load bias is applied.
//!
//! Reading the map never changes the guest: it is read page by page with
//! [`Memory::read`](crate::Memory::read), only the part of each page inside the section; a
//! page that is not present (never touched, or unmapped by the program) reads as zeros.
//! Counters are bucketed like AFL's (see [`bucket`]) so that loop counts that differ a little
//! give the same map.

use crate::prelude::*;
use serde::{Deserialize, Serialize};

use crate::mm::user_layout::{page_down, USER_END, USER_START};
use crate::persist::{ensure, RestoreError};
use crate::{Memory, PAGE_SIZE};

/// Name of the section of inline 8-bit counters.
pub const SANCOV_SECTION: &str = "__sancov_cntrs";
/// Largest counter section deja reads (64 Mi edges); a larger one is ignored.
pub const MAX_COVERAGE_COUNTERS: u64 = 64 << 20;

/// Edge coverage of a run, from the inline 8-bit counters of a program built with
/// `-C passes=sancov-module -C llvm-args=-sanitizer-coverage-level=3
/// -C llvm-args=-sanitizer-coverage-inline-8bit-counters`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CoverageSummary {
    /// Number of counters (edges instrumented): the size of `__sancov_cntrs`.
    pub counters: u64,
    /// Edges taken at least once.
    pub edges_hit: u64,
    /// BLAKE3 (hex) of the bucketed map.
    pub map_digest: String,
    /// The bucketed map (AFL buckets: 0, 1, 2, 4, 8, 16, 32, 64, 128), one byte per edge.
    #[serde(skip)]
    pub map: Vec<u8>,
}

/// Where the counters are in guest memory (after the load bias).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CoverageRegion {
    /// Address of the first counter.
    pub(crate) addr: u64,
    /// Number of counters (bytes).
    pub(crate) len: u64,
}

impl CoverageRegion {
    /// Checks the invariants of a restored region.
    pub(crate) fn validate(&self) -> Result<(), RestoreError> {
        let end = self.addr.checked_add(self.len);
        ensure(
            self.len > 0
                && self.len <= MAX_COVERAGE_COUNTERS
                && self.addr >= USER_START
                && end.is_some_and(|e| e <= USER_END),
            || format!("coverage counters at {:#x} (+{:#x})", self.addr, self.len),
        )
    }

    /// The bucketed map, read from `mem` without populating anything.
    pub(crate) fn map(&self, mem: &dyn Memory) -> Vec<u8> {
        // `validate` (and the load-time checks) bound `len`, so it fits in memory.
        let len = usize::try_from(self.len.min(MAX_COVERAGE_COUNTERS)).unwrap_or(0);
        let mut map = vec![0u8; len];
        let mut done = 0usize;
        while done < len {
            let at = self.addr + done as u64;
            let page_end = page_down(at) + PAGE_SIZE;
            let n = usize::try_from(page_end - at).unwrap_or(len).min(len - done);
            let chunk = &mut map[done..done + n];
            if mem.read(at, chunk).is_err() {
                chunk.fill(0);
            }
            done += n;
        }
        for b in &mut map {
            *b = bucket(*b);
        }
        map
    }

    /// The report's summary of the bucketed map.
    pub(crate) fn summary(&self, mem: &dyn Memory) -> CoverageSummary {
        let map = self.map(mem);
        CoverageSummary {
            counters: map.len() as u64,
            edges_hit: map.iter().filter(|b| **b != 0).count() as u64,
            map_digest: blake3::hash(&map).to_hex().to_string(),
            map,
        }
    }
}

/// AFL's hit-count buckets: 0, 1, 2, 3 → 4, 4..=7 → 8, 8..=15 → 16, 16..=31 → 32,
/// 32..=127 → 64, 128..=255 → 128.
pub fn bucket(count: u8) -> u8 {
    match count {
        0 => 0,
        1 => 1,
        2 => 2,
        3 => 4,
        4..=7 => 8,
        8..=15 => 16,
        16..=31 => 32,
        32..=127 => 64,
        128..=255 => 128,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets() {
        let want = |c: u8| match c {
            0..=2 => c,
            3 => 4,
            4..=7 => 8,
            8..=15 => 16,
            16..=31 => 32,
            32..=127 => 64,
            _ => 128,
        };
        for c in 0..=255u8 {
            assert_eq!(bucket(c), want(c), "{c}");
        }
    }

    #[test]
    fn region_validation() {
        assert!(CoverageRegion { addr: 0x40_0000, len: 10 }.validate().is_ok());
        assert!(CoverageRegion { addr: 0x40_0000, len: 0 }.validate().is_err());
        assert!(CoverageRegion { addr: 0x1000, len: 10 }.validate().is_err());
        assert!(CoverageRegion { addr: USER_END - 4, len: 10 }.validate().is_err());
        assert!(CoverageRegion { addr: u64::MAX, len: 10 }.validate().is_err());
        assert!(CoverageRegion { addr: 0x40_0000, len: MAX_COVERAGE_COUNTERS + 1 }.validate().is_err());
    }
}
