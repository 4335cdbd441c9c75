//! What the metrics read at scrape time rather than count about this process: its resources.
//! (The store's depth and age figures are the store's own: [`StoreGauges`](crate::store::StoreGauges).)

/// This process's resources (Linux; zeros elsewhere).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcessStats {
    /// Resident memory, bytes.
    pub resident_bytes: u64,
    /// Virtual memory, bytes.
    pub virtual_bytes: u64,
    /// CPU time (user + system), seconds.
    pub cpu_seconds: f64,
    /// Open file descriptors.
    pub open_fds: u64,
}

impl ProcessStats {
    /// Reads `/proc/self`. Blocking (small file reads): call it off the async runtime.
    pub fn read() -> ProcessStats {
        let mut out = ProcessStats::default();
        if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
            let kb = |key: &str| {
                status
                    .lines()
                    .find(|l| l.starts_with(key))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|v| v.parse::<u64>().ok())
                    .map_or(0, |v| v * 1024)
            };
            out.resident_bytes = kb("VmRSS:");
            out.virtual_bytes = kb("VmSize:");
        }
        if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
            out.cpu_seconds = cpu_seconds(&stat, clock_ticks());
        }
        if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
            out.open_fds = dir.count() as u64;
        }
        out
    }
}

/// Clock ticks per second of `/proc/self/stat` times: 100 on every Linux platform Rust
/// supports (`USER_HZ`).
fn clock_ticks() -> f64 {
    100.0
}

/// User + system CPU seconds from a `/proc/self/stat` line. The command name (field 2) may
/// hold spaces and parentheses, so fields are counted after its closing parenthesis.
fn cpu_seconds(stat: &str, ticks: f64) -> f64 {
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return 0.0;
    };
    // After the name: state is field 3, so utime (14) and stime (15) are the 12th and 13th.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let get = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (get(11) + get(12)) / ticks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_is_read_after_the_command_name() {
        let stat = "42 (a (weird) name) S 1 42 42 0 -1 4194560 100 0 0 0 250 150 0 0 20 0 1 0";
        assert!((cpu_seconds(stat, 100.0) - 4.0).abs() < 1e-9);
        assert_eq!(cpu_seconds("garbage", 100.0), 0.0);
    }

    #[test]
    fn this_process_is_read_on_linux() {
        let p = ProcessStats::read();
        if cfg!(target_os = "linux") {
            assert!(p.resident_bytes > 0 && p.open_fds > 0, "{p:?}");
        }
    }
}
