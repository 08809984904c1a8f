//! The kernel's window in the VM (the guest placement, `deja_kernel::placement`): mapping the
//! image, its stack, heap and transfer area, pointing `LSTAR` at the image, and running the guest
//! until the kernel calls the host. [`crate::placement`] drives a run through these.

use deja_kernel::placement::image::Image;
use deja_kernel::placement::{
    mem_status, BootBlock, ExcFrame, MemOp, BOOT_BLOCK, BOOT_BLOCK_LEN, EXC_FRAME, EXC_FRAME_LEN, HEAP, PHYS_MAX,
    PHYS_WINDOW, STACK_BOTTOM, STACK_TOP, TRANSFER,
};
use deja_kernel::{MemError, Memory, Prot, PAGE_SIZE};
use kvm_bindings::{kvm_msr_entry, Msrs};
use kvm_ioctls::SyncReg;

use super::run::{gprs_of, set_gprs, Exit};
use super::{ioctl, set_user_segments, Vm, VmError, MSR_CSTAR, MSR_LSTAR, MSR_SFMASK, RFLAGS_FIXED, RFLAGS_RF};
use crate::layout::{EXCEPTION_PORT_BASE, SYSCALL_PORT};
use crate::paging::{PTE_A, PTE_D, PTE_NX, PTE_P, PTE_U, PTE_W};

/// The flags a `syscall` clears in the guest placement: TF, DF, IOPL, NT and AC, as the host
/// placement's mask, but not IF.
pub(crate) const GUEST_SFMASK: u64 = 0x4_7500;

/// Where [`Vm::run_to_hostcall`] stopped.
#[derive(Debug)]
pub(crate) enum GuestStop {
    /// At the kernel's host call.
    HostCall,
    /// The program raised an exception.
    Exception(ExcFrame),
}

/// Why the guest stopped short of a host call.
fn unexpected(what: String, rip: u64) -> VmError {
    VmError::Unexpected { what, rip }
}

impl Vm {
    /// Maps the window: the boot block (`block`), the kernel's stack, the image page by page
    /// with its protections, `block.heap_len` bytes of heap, and the transfer area with `input`
    /// at its start and `block.output_cap` bytes of output after it. Every page is a user page:
    /// the kernel runs in ring 3.
    pub(crate) fn map_window(&mut self, image: &Image, block: &BootBlock, input: &[u8]) -> Result<(), VmError> {
        let oom = |what: &str| unexpected(format!("no guest memory for the kernel's {what}"), 0);
        let space = &mut self.space;
        space.populate(BOOT_BLOCK, PAGE_SIZE, Prot::RW).map_err(|_| oom("boot block"))?;
        space.write(BOOT_BLOCK, &block.encode()).map_err(|_| oom("boot block"))?;
        space.populate(STACK_BOTTOM, STACK_TOP - STACK_BOTTOM, Prot::RW).map_err(|_| oom("stack"))?;
        for (at, len, prot) in image.runs() {
            space.populate(at, len, Prot::RW).map_err(|_| oom("image"))?;
            let from = (at - deja_kernel::placement::IMAGE_BASE) as usize;
            space.write(at, &image.bytes[from..from + len as usize]).map_err(|_| oom("image"))?;
            space.protect(at, len, prot);
        }
        let round = |n: u64| n.div_ceil(PAGE_SIZE) * PAGE_SIZE;
        if block.heap_len > 0 {
            space.populate(HEAP, round(block.heap_len), Prot::RW).map_err(|_| oom("heap"))?;
        }
        let transfer = round(input.len() as u64) + round(block.output_cap);
        space.populate(TRANSFER, transfer.max(PAGE_SIZE), Prot::RW).map_err(|_| oom("transfer area"))?;
        space.write(TRANSFER, input).map_err(|_| oom("transfer area"))?;
        // Guest RAM for the kernel, page by page, read-write and never executable.
        let ram = space.size().min(PHYS_MAX);
        for gpa in (0..ram).step_by(PAGE_SIZE as usize) {
            space
                .map_page(PHYS_WINDOW + gpa, gpa, PTE_P | PTE_W | PTE_U | PTE_A | PTE_D | PTE_NX)
                .map_err(|_| oom("physical window"))?;
        }
        // The image's pages were written before their protection was narrowed: the ring-0 sync
        // need not replay entries no CPU has cached yet.
        space.take_stale();
        Ok(())
    }

