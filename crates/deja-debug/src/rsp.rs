//! The GDB remote serial protocol, as bytes: packets framed `$data#checksum` (with `}`
//! escapes), acknowledgements, the interrupt byte, and the requests `deja debug` answers,
//! parsed into [`Request`]. Pure: tested without a debugger or a VM.

/// What arrived on the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incoming {
    /// A packet whose checksum matched, unescaped.
    Packet(Vec<u8>),
    /// A packet whose checksum did not match (to be answered with `-`).
    Corrupt,
    /// `+`.
    Ack,
    /// `-`: the last reply is to be sent again.
    Nack,
    /// `\x03`: the debugger asks the program to stop.
    Interrupt,
}

/// Splits the bytes of a connection into [`Incoming`] items, across reads.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
}

impl Decoder {
    /// Takes `bytes` and returns every item they complete.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<Incoming> {
        self.buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        while let Some(&first) = self.buf.first() {
            match first {
                b'+' => {
                    self.buf.remove(0);
                    out.push(Incoming::Ack);
                }
                b'-' => {
                    self.buf.remove(0);
                    out.push(Incoming::Nack);
                }
                0x03 => {
                    self.buf.remove(0);
                    out.push(Incoming::Interrupt);
                }
                b'$' => {
                    let Some(hash) = self.buf.iter().position(|&b| b == b'#') else { break };
                    if self.buf.len() < hash + 3 {
                        break;
                    }
                    let body = self.buf[1..hash].to_vec();
                    let sum = std::str::from_utf8(&self.buf[hash + 1..hash + 3])
                        .ok()
                        .and_then(|s| u8::from_str_radix(s, 16).ok());
                    self.buf.drain(..hash + 3);
                    out.push(match sum == Some(checksum(&body)) {
                        true => Incoming::Packet(unescape(&body)),
                        false => Incoming::Corrupt,
                    });
                }
                // Anything else between packets is line noise.
                _ => {
                    self.buf.remove(0);
                }
            }
        }
        out
    }
}

/// The modulo-256 sum of `data`.
pub fn checksum(data: &[u8]) -> u8 {
    data.iter().fold(0u8, |a, &b| a.wrapping_add(b))
}

/// `data` as a packet on the wire: escaped, framed and summed.
pub fn frame(data: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(data.len() + 4);
    for &b in data {
        if matches!(b, b'$' | b'#' | b'}' | b'*') {
            body.extend_from_slice(&[b'}', b ^ 0x20]);
        } else {
            body.push(b);
        }
    }
    let mut out = vec![b'$'];
    out.extend_from_slice(&body);
    out.extend_from_slice(format!("#{:02x}", checksum(&body)).as_bytes());
    out
}

fn unescape(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len());
    let mut it = body.iter();
    while let Some(&b) = it.next() {
        match b {
            b'}' => {
                if let Some(&n) = it.next() {
                    out.push(n ^ 0x20);
                }
            }
            _ => out.push(b),
        }
    }
    out
}

/// `bytes` as lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Hex pairs as bytes; `None` for an odd length or a non-hex digit.
pub fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

fn num(text: &str) -> Option<u64> {
    u64::from_str_radix(text, 16).ok()
}

