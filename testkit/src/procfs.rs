//! What the benches and the memory test read of a process and of the machine from Linux's
//! `/proc`: resident memory, CPU time, and the machine's busy time. `None` where `/proc` does not
//! say (another OS, a process that is gone).

use std::process::Command;
use std::sync::OnceLock;

/// A `/proc/<pid>/status` field in KiB (`VmRSS`, `VmHWM`).
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|line| {
        line.strip_prefix(field)?
            .strip_prefix(':')?
            .trim()
            .strip_suffix("kB")?
            .trim()
            .parse()
            .ok()
    })
}

/// utime + stime of a process (and cutime + cstime, its reaped children, with `children`), in
/// clock ticks.
pub fn cpu_ticks(pid: u32, children: bool) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after `(comm)`, which may hold spaces and parentheses: utime is field 14
    // overall, stime 15, cutime 16, cstime 17.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let which: &[usize] = if children {
        &[11, 12, 13, 14]
    } else {
        &[11, 12]
    };
    which
        .iter()
        .map(|i| fields.get(*i)?.parse::<u64>().ok())
        .sum()
}

/// [`cpu_ticks`] in seconds.
pub fn cpu_seconds(pid: u32, children: bool) -> Option<f64> {
    Some(cpu_ticks(pid, children)? as f64 / clock_ticks())
}

/// CPU seconds the whole machine spent busy (all cores), from `/proc/stat`.
pub fn machine_busy_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = cpu
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal: busy = all but idle and iowait.
    let busy = v.first()? + v.get(1)? + v.get(2)? + v.get(5)? + v.get(6)? + v.get(7)?;
    Some(busy as f64 / clock_ticks())
}

/// Clock ticks per second (`getconf CLK_TCK`, asked once; 100 if it cannot be asked).
pub fn clock_ticks() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}