    /// Writes what the kernel reads after every host call into the boot block: the current
    /// space's root, the RAM the physical window maps, the free frames, `status`.
    pub(crate) fn refresh_boot_block(&mut self, status: u64) -> Result<(), VmError> {
        self.refresh_answer(status, 0)
    }

    /// [`Vm::refresh_boot_block`] with a page operation's answer (a new space's id, else 0).
    fn refresh_answer(&mut self, status: u64, answer: u64) -> Result<(), VmError> {
        let bytes = self.read_window(BOOT_BLOCK, BOOT_BLOCK_LEN as u64)?;
        let Some(mut block) = BootBlock::decode(&bytes) else {
            return Err(unexpected("the kernel damaged its boot block".into(), self.rip()));
        };
        block.root = self.space.root();
        block.ram_len = self.space.size().min(PHYS_MAX);
        block.free_frames = self.space.free_frames();
        block.status = status;
        block.answer = answer;
        self.space.write(BOOT_BLOCK, &block.encode()).map_err(|e| unexpected(format!("boot block: {e}"), BOOT_BLOCK))
    }

    /// Serves the kernel's page operation ([`Request::Memory`]) on the monitor's page tables,
    /// after checking it ([`BootBlock::mem_op`]); the answer goes into the boot block.
    pub(crate) fn serve_memory_request(&mut self) -> Result<MemOp, VmError> {
        let bytes = self.read_window(BOOT_BLOCK, BOOT_BLOCK_LEN as u64)?;
        let block =
            BootBlock::decode(&bytes).ok_or_else(|| unexpected("the kernel damaged its boot block".into(), 0))?;
        let Some(op) = block.mem_op() else {
            return Err(unexpected(
                format!("the kernel asked for page operation {} on {:x?}", block.op, block.args),
                0,
            ));
        };
        let [a, b, c] = block.args;
        let mut answer = 0;
        let new_space = |made: Result<u64, MemError>, answer: &mut u64| match made {
            Ok(id) => {
                *answer = id;
                mem_status::OK
            }
            Err(MemError::OutOfFrames) => mem_status::OUT_OF_FRAMES,
            Err(_) => mem_status::OUT_OF_RANGE,
        };
        let status = match op {
            MemOp::Populate => match self.space.populate(a, b, Prot(c as u32)) {
                Ok(()) => mem_status::OK,
                Err(MemError::OutOfFrames) => mem_status::OUT_OF_FRAMES,
                Err(_) => mem_status::OUT_OF_RANGE,
            },
            MemOp::Protect => {
                self.space.protect(a, b, Prot(c as u32));
                mem_status::OK
            }
            MemOp::Unmap => {
                self.space.unmap(a, b);
                mem_status::OK
            }
            MemOp::MovePages => {
                self.space.move_pages(a, b, c);
                mem_status::OK
            }
            MemOp::Unshare => match self.space.unshare_page(a, b == 1) {
                Ok(true) => mem_status::OK,
                Ok(false) => mem_status::NO,
                Err(MemError::OutOfFrames) => mem_status::OUT_OF_FRAMES,
                Err(_) => mem_status::OUT_OF_RANGE,
            },
            MemOp::ForkSpace => {
                let words = self.read_window(block.output_at(), a * 16)?;
                let Some(shared) = deja_kernel::placement::fork_ranges(&words, a) else {
                    return Err(unexpected(
                        format!("the kernel asked to fork sharing {a} ranges, not all of them the program's"),
                        0,
                    ));
                };
                new_space(self.space.fork_space(&shared), &mut answer)
            }
            MemOp::NewSpace => new_space(self.space.new_space(), &mut answer),
            MemOp::SwitchSpace => {
                self.space.switch_space(a);
                mem_status::OK
            }
            MemOp::DropSpace => {
                self.space.drop_space(a);
                mem_status::OK
            }
        };
        self.refresh_answer(status, answer)?;
        Ok(op)
    }