/// A request `deja debug` understands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `qSupported`: what both sides can do.
    Supported,
    /// `QStartNoAckMode`.
    NoAck,
    /// `?`: why the program is stopped.
    Why,
    /// `g`: every register of the selected thread.
    ReadRegisters,
    /// `G`: set them.
    WriteRegisters(Vec<u8>),
    /// `p N`: one register.
    ReadRegister(u64),
    /// `P N=V`: set one.
    WriteRegister(u64, Vec<u8>),
    /// `m ADDR,LEN`.
    ReadMemory(u64, u64),
    /// `M ADDR,LEN:BYTES`.
    WriteMemory(u64, Vec<u8>),
    /// `Z0`/`Z1 ADDR,KIND`: a breakpoint in or out (`true`: in).
    Breakpoint(bool, u64),
    /// `Z2`–`Z4`: a watchpoint (kind 2 write, 3 read, 4 access), in or out, at ADDR of LEN bytes.
    Watchpoint(bool, u8, u64, u64),
    /// `c`, `vCont;c`: run on.
    Continue,
    /// `s`, `vCont;s`: one instruction.
    Step,
    /// `bc`: run backwards to the last breakpoint before now.
    ReverseContinue,
    /// `bs`: one instruction backwards.
    ReverseStep,
    /// `qC`: the current thread.
    CurrentThread,
    /// `qfThreadInfo`.
    FirstThreads,
    /// `qsThreadInfo`.
    MoreThreads,
    /// `Hg TID`: the thread whose registers the next requests read (`None`: any, the running
    /// one).
    SelectThread(Option<u64>),
    /// `Hc TID`: the thread to resume (deja resumes the program as a whole).
    SetThread,
    /// `qXfer:exec-file:read::OFFSET,LENGTH`: the program's path, a part of it.
    ExecFile(u64, u64),
    /// `qXfer:auxv:read::OFFSET,LENGTH`: the program's auxiliary vector, a part of it.
    Auxv(u64, u64),
    /// `T TID`: is it alive?
    ThreadAlive(u64),
    /// `qAttached`.
    Attached,
    /// `qRcmd,HEX`: a `monitor` command, as text.
    Monitor(String),
    /// `D`: detach.
    Detach,
    /// `k`: kill.
    Kill,
    /// Anything else: answered with an empty packet (not supported).
    Unknown(String),
}

