//! Real Prometheus and Alertmanager for the tests (Debian's `prometheus` and
//! `prometheus-alertmanager`; scripts/test installs them): on 127.0.0.1, their data in the test's
//! temporary directory, 1 s scrape and evaluation intervals and the shipped rules
//! (`deploy/prometheus/picket-alerts.yml`) with every `for:` shortened to 2 s. Every process is
//! stopped by PID when dropped ([`Process`]). Stands alone (no `super::`), so that a test with
//! `tests/support` loads it by path.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use picket_server::dev::free_port;

/// Bound on one step (a scrape, an evaluation, `for:`, Alertmanager's group wait, a delivery).
pub const STEP: Duration = Duration::from_secs(30);

/// A child process killed (by PID) and reaped when dropped.
pub struct Process {
    pub name: &'static str,
    log: PathBuf,
    child: Child,
}

impl Process {
    pub fn spawn(name: &'static str, dir: &Path, command: &mut Command) -> Process {
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(file))
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start {name} ({e}): scripts/test installs Debian's prometheus and prometheus-alertmanager")
            });
        Process { name, log, child }
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(30)..].join("\n");
        format!("--- {} (last lines) ---\n{tail}\n", self.name)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The shipped rules with every `for:` shortened to 2 s (and nothing else changed).
pub fn test_rules() -> String {
    let shipped = include_str!("../../../deploy/prometheus/picket-alerts.yml");
    let mut rules = String::new();
    let mut shortened = 0;
    for line in shipped.lines() {
        if let Some(indent) = line.strip_suffix(line.trim_start()) {
            if line.trim_start().starts_with("for: ") {
                rules.push_str(&format!("{indent}for: 2s\n"));
                shortened += 1;
                continue;
            }
        }
        rules.push_str(line);
        rules.push('\n');
    }
    // The three rules the alerting test pages with, at least (other groups may add more).
    assert!(
        shortened >= 3,
        "the shipped rules have {shortened} for: lines"
    );
    rules
}

pub fn host_port(url: &str) -> &str {
    url.strip_prefix("http://").unwrap()
}

/// Prometheus scraping the HTTP bases `http` (`http://host:port`) in job `picket` with the test
/// rules, alerting `alertmanager` (`host:port`); answers it and its URL.
pub fn start_prometheus(dir: &Path, http: &[String], alertmanager: &str) -> (Process, String) {
    let rules = dir.join("picket-alerts.yml");
    std::fs::write(&rules, test_rules()).unwrap();
    let targets: Vec<String> = http.iter().map(|h| format!("{:?}", host_port(h))).collect();
    let config = format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n  evaluation_interval: 1s\n\
         rule_files: [{rules:?}]\n\
         alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: [{alertmanager:?}]\n\
         scrape_configs:\n  - job_name: picket\n    static_configs:\n      - targets: [{}]\n",
        targets.join(", ")
    );
    let path = dir.join("prometheus.yml");
    std::fs::write(&path, config).unwrap();
    let address = format!("127.0.0.1:{}", free_port().unwrap());
    let process = Process::spawn(
        "prometheus",
        dir,
        Command::new("prometheus")
            .arg(format!("--config.file={}", path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("prometheus-data").display()
            ))
            .arg(format!("--web.listen-address={address}"))
            // Firing alerts are re-sent every second (default: a minute).
            .arg("--rules.alert.resend-delay=1s"),
    );
    (process, format!("http://{address}"))
}

/// A lone Alertmanager posting to `webhook` (with resolved notifications), or to nobody;
/// answers it and its `host:port`.
pub fn start_alertmanager(dir: &Path, webhook: Option<&str>) -> (Process, String) {
    let receiver = match webhook {
        Some(url) => format!(
            "  - name: test\n    webhook_configs:\n      - url: {url:?}\n        send_resolved: true\n"
        ),
        None => "  - name: test\n".to_owned(),
    };
    let config = format!(
        "route:\n  receiver: test\n  group_by: [alertname, namespace]\n  group_wait: 1s\n\
         \x20 group_interval: 1s\n  repeat_interval: 1h\n\
         receivers:\n{receiver}"
    );
    let path = dir.join("alertmanager.yml");
    std::fs::write(&path, config).unwrap();
    let address = format!("127.0.0.1:{}", free_port().unwrap());
    let process = Process::spawn(
        "alertmanager",
        dir,
        Command::new("prometheus-alertmanager")
            .arg(format!("--config.file={}", path.display()))
            .arg(format!(
                "--storage.path={}",
                dir.join("alertmanager-data").display()
            ))
            .arg(format!("--web.listen-address={address}"))
            // No gossip: a lone Alertmanager.
            .arg("--cluster.listen-address="),
    );
    (process, address)
}

/// Waits (at most [`STEP`]) until `url/-/ready` answers 200.
pub async fn wait_ready(process: &Process, url: &str) {
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        let ready = reqwest::get(format!("{url}/-/ready")).await;
        if ready.is_ok_and(|r| r.status() == 200) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} not ready at {url}:\n{}",
            process.name,
            process.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