    /// Loads the thread's FS and GS bases ([`deja_kernel::placement::Request::Bases`]).
    pub(crate) fn set_bases(&mut self, fs: u64, gs: u64) -> Result<(), VmError> {
        self.apply_bases(fs, gs);
        self.refresh_boot_block(0)
    }

    /// Returns from the host call as its `ret` would: RIP from the top of the kernel's stack.
    pub(crate) fn return_from_hostcall(&mut self) -> Result<(), VmError> {
        let rsp = self.vcpu.sync_regs().regs.rsp;
        let mut word = [0u8; 8];
        if !(STACK_BOTTOM..STACK_TOP - 8).contains(&rsp) || self.space.read(rsp, &mut word).is_err() {
            return Err(unexpected(format!("the kernel's stack pointer {rsp:#x} left its stack"), self.rip()));
        }
        let sync = self.vcpu.sync_regs_mut();
        sync.regs.rip = u64::from_le_bytes(word);
        sync.regs.rsp = rsp + 8;
        self.mark_dirty(SyncReg::Register);
        Ok(())
    }

    /// Points `LSTAR` (and `CSTAR`) at `entry`, where the program's `syscall`s land, and the jump
    /// sites' gate (`deja_kernel::host::jumps::GATE`) at `jump_entry`, where its planned sites
    /// jump without a trap. A `syscall` then keeps IF ([`GUEST_SFMASK`]): the kernel returns to
    /// the program with `popfq` in ring 3, which cannot set IF again, and the program would run
    /// on (and see in `pushf` and its signal frames) IF clear where the host placement's monitor
    /// gives it back set.
    pub(crate) fn set_entries(&mut self, entry: u64, jump_entry: u64) -> Result<(), VmError> {
        self.space
            .write_phys(super::USER_STUB_PHYS + super::GATE_OFFSET, &deja_kernel::host::jumps::guest_gate(jump_entry));
        let msr = |index, data| kvm_msr_entry { index, data, ..Default::default() };
        let msrs = Msrs::from_entries(&[msr(MSR_LSTAR, entry), msr(MSR_CSTAR, entry), msr(MSR_SFMASK, GUEST_SFMASK)])
            .map_err(|_| unexpected("MSR list too large".into(), 0))?;
        let n = ioctl("KVM_SET_MSRS", self.vcpu.set_msrs(&msrs))?;
        if n != 3 {
            return Err(unexpected(format!("KVM accepted only {n} of LSTAR, CSTAR and SFMASK"), 0));
        }
        Ok(())
    }

