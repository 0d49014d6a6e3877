//! CPU time and context switches of processes, read from `/proc`, so that `scripts/bench` can
//! put CPU microseconds and wake-ups per operation next to each figure.
//!
//! A process's CPU time is `utime + stime` of `/proc/<pid>/stat` (all its threads, in
//! USER_HZ = 100 ticks). Its context switches are the sum over its live threads
//! (`/proc/<pid>/task/*/status`) of `voluntary_ctxt_switches` (the thread blocked: each one is a
//! later wake-up) and `nonvoluntary_ctxt_switches` (it was preempted). Threads that exited in
//! between are not counted (picketd's and the client's runtime threads live for the whole run).

/// What a process (or a sum of processes) has used so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub cpu_ticks: u64,
    pub voluntary: u64,
    pub involuntary: u64,
}

/// USER_HZ on Linux.
const TICKS_PER_S: f64 = 100.0;

impl Usage {
    /// The usage of `pid` ("self" for this process); zero when it cannot be read.
    pub fn of(pid: &str) -> Usage {
        let mut usage = Usage {
            cpu_ticks: cpu_ticks(pid).unwrap_or(0),
            ..Usage::default()
        };
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return usage;
        };
        for task in tasks.flatten() {
            let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
            usage.voluntary += field(&status, "voluntary_ctxt_switches:");
            usage.involuntary += field(&status, "nonvoluntary_ctxt_switches:");
        }
        usage
    }

    /// The sum of the usage of `pids`.
    pub fn of_all(pids: &[u32]) -> Usage {
        pids.iter()
            .map(|pid| Usage::of(&pid.to_string()))
            .fold(Usage::default(), |a, b| a.plus(b))
    }

    fn plus(self, other: Usage) -> Usage {
        Usage {
            cpu_ticks: self.cpu_ticks + other.cpu_ticks,
            voluntary: self.voluntary + other.voluntary,
            involuntary: self.involuntary + other.involuntary,
        }
    }

    /// What was used from `earlier` to `self`.
    pub fn since(self, earlier: Usage) -> Usage {
        Usage {
            cpu_ticks: self.cpu_ticks.saturating_sub(earlier.cpu_ticks),
            voluntary: self.voluntary.saturating_sub(earlier.voluntary),
            involuntary: self.involuntary.saturating_sub(earlier.involuntary),
        }
    }

    /// CPU microseconds per operation.
    pub fn cpu_us_per(self, ops: usize) -> f64 {
        self.cpu_ticks as f64 / TICKS_PER_S * 1e6 / ops.max(1) as f64
    }

    /// Context switches (voluntary + involuntary) per operation.
    pub fn switches_per(self, ops: usize) -> f64 {
        (self.voluntary + self.involuntary) as f64 / ops.max(1) as f64
    }
}

/// `utime + stime` of `/proc/<pid>/stat` (fields 14 and 15; the command name may hold spaces,
/// so fields are counted after its closing parenthesis).
fn cpu_ticks(pid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat[stat.rfind(')')? + 2..].split_whitespace().collect();
    let user: u64 = fields.get(11)?.parse().ok()?;
    let system: u64 = fields.get(12)?.parse().ok()?;
    Some(user + system)
}

/// The number after `name` in a `/proc/*/status` text, or 0.
fn field(status: &str, name: &str) -> u64 {
    status
        .lines()
        .find_map(|line| line.strip_prefix(name))
        .and_then(|rest| rest.trim().parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_used_cpu_and_switched() {
        let before = Usage::of("self");
        // Burn CPU until the kernel has counted some, within a generous bound.
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while Usage::of("self").cpu_ticks < before.cpu_ticks + 2 {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(20),
                "no CPU counted"
            );
            for _ in 0..100_000 {
                x = x.wrapping_mul(31).wrapping_add(7);
            }
        }
        // Block a few times: each is a voluntary switch of this thread.
        for _ in 0..5 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let used = Usage::of("self").since(before);
        assert!(x != 1, "keeps the loop");
        assert!(used.cpu_ticks >= 2, "{used:?}");
        assert!(used.voluntary >= 5, "{used:?}");
    }

    #[test]
    fn status_fields_are_read_by_name() {
        let status = "Name:\tx\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t3\n";
        assert_eq!(field(status, "voluntary_ctxt_switches:"), 12);
        assert_eq!(field(status, "nonvoluntary_ctxt_switches:"), 3);
        assert_eq!(field(status, "missing:"), 0);
    }

    #[test]
    fn per_operation_figures_divide_by_the_count() {
        let used = Usage {
            cpu_ticks: 100,
            voluntary: 30,
            involuntary: 10,
        };
        assert!((used.cpu_us_per(1000) - 1000.0).abs() < 1e-9);
        assert!((used.switches_per(10) - 4.0).abs() < 1e-9);
    }
}