/// Parses one packet's body.
pub fn parse(packet: &[u8]) -> Request {
    let text = String::from_utf8_lossy(packet).into_owned();
    let t = text.as_str();
    let unknown = || Request::Unknown(t.to_string());
    match t {
        "?" => return Request::Why,
        "g" => return Request::ReadRegisters,
        "c" | "vCont;c" => return Request::Continue,
        "s" | "vCont;s" => return Request::Step,
        "bc" => return Request::ReverseContinue,
        "bs" => return Request::ReverseStep,
        "qC" => return Request::CurrentThread,
        "qfThreadInfo" => return Request::FirstThreads,
        "qsThreadInfo" => return Request::MoreThreads,
        "QStartNoAckMode" => return Request::NoAck,
        "k" => return Request::Kill,
        _ => {}
    }
    if t.starts_with("qSupported") {
        return Request::Supported;
    }
    if t.starts_with("qAttached") {
        return Request::Attached;
    }
    if t == "D" || t.starts_with("D;") {
        return Request::Detach;
    }
    if let Some(rest) = t.strip_prefix("vCont;") {
        // One action for every thread (`c`, `s`, optionally `:TID`).
        return match rest.split(';').next().map(|a| a.split(':').next().unwrap_or("")) {
            Some("c") => Request::Continue,
            Some("s") => Request::Step,
            _ => unknown(),
        };
    }
    if let Some(hex) = t.strip_prefix("qRcmd,") {
        return unhex(hex).map(|b| Request::Monitor(String::from_utf8_lossy(&b).into_owned())).unwrap_or_else(unknown);
    }
    if let Some(tid) = t.strip_prefix("Hg") {
        return match tid {
            "0" | "-1" => Request::SelectThread(None),
            _ => num(tid).map(|t| Request::SelectThread(Some(t))).unwrap_or_else(unknown),
        };
    }
    if t.starts_with('H') {
        return Request::SetThread;
    }
    for (prefix, make) in
        [("qXfer:exec-file:read:", Request::ExecFile as fn(u64, u64) -> Request), ("qXfer:auxv:read:", Request::Auxv)]
    {
        if let Some(rest) = t.strip_prefix(prefix) {
            let range = rest.split_once(':').map_or(rest, |(_, r)| r);
            let parsed = range.split_once(',').and_then(|(o, l)| Some(make(num(o)?, num(l)?)));
            return parsed.unwrap_or_else(unknown);
        }
    }
    if let Some(tid) = t.strip_prefix('T') {
        return num(tid).map(Request::ThreadAlive).unwrap_or_else(unknown);
    }
    if let Some(body) = t.strip_prefix('G') {
        return unhex(body).map(Request::WriteRegisters).unwrap_or_else(unknown);
    }
    if let Some(n) = t.strip_prefix('p') {
        return num(n).map(Request::ReadRegister).unwrap_or_else(unknown);
    }
    if let Some(body) = t.strip_prefix('P') {
        let parsed = body.split_once('=').and_then(|(n, v)| Some(Request::WriteRegister(num(n)?, unhex(v)?)));
        return parsed.unwrap_or_else(unknown);
    }
    if let Some(body) = t.strip_prefix('m') {
        let parsed = body.split_once(',').and_then(|(a, l)| Some(Request::ReadMemory(num(a)?, num(l)?)));
        return parsed.unwrap_or_else(unknown);
    }
    if let Some(body) = t.strip_prefix('M') {
        let parsed = body.split_once(':').and_then(|(head, data)| {
            let (a, l) = head.split_once(',')?;
            let bytes = unhex(data)?;
            (num(l)? == bytes.len() as u64).then_some(Request::WriteMemory(num(a)?, bytes))
        });
        return parsed.unwrap_or_else(unknown);
    }
    if let Some(insert) = t.strip_prefix('Z').map(|r| (true, r)).or_else(|| t.strip_prefix('z').map(|r| (false, r))) {
        let (on, rest) = insert;
        let mut parts = rest.split([',', ';']);
        let (Some(kind), Some(addr), Some(len)) =
            (parts.next(), parts.next().and_then(num), parts.next().and_then(num))
        else {
            return unknown();
        };
        return match kind {
            "0" | "1" => Request::Breakpoint(on, addr),
            "2" => Request::Watchpoint(on, 2, addr, len),
            "3" => Request::Watchpoint(on, 3, addr, len),
            "4" => Request::Watchpoint(on, 4, addr, len),
            _ => unknown(),
        };
    }
    unknown()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_are_framed_escaped_and_split_across_reads() {
        let wire = frame(b"m1000,4#}$");
        assert_eq!(&wire[..8], b"$m1000,4");
        let mut d = Decoder::default();
        let (a, b) = wire.split_at(5);
        let mut got = d.push(b"+");
        got.extend(d.push(a));
        got.extend(d.push(b));
        got.extend(d.push(b"\x03$g#00$g#67-"));
        assert_eq!(
            got,
            [
                Incoming::Ack,
                Incoming::Packet(b"m1000,4#}$".to_vec()),
                Incoming::Interrupt,
                Incoming::Corrupt,
                Incoming::Packet(b"g".to_vec()),
                Incoming::Nack
            ]
        );
    }

    #[test]
    fn requests_are_parsed_and_malformed_ones_are_unknown() {
        assert_eq!(parse(b"m7ffe0010,40"), Request::ReadMemory(0x7ffe_0010, 0x40));
        assert_eq!(parse(b"M1000,2:abcd"), Request::WriteMemory(0x1000, vec![0xab, 0xcd]));
        assert_eq!(parse(b"M1000,3:abcd"), Request::Unknown("M1000,3:abcd".into()));
        assert_eq!(parse(b"Z0,401136,1"), Request::Breakpoint(true, 0x401136));
        assert_eq!(parse(b"z1,401136,1"), Request::Breakpoint(false, 0x401136));
        assert_eq!(parse(b"Z2,4c6f30,4"), Request::Watchpoint(true, 2, 0x4c6f30, 4));
        assert_eq!(parse(b"P10=3412000000000000"), Request::WriteRegister(16, vec![0x34, 0x12, 0, 0, 0, 0, 0, 0]));
        assert_eq!(parse(b"qRcmd,74696d65"), Request::Monitor("time".into()));
        assert_eq!(parse(b"vCont;s:1;c"), Request::Step);
        assert_eq!(parse(b"bc"), Request::ReverseContinue);
        assert_eq!(parse(b"Hg1f"), Request::SelectThread(Some(0x1f)));
        assert_eq!(parse(b"Hg0"), Request::SelectThread(None));
        assert_eq!(parse(b"Hc-1"), Request::SetThread);
        assert_eq!(parse(b"qXfer:exec-file:read::0,ffb"), Request::ExecFile(0, 0xffb));
        assert_eq!(parse(b"qXfer:exec-file:read:2a:10,20"), Request::ExecFile(0x10, 0x20));
        assert_eq!(parse(b"qXfer:auxv:read::0,1000"), Request::Auxv(0, 0x1000));
        assert_eq!(parse(b"qSupported:multiprocess+;swbreak+"), Request::Supported);
        assert_eq!(parse(b"mzz,1"), Request::Unknown("mzz,1".into()));
        assert_eq!(parse(b"vMustReplyEmpty"), Request::Unknown("vMustReplyEmpty".into()));
        assert_eq!(unhex("0g"), None);
        assert_eq!(hex(&[0, 0xff]), "00ff");
    }
}