    /// Runs the guest until the kernel's host-call instruction at `hostcall` exits
    /// ([`GuestStop::HostCall`]) or the program raises an exception ([`GuestStop::Exception`],
    /// the program's registers in the frame). Any other exit (an exception in the kernel's
    /// window, a `syscall` that reached the monitor's stub, a `hlt`) is an error that names it and
    /// where.
    pub(crate) fn run_to_hostcall(&mut self, hostcall: u64) -> Result<GuestStop, VmError> {
        self.pin_thread()?;
        // No exit for a while is progress as long as the kernel in the guest serves syscalls
        // (it counts them in the boot block); a guest that neither exits nor makes a syscall
        // for the limit is stopped, as in the host placement.
        let limit = self.no_progress;
        let _watchdog = crate::watchdog::Armed::arm(limit).map_err(|what| unexpected(what, 0))?;
        let served = |vm: &Vm| {
            vm.read_window(BOOT_BLOCK, BOOT_BLOCK_LEN as u64).ok().and_then(|b| BootBlock::decode(&b)).map(|b| b.served)
        };
        let (mut progress, mut last) = (std::time::Instant::now(), served(self));
        loop {
            self.pt_sync()?;
            self.follow_space();
            let exit = self.kvm_run()?;
            let rip = self.rip();
            match exit {
                Exit::Interrupted => {
                    let now = served(self);
                    if now != last {
                        (progress, last) = (std::time::Instant::now(), now);
                    } else if limit.is_some_and(|l| progress.elapsed() >= l) {
                        return Err(VmError::NoProgress {
                            ms: progress.elapsed().as_millis() as u64,
                            syscalls: now.unwrap_or(0),
                            rip,
                            thread: 0,
                            signals: String::new(),
                        });
                    }
                    continue;
                }
                Exit::Out(SYSCALL_PORT) if rip == hostcall || rip == hostcall + 2 => return Ok(GuestStop::HostCall),
                Exit::Out(SYSCALL_PORT) => {
                    return Err(unexpected(
                        "a syscall reached the monitor while the kernel is in the guest".into(),
                        rip,
                    ))
                }
                Exit::Out(port) if (EXCEPTION_PORT_BASE..EXCEPTION_PORT_BASE + 32).contains(&port) => {
                    let vector = (port - EXCEPTION_PORT_BASE) as u8;
                    let regs = self.vcpu.sync_regs().regs;
                    let frame = self.read_frame(regs.rsp, vector)?;
                    if let Some(part) = deja_kernel::placement::part_of(frame.rip) {
                        return Err(unexpected(format!("exception {vector} in {part}"), frame.rip));
                    }
                    self.stats.exception_exits += 1;
                    let mut gprs = gprs_of(&regs);
                    gprs[4] = frame.rsp;
                    let cr2 = self.vcpu.sync_regs().sregs.cr2;
                    return Ok(GuestStop::Exception(ExcFrame {
                        vector: u64::from(vector),
                        error_code: frame.error_code,
                        addr: cr2,
                        gprs,
                        rip: frame.rip,
                        rflags: frame.rflags,
                    }));
                }
                Exit::Out(port) => return Err(unexpected(format!("the guest wrote to port {port:#x}"), rip)),
                Exit::In(port) => return Err(unexpected(format!("the guest read port {port:#x}"), rip)),
                Exit::Other(what) => return Err(unexpected(what, rip)),
            }
        }
    }

    /// Hands the program's exception to the kernel: the frame into the boot block's page, the
    /// vCPU to `entry` in ring 3 on the kernel's stack.
    pub(crate) fn enter_exception(&mut self, entry: u64, frame: &ExcFrame) -> Result<(), VmError> {
        self.space
            .write(EXC_FRAME, &frame.encode())
            .map_err(|e| unexpected(format!("exception frame: {e}"), EXC_FRAME))?;
        self.refresh_boot_block(0)?;
        self.resume_ring3(&[0; 16], entry, STACK_TOP, RFLAGS_FIXED);
        Ok(())
    }

    /// Resumes the program with the registers the kernel left in the exception frame.
    pub(crate) fn leave_exception(&mut self) -> Result<(), VmError> {
        let bytes = self.read_window(EXC_FRAME, EXC_FRAME_LEN as u64)?;
        let Some(frame) = ExcFrame::decode(&bytes) else {
            return Err(unexpected("the kernel damaged the exception frame".into(), EXC_FRAME));
        };
        let rflags = (frame.rflags & !RFLAGS_RF) | RFLAGS_FIXED;
        self.resume_ring3(&frame.gprs, frame.rip, frame.gprs[4], rflags);
        Ok(())
    }

    /// Ring 3 at `rip` with `gprs` (RSP replaced by `rsp`), the thread's FS and GS bases.
    fn resume_ring3(&mut self, gprs: &[u64; 16], rip: u64, rsp: u64, rflags: u64) {
        let (fs, gs) = (self.fs_base, self.gs_base);
        let sync = self.vcpu.sync_regs_mut();
        set_gprs(&mut sync.regs, gprs);
        sync.regs.rsp = rsp;
        sync.regs.rip = rip;
        sync.regs.rflags = rflags;
        set_user_segments(&mut sync.sregs);
        sync.sregs.fs.base = fs;
        sync.sregs.gs.base = gs;
        self.mark_dirty(SyncReg::Register);
        self.mark_dirty(SyncReg::SystemRegister);
    }

    /// Reads `len` bytes of the window at `at` (the boot block, the output).
    pub(crate) fn read_window(&self, at: u64, len: u64) -> Result<Vec<u8>, VmError> {
        let mut buf = vec![0u8; len as usize];
        self.space.read(at, &mut buf).map_err(|e| unexpected(format!("reading the window: {e}"), at))?;
        Ok(buf)
    }
}
