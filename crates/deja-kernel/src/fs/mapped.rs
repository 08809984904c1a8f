//! What the file system adds to a process's VMAs ([`Mappings`], in [`crate::mm`], which knows
//! nothing of files): file mappings share the bytes of the declared files they map, and
//! `/proc/<pid>/maps` names the executable by its inode.

use crate::prelude::*;
use core::fmt::Write as _;

use super::{ino_of, Fs};
use crate::mm::mappings::{Mappings, VmaKind};

impl Mappings {
    /// Replaces the contents of every file mapping by the equal contents of the declared file
    /// in `fs` (so a loaded or restored state shares them instead of holding copies), and
    /// gives the mapping that file's inode number.
    pub fn share_file_data(&mut self, fs: &Fs) {
        for v in self.iter_mut() {
            if let VmaKind::File { path, data, ino, .. } = &mut v.kind {
                if let Some((d, n)) = fs.same_static(path, &data.0) {
                    data.0 = d;
                    *ino = n;
                }
            }
        }
    }

    /// `/proc/self/maps` in Linux's format.
    pub fn maps(&self, exe_path: &str) -> String {
        let mut s = String::new();
        for v in self.iter() {
            let r = if v.prot.readable() { 'r' } else { '-' };
            let w = if v.prot.writable() { 'w' } else { '-' };
            let x = if v.prot.executable() { 'x' } else { '-' };
            let p = if v.shared { 's' } else { 'p' };
            let (off, dev, ino, name) = match &v.kind {
                VmaKind::Image { offset } => (*offset, "00:01", ino_of(exe_path), Some(exe_path.to_string())),
                VmaKind::Heap => (0, "00:00", 0, Some("[heap]".to_string())),
                VmaKind::Stack => (0, "00:00", 0, Some("[stack]".to_string())),
                VmaKind::Anon => (0, "00:00", 0, None),
                VmaKind::Vdso { .. } => (0, "00:00", 0, Some("[vdso]".to_string())),
                VmaKind::Vvar => (0, "00:00", 0, Some("[vvar]".to_string())),
                VmaKind::Jumps => (0, "00:00", 0, Some("[deja-jumps]".to_string())),
                VmaKind::File { path, offset, ino, .. } => (*offset, "00:01", *ino, Some(path.clone())),
            };
            let mut line = String::new();
            let _ = write!(line, "{:08x}-{:08x} {r}{w}{x}{p} {off:08x} {dev} {ino} ", v.start, v.end);
            if let Some(name) = name {
                // Linux pads the prefix to 72 columns, then one space, then the name.
                while line.len() < 72 {
                    line.push(' ');
                }
                line.push(' ');
                line.push_str(&name);
            }
            s.push_str(&line);
            s.push('\n');
        }
        s
    }
}
