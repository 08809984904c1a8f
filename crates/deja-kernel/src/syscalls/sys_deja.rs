//! The deja syscall: the SDK's requests to the monitor (see [`oracle`](crate::record::oracle) for the
//! protocol's rules and the state it keeps), and the Antithesis SDKs' messages, served as the
//! same requests (see [`antithesis`]).

use crate::prelude::*;
use deja_protocol::{
    split_word, AssertKind, Request, SiteRecord, MAX_DETAILS, MAX_MESSAGE, MAX_SITES, MAX_TEXT, PROTOCOL_VERSION,
    SITE_RECORD_SIZE,
};

use crate::abi::errno::{EFAULT, EINVAL};
use crate::kernel::{Kernel, SysResult, SysStop};
use crate::record::antithesis::{self, Message};
use crate::record::oracle::{Site, MAX_EVENTS, NODE};
use crate::{AssertionContext, EventRecord, LifecycleRecord, Memory};

/// Path prefixes a program may exclude from storage faults, at most.
pub(crate) const MAX_EXCLUDED: usize = 64;

impl Kernel {
    /// Serves the deja syscall (`a` = RDI, RSI, RDX, R10, R8, R9); a failure is counted as a
    /// protocol error.
    pub(crate) fn sys_deja(&mut self, mem: &mut dyn Memory, a: [u64; 6]) -> SysResult {
        let r = self.deja_request(mem, a);
        if r.is_err() {
            self.oracle.protocol_errors = self.oracle.protocol_errors.saturating_add(1);
        }
        r
    }

    fn deja_request(&mut self, mem: &mut dyn Memory, a: [u64; 6]) -> SysResult {
        let (version, code) = split_word(a[0]);
        if version != PROTOCOL_VERSION {
            return Err(EINVAL.into());
        }
        match Request::from_code(code).ok_or(SysStop::Err(EINVAL))? {
            Request::Hello => Ok(u64::from(PROTOCOL_VERSION)),
            Request::Catalog => self.deja_catalog(mem, a[1], a[2]),
            Request::Assert => self.deja_assert(mem, a[1], a[2], a[3], a[4]),
            Request::SetupComplete => {
                let details = self.guest_text(mem, a[1], a[2], MAX_DETAILS)?;
                self.setup_complete(details);
                Ok(0)
            }
            Request::Event => {
                let name = self.guest_text(mem, a[1], a[2], MAX_DETAILS)?;
                let details = self.guest_text(mem, a[3], a[4], MAX_DETAILS)?;
                self.event(name, details);
                Ok(0)
            }
            Request::Random => Ok(self.faults.sdk_random()),
            Request::Choice => {
                let n = a[1];
                if n == 0 {
                    return Err(EINVAL.into());
                }
                Ok(self.faults.sdk_choice(n))
            }
            Request::ExcludePath => {
                let path = self.guest_text(mem, a[1], a[2], MAX_TEXT)?;
                if !path.starts_with('/') {
                    return Err(EINVAL.into());
                }
                if self.faults.excluded.len() < MAX_EXCLUDED && !self.faults.excluded.contains(&path) {
                    self.faults.excluded.push(path);
                }
                Ok(0)
            }
            Request::FailStopIsFailure => {
                self.faults.fail_stop_is_failure = true;
                Ok(0)
            }
            Request::AntithesisMessage => {
                if a[2] == 0 || a[2] > MAX_MESSAGE as u64 {
                    return Err(EINVAL.into());
                }
                let message = self.guest_text(mem, a[1], a[2], MAX_MESSAGE)?;
                self.sdk_messages(message.as_bytes());
                Ok(0)
            }
        }
    }

    /// (index of the syscall being served, virtual time).
    fn deja_now(&self) -> (u64, u64) {
        (self.record.tracer.syscalls(), self.sched.clock.now_ns())
    }

    /// Reads `min(len, max)` bytes at `addr` as UTF-8 (lossy); nothing is read when `len` is 0.
    fn guest_text(&self, mem: &mut dyn Memory, addr: u64, len: u64, max: usize) -> Result<String, SysStop> {
        let n = usize::try_from(len).unwrap_or(usize::MAX).min(max);
        if n == 0 {
            return Ok(String::new());
        }
        let mut b = vec![0u8; n];
        self.process.mappings.copy_in(mem, addr, &mut b).map_err(|_| SysStop::Err(EFAULT))?;
        Ok(String::from_utf8_lossy(&b).into_owned())
    }

