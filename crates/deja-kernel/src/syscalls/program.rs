//! The program a path runs, for `execve` and for the processes deja starts: the file, if its
//! owner may execute it, or the interpreter its `#!` line names, followed as Linux follows it.

use crate::prelude::*;
use alloc::sync::Arc;

use crate::abi::errno::*;
use crate::kernel::{map_program, Image, Kernel};
use crate::task::procs::Mm;
use crate::{Entry, Memory};

/// Most interpreters an `execve` follows (`#!` lines), as Linux's `BINPRM_MAX_RECURSION`.
const MAX_INTERPRETERS: usize = 4;

/// A program to load: its bytes, its path and its argv.
pub(crate) type Loadable = (Arc<[u8]>, String, Vec<Vec<u8>>);

impl Kernel {
    /// The program a file runs: itself, or the interpreter its `#!` line names (up to
    /// [`MAX_INTERPRETERS`] deep), with the script's path as its argument, as Linux runs it.
    /// `script` is the path as it was executed; returns the bytes, path and argv to load.
    pub(crate) fn follow_interpreters(
        &self,
        mut bytes: Arc<[u8]>,
        mut exe: String,
        mut script: String,
        mut args: Vec<Vec<u8>>,
    ) -> Result<Loadable, i32> {
        for depth in 0.. {
            if !bytes.starts_with(b"#!") {
                break;
            }
            if depth == MAX_INTERPRETERS {
                return Err(ELOOP);
            }
            let line = bytes[2..].iter().take(255).take_while(|&&b| b != b'\n').copied().collect::<Vec<u8>>();
            let line = String::from_utf8_lossy(&line).trim().to_string();
            let (interp, arg) = match line.split_once([' ', '\t']) {
                Some((i, a)) => (i.to_string(), Some(a.trim().to_string())),
                None => (line.clone(), None),
            };
            if interp.is_empty() {
                return Err(ENOEXEC);
            }
            let mut new_args = vec![interp.clone().into_bytes()];
            new_args.extend(arg.map(String::into_bytes));
            // The script as it was executed (`./script`), as Linux passes it.
            new_args.push(script.clone().into_bytes());
            script = interp.clone();
            new_args.extend(args.into_iter().skip(1));
            args = new_args;
            let start = if interp.starts_with('/') { crate::fs::ROOT } else { self.files.cwd };
            let w = self.files.fs.walk_checked(start, interp.as_bytes(), true)?;
            let id = self.target_id(&w)?;
            exe = self.files.fs.path_in(w.parent, w.name.as_deref().unwrap_or(""));
            bytes = self.executable(id)?;
        }
        Ok((bytes, exe, args))
    }

    /// The contents of the regular file `id`, if the caller may execute it.
    pub(crate) fn executable(&self, id: u64) -> Result<Arc<[u8]>, i32> {
        let inode = self.files.fs.get(id).ok_or(ENOENT)?;
        if inode.is_dir() {
            return Err(EACCES);
        }
        if self.files.fs.stat(id).mode & 0o100 == 0 {
            return Err(EACCES);
        }
        self.files.fs.snapshot(id).ok_or(EACCES)
    }
}

impl Kernel {
    /// `image` loaded in a new address space with `args` and `env`, as `execve` loads a program:
    /// the current process's rewriting, jump-site and vDSO modes, the commit capacity of the
    /// frames left, a fresh `AT_RANDOM`. The new space is current on success (its id, its parts
    /// and the entry are returned); on failure it is dropped, the caller's space is current
    /// again, and the error is the errno `execve` gives.
    pub(crate) fn load_in_new_space(
        &mut self,
        mem: &mut dyn Memory,
        image: &Image<'_>,
        args: &[Vec<u8>],
        env: &[Vec<u8>],
    ) -> Result<(u64, Mm, Entry), i32> {
        let home = mem.space();
        let space = mem.new_space().map_err(|_| ENOMEM)?;
        mem.switch_space(space);
        let free = mem.free_frames();
        let capacity = free - free / 100 * crate::kernel::PAGE_TABLE_MARGIN_PERCENT;
        let mut random = [0u8; 16];
        self.rng.fill(&mut random);
        let vdso = match self.process.vdso.is_some() {
            true => crate::time::vdso::VdsoMode::On,
            false => crate::time::vdso::VdsoMode::Off,
        };
        let (rewrite, jumps) = (self.process.host.mode, self.process.host.jumps.mode);
        match map_program(mem, &self.files.fs, image, args, env, rewrite, jumps, vdso, capacity, random) {
            Ok((mm, entry)) => Ok((space, mm, entry)),
            Err(e) => {
                mem.switch_space(home);
                mem.drop_space(space);
                Err(match e {
                    crate::LoadError::OutOfMemory { .. } | crate::LoadError::TooBig { .. } => ENOMEM,
                    crate::LoadError::Dynamic { .. } => ENOENT,
                    crate::LoadError::ArgsTooBig => E2BIG,
                    _ => ENOEXEC,
                })
            }
        }
    }
}
