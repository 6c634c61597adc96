//! What the benches read of a process from `/proc` (Linux): its children and its memory.

/// Fields of /proc/<pid>/stat after the command name: state [0], ppid [1].
pub fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 2..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// Every live process: (pid, command name, ppid).
pub fn processes() -> Vec<(u32, String, u32)> {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .filter_map(|pid| {
                    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
                    let f = stat_fields(pid)?;
                    (f.first()? != "Z").then_some(())?;
                    Some((pid, comm.trim().to_string(), f.get(1)?.parse().ok()?))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The live children of `pid`.
pub fn children_of(pid: u32) -> Vec<u32> {
    processes()
        .into_iter()
        .filter(|(_, _, ppid)| *ppid == pid)
        .map(|(child, _, _)| child)
        .collect()
}

/// A `/proc/<pid>/status` memory line in KiB: `VmRSS` (resident now) or `VmHWM` (the peak
/// resident set since the process started).
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}
