//! Guest-physical memory and its frames: reads and writes of guest RAM (marking the frames the
//! monitor wrote), the frame allocator with its pool of page-table frames by level, the count of
//! a shared frame's mappings, and the allocator's state that snapshots save and forks restore.

use super::*;

impl AddressSpace {
    /// Reads a u64 from guest-physical memory (always in bounds for the monitor's own tables).
    pub fn read_u64(&self, gpa: u64) -> u64 {
        self.ram.read_obj::<u64>(GuestAddress(gpa)).unwrap_or(0)
    }

    /// Writes a u64 to guest-physical memory.
    pub fn write_u64(&mut self, gpa: u64, v: u64) {
        // Only called with addresses of frames this allocator handed out: in bounds.
        let _ = self.ram.write_obj(v, GuestAddress(gpa));
        self.mark(gpa, 8);
    }

    fn mark(&mut self, gpa: u64, len: u64) {
        if len == 0 {
            return;
        }
        let (first, last) = (gpa / PAGE_SIZE, (gpa + len - 1) / PAGE_SIZE);
        for f in first..=last {
            if let Some(w) = self.host_dirty.get_mut((f / 64) as usize) {
                *w |= 1 << (f % 64);
            }
        }
    }

    /// Frames (guest-physical addresses) the monitor wrote since the last call, ascending.
    pub fn take_host_dirty(&mut self) -> Vec<u64> {
        let mut out = Vec::new();
        for (i, w) in self.host_dirty.iter_mut().enumerate() {
            let mut bits = std::mem::take(w);
            while bits != 0 {
                let b = bits.trailing_zeros() as u64;
                out.push((i as u64 * 64 + b) * PAGE_SIZE);
                bits &= bits - 1;
            }
        }
        out
    }

    /// The allocator's state.
    pub fn frame_state(&self) -> FrameState {
        FrameState {
            bump: self.bump,
            free: self.free.iter().copied().collect(),
            pt_frames: self.pt_frames.iter().map(|(f, (l, b))| (*f, *l, *b)).collect(),
            root: self.root,
            spaces: self.spaces(),
            shared: self.shared.iter().map(|(f, n)| (*f, *n)).collect(),
            blocks_spaces: self.blocks_spaces(),
            placed: self.placed.clone(),
            pt_pool: self.pt_pool.iter().flat_map(|(l, fs)| fs.iter().map(move |f| (*f, *l))).collect(),
        }
    }

    /// Replaces the allocator's state (RAM contents are restored separately).
    pub fn set_frame_state(&mut self, st: &FrameState) {
        self.bump = st.bump;
        self.free = st.free.iter().copied().collect();
        self.pt_frames = st.pt_frames.iter().map(|(f, l, b)| (*f, (*l, *b))).collect();
        self.root = st.root;
        self.spaces = st.spaces.iter().copied().collect();
        self.spaces.insert(st.root);
        self.shared = st.shared.iter().copied().filter(|(_, n)| *n > 1).collect();
        self.blocks_spaces = st.blocks_spaces.iter().copied().collect();
        self.placed = st.placed.clone();
        self.pt_pool.clear();
        for &(f, l) in &st.pt_pool {
            self.pt_pool.entry(l).or_default().insert(f);
        }
        self.stale.clear();
    }

    /// Level and base address of the page table in `frame`, if it is one.
    pub fn page_table(&self, frame: u64) -> Option<(u32, u64)> {
        self.pt_frames.get(&frame).copied()
    }

    /// Registers a page-table frame the monitor built by hand (the direct map).
    pub fn note_page_table(&mut self, frame: u64, level: u32, base: u64) {
        self.pt_frames.insert(frame, (level, base));
    }

    /// Next never-used frame: everything at or above it is zero in a fresh VM.
    pub fn bump(&self) -> u64 {
        self.bump
    }

    /// Writes bytes to guest-physical memory.
    pub fn write_phys(&mut self, gpa: u64, data: &[u8]) {
        let _ = self.ram.write_slice(data, GuestAddress(gpa));
        self.mark(gpa, data.len() as u64);
    }

    /// Reads bytes from guest-physical memory.
    pub fn read_phys(&self, gpa: u64, buf: &mut [u8]) {
        if self.ram.read_slice(buf, GuestAddress(gpa)).is_err() {
            buf.fill(0);
        }
    }

    /// Allocates a zeroed frame.
    pub fn alloc_frame(&mut self) -> Result<u64, MemError> {
        let frame = self.take_frame()?;
        self.write_phys(frame, &[0u8; PAGE_SIZE as usize]);
        Ok(frame)
    }

    /// Allocates a zeroed frame for a page table of `level`: one that was a table of that
    /// level before if there is one (see `pt_pool`).
    pub(super) fn alloc_table_frame(&mut self, level: u32) -> Result<u64, MemError> {
        match self.pt_pool.get_mut(&level).and_then(BTreeSet::pop_first) {
            Some(f) => {
                self.write_phys(f, &[0u8; PAGE_SIZE as usize]);
                Ok(f)
            }
            None => self.alloc_frame(),
        }
    }

    /// Keeps `frame`, a page table of `level` no space uses any more, for tables of that level.
    pub(super) fn pool_table_frame(&mut self, frame: u64, level: u32) {
        self.pt_frames.remove(&frame);
        self.pt_pool.entry(level).or_default().insert(frame);
    }

    /// Allocates a frame whose contents the caller overwrites whole.
    pub(super) fn take_frame(&mut self) -> Result<u64, MemError> {
        if let Some(f) = self.free.pop_first() {
            Ok(f)
        } else if self.bump + PAGE_SIZE <= self.size {
            self.bump += PAGE_SIZE;
            Ok(self.bump - PAGE_SIZE)
        } else {
            Err(MemError::OutOfFrames)
        }
    }

    fn free_frame(&mut self, frame: u64) {
        self.free.insert(frame);
    }

    /// Drops one mapping of the data frame `frame`: freed with its last one.
    pub(super) fn release(&mut self, frame: u64) {
        match self.shared.get_mut(&frame) {
            Some(n) => {
                *n -= 1;
                if *n <= 1 {
                    self.shared.remove(&frame);
                }
            }
            None => self.free_frame(frame),
        }
    }

    /// Frames not yet handed out.
    pub fn frames_left(&self) -> u64 {
        let pooled: usize = self.pt_pool.values().map(BTreeSet::len).sum();
        (self.size - self.bump) / PAGE_SIZE + self.free.len() as u64 + pooled as u64
    }
}