    fn deja_catalog(&mut self, mem: &mut dyn Memory, ptr: u64, n: u64) -> SysResult {
        let count = usize::try_from(n).ok().filter(|c| *c <= MAX_SITES).ok_or(SysStop::Err(EINVAL))?;
        if count == 0 {
            return Ok(0);
        }
        let mut raw = vec![0u8; count * SITE_RECORD_SIZE];
        self.process.mappings.copy_in(mem, ptr, &mut raw).map_err(|_| SysStop::Err(EFAULT))?;
        let mut new: Vec<(u64, Site)> = Vec::new();
        for chunk in raw.chunks_exact(SITE_RECORD_SIZE) {
            let mut b = [0u8; SITE_RECORD_SIZE];
            b.copy_from_slice(chunk);
            let rec = SiteRecord::from_bytes(&b);
            let Some(kind) = AssertKind::from_code(rec.kind) else { continue };
            let message = self.guest_text(mem, rec.message_ptr, rec.message_len, MAX_TEXT)?;
            let file = self.guest_text(mem, rec.file_ptr, rec.file_len, MAX_TEXT)?;
            new.push((rec.id, Site::new(kind, rec.line, message, file)));
        }
        for (id, site) in new {
            self.register_site(id, site);
        }
        Ok(0)
    }

    fn deja_assert(&mut self, mem: &mut dyn Memory, id: u64, cond: u64, ptr: u64, len: u64) -> SysResult {
        if !self.oracle.sites.contains_key(&id) || cond > 1 {
            return Err(EINVAL.into());
        }
        let details = self.guest_text(mem, ptr, len, MAX_DETAILS)?;
        self.assertion_hit(id, cond == 1, details);
        Ok(0)
    }

    /// Counts one evaluation of the known site `id` (`held`: its condition held) with its
    /// context: the first failure and the first satisfaction keep theirs.
    fn assertion_hit(&mut self, id: u64, held: bool, details: String) {
        let (syscall_index, virtual_time_ns) = self.deja_now();
        let decision_index = self.faults.log.len();
        let (tid, pid) = (self.caller(), self.pid_of(self.caller()));
        let process = self.process_name();
        let Some(site) = self.oracle.sites.get_mut(&id) else { return };
        let held = match site.kind() {
            AssertKind::Always | AssertKind::AlwaysOrUnreachable | AssertKind::Sometimes => held,
            AssertKind::Reachable => true,
            AssertKind::Unreachable => false,
        };
        let ctx = || AssertionContext {
            syscall_index,
            virtual_time_ns,
            decision_index,
            node: NODE,
            thread: tid as u32,
            details,
            pid,
            process,
        };
        site.hits = site.hits.saturating_add(1);
        if held {
            site.passes = site.passes.saturating_add(1);
            let satisfiable = matches!(site.kind(), AssertKind::Sometimes | AssertKind::Reachable);
            if satisfiable && site.first_satisfied.is_none() {
                site.first_satisfied = Some(ctx());
            }
        } else {
            site.failures = site.failures.saturating_add(1);
            if site.first_failure.is_none() {
                site.first_failure = Some(ctx());
            }
        }
    }

    /// Registers a site unless its id is known or the catalog is full; whether it is known now.
    fn register_site(&mut self, id: u64, site: Site) -> bool {
        let sites = &mut self.oracle.sites;
        if sites.len() >= MAX_SITES && !sites.contains_key(&id) {
            return false;
        }
        sites.entry(id).or_insert(site);
        true
    }

    fn setup_complete(&mut self, details: String) {
        if self.oracle.setup_complete.is_none() {
            let (syscall_index, virtual_time_ns) = self.deja_now();
            self.oracle.setup_complete = Some(LifecycleRecord { syscall_index, virtual_time_ns, details });
        }
    }

    fn event(&mut self, name: String, details: String) {
        if self.oracle.events.len() < MAX_EVENTS {
            let (syscall_index, virtual_time_ns) = self.deja_now();
            let durable_writes = self.faults.durable_writes;
            self.oracle.events.push(EventRecord { name, details, syscall_index, virtual_time_ns, durable_writes });
        } else {
            self.oracle.events_dropped = self.oracle.events_dropped.saturating_add(1);
        }
    }

    /// Serves what a program wrote to the device of the Antithesis SDKs' messages: each line is
    /// one message ([`antithesis::parse`]), served as the deja syscall's requests are; a line
    /// that is not a message counts as a protocol error. A write carries whole lines (the SDKs
    /// write each message and its newline at once); a last line without its newline is read
    /// as a whole message too.
    pub(crate) fn sdk_messages(&mut self, data: &[u8]) {
        for line in data.split(|b| *b == b'\n') {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let Some(messages) = antithesis::parse(line) else {
                self.oracle.protocol_errors = self.oracle.protocol_errors.saturating_add(1);
                continue;
            };
            for m in messages {
                match m {
                    Message::Assert { id, kind, hit, condition, message, file, line, details } => {
                        let site = Site::new(kind, line, message, file);
                        if self.register_site(id, site) && hit {
                            self.assertion_hit(id, condition, details);
                        }
                    }
                    Message::Setup(details) => self.setup_complete(details),
                    Message::Event(name, details) => self.event(name, details),
                    Message::Ignored => {}
                }
            }
        }
    }
}
