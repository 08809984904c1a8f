//! Memory: the guest's user memory as the kernel sees it, the address space's layout and VMAs,
//! and what loading a program puts in it.
//!
//! Owns the [`Memory`](mem::Memory) trait the shell implements (with
//! [`FakeMemory`](mem::FakeMemory) for tests; `mem.rs`), the fixed address-space layout
//! (`user_layout.rs`), the VMAs with placement, commit accounting, faults and user copies
//! ([`Mappings`](mappings::Mappings); `mappings.rs`), ELF parsing and validation (`elf.rs`) and
//! the initial stack (`stack.rs`). Uses only [`crate::abi`] and [`crate::persist`]; what the file
//! system adds to the VMAs (file mappings sharing the declared files' bytes, `/proc/<pid>/maps`)
//! is in [`crate::fs`], above this room.

pub(crate) mod elf;
pub(crate) mod mappings;
pub mod mem;
pub(crate) mod shared_object;
pub(crate) mod stack;
pub mod user_layout;
