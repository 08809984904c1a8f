//! Time as the guest sees it: the virtual clock ([`clock`]) and deja's vDSO, which lets a
//! program read that clock without a VM exit ([`vdso`]).
//!
//! Owns [`clock::Clock`] (saved with the scheduler's part) and the vDSO image, its vvar page and
//! the per-process [`vdso::VdsoState`]. Uses [`crate::mm`] (the vDSO is two mappings of the
//! address space), [`crate::abi`] (the clock ids) and [`crate::persist`]. The host clock is
//! never read.

pub mod clock;
pub mod vdso;
