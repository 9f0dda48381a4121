//! What a benchmark reads about a process from Linux's `/proc`: its CPU
//! time and its memory, so figures are per process (a coordinator, a
//! proxy, a Redis), not the benchmark's own.

use std::path::Path;
use std::time::Duration;

/// `/proc` counts CPU in USER_HZ ticks, 100 a second on Linux.
const TICK: Duration = Duration::from_millis(10);

/// The CPU time (user + system) of process `pid` so far; zero when it is
/// gone.
pub fn cpu_time(pid: u32) -> Duration {
    stat_cpu(Path::new(&format!("/proc/{pid}/stat")))
}

/// The CPU time (user + system) a `stat` file (a process's, or one of its
/// threads' under `task/`) gives; zero when it cannot be read.
pub fn stat_cpu(stat: &Path) -> Duration {
    let stat = std::fs::read_to_string(stat).unwrap_or_default();
    // utime and stime are fields 14 and 15 of the line, counted after the
    // command name (in parentheses, which may hold spaces).
    let ticks: u64 = stat
        .rfind(')')
        .map_or(0, |i| stat[i + 2..].split(' ').skip(11).take(2).filter_map(|t| t.parse::<u64>().ok()).sum());
    TICK * u32::try_from(ticks).unwrap_or(u32::MAX)
}

/// The CPU time of the threads of process `pid` whose name (`comm`, 15
/// characters at most) starts with one of `prefixes`.
pub fn threads_cpu_time(pid: u32, prefixes: &[&str]) -> Duration {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Duration::ZERO };
    tasks
        .filter_map(Result::ok)
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| prefixes.iter().any(|p| c.starts_with(p)))
        })
        .map(|t| stat_cpu(&t.path().join("stat")))
        .sum()
}

/// A `/proc/PID/status` field in KiB (`VmRSS`, `VmHWM`...); zero when it
/// cannot be read.
pub fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This process has used some CPU and holds some memory; a process id
    /// that is not running reads as zero.
    #[test]
    fn this_process_has_cpu_and_memory() {
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(50) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        assert!(x > 0);
        assert!(cpu_time(std::process::id()) > Duration::ZERO);
        assert!(status_kib(std::process::id(), "VmRSS") > 0);
        assert!(status_kib(std::process::id(), "VmHWM") >= status_kib(std::process::id(), "VmRSS") / 2);
        assert_eq!(cpu_time(u32::MAX), Duration::ZERO);
        assert_eq!(status_kib(u32::MAX, "VmRSS"), 0);
    }
}
