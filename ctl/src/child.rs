//! The command `picketctl lock` runs under a lock: in its own process group, started only once
//! the lock is held, and stopped as a group (SIGTERM, a grace period, SIGKILL), so that nothing
//! it started goes on writing after the lock is gone.
//!
//! The command is spawned before the lock is asked for, so that the session's identity records
//! its pid: `sh` stops itself (SIGSTOP) first thing, and once continued reads the lock's
//! environment (`PICKET_TOKEN`, ...) from a file picketctl wrote, then `exec`s the command (same
//! pid). If picketctl dies while it is stopped, its group is orphaned with a stopped member and
//! the kernel sends it SIGHUP (then SIGCONT): the command never starts.

use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::time::Instant;

use super::CtlError;

/// Stops itself, then reads the environment file (`$0`) and becomes the command (`"$@"`).
const WRAPPER: &str = r#"kill -STOP $$ || exit 125; . "$0" || exit 125; exec "$@""#;

/// How long the wrapper may take to stop itself after it was spawned.
const STOP_WAIT_MAX: Duration = Duration::from_secs(10);

/// How often the group is looked at while it is given time to exit.
const POLL: Duration = Duration::from_millis(20);

/// The command's process group, led by the command.
pub struct Group {
    child: Child,
    pgid: Pid,
    /// The environment file; removed with its directory when the group is dropped.
    env_path: PathBuf,
    _dir: tempfile::TempDir,
    /// The command's exit status, once reaped.
    status: Option<ExitStatus>,
}

impl Group {
    /// Spawns `program args` stopped, in a new process group. Fails if `sh` cannot be started.
    pub fn spawn(program: &str, args: &[String]) -> Result<Group, CtlError> {
        let dir = tempfile::Builder::new()
            .prefix("picketctl-lock-")
            .tempdir()
            .map_err(|e| CtlError::Io(format!("cannot make a temporary directory: {e}")))?;
        let env_path = dir.path().join("env");
        let child = Command::new("sh")
            .arg("-c")
            .arg(WRAPPER)
            .arg(&env_path)
            .arg(program)
            .args(args)
            .stdin(Stdio::inherit())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| CtlError::Io(format!("cannot run `{program}` (through sh): {e}")))?;
        let pid = child
            .id()
            .ok_or_else(|| CtlError::Io(format!("`{program}` exited at once")))?;
        let pgid = Pid::from_raw(i32::try_from(pid).expect("pids fit in i32"));
        Ok(Group {
            child,
            pgid,
            env_path,
            _dir: dir,
            status: None,
        })
    }

    /// The command's pid (also its process group id).
    pub fn pid(&self) -> u32 {
        u32::try_from(self.pgid.as_raw()).expect("pids are positive")
    }

    /// Lets the command start with `env` in its environment: writes the file, waits until the
    /// wrapper has stopped itself, and continues it.
    pub async fn start(&mut self, env: &[(&str, String)]) -> Result<(), CtlError> {
        let mut text = String::new();
        for (name, value) in env {
            text.push_str(&format!("export {name}={}\n", shell_quote(value)));
        }
        std::fs::write(&self.env_path, text)
            .map_err(|e| CtlError::Io(format!("cannot write the command's environment: {e}")))?;
        let deadline = Instant::now() + STOP_WAIT_MAX;
        while !self.is_stopped() {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.status = Some(status);
                return Err(CtlError::Io(format!(
                    "the command's shell exited before it started ({status})"
                )));
            }
            if Instant::now() >= deadline {
                return Err(CtlError::Io(
                    "the command's shell did not get ready within 10 s".into(),
                ));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        killpg(self.pgid, Signal::SIGCONT)
            .map_err(|e| CtlError::Io(format!("cannot start the command: {e}")))
    }

    /// Linux: the wrapper's state in `/proc/<pid>/stat` is `T` (stopped).
    fn is_stopped(&self) -> bool {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())) else {
            return false;
        };
        // `pid (comm) state ...`: comm may hold spaces and parentheses; the state follows the
        // last `)`.
        stat.rfind(')')
            .and_then(|end| stat[end + 1..].split_whitespace().next())
            == Some("T")
    }

    /// Waits for the command (the group leader) to exit by itself.
    pub async fn wait(&mut self) -> Result<ExitStatus, CtlError> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let status = self
            .child
            .wait()
            .await
            .map_err(|e| CtlError::Io(format!("waiting for the command: {e}")))?;
        self.status = Some(status);
        Ok(status)
    }

    /// Whether any process is left in the group (the leader reaped or not).
    fn group_alive(&self) -> bool {
        !matches!(killpg(self.pgid, None), Err(Errno::ESRCH))
    }

    /// Stops the whole group: SIGTERM (and SIGCONT, so a stopped member acts on it), up to
    /// `grace` for every member to exit, then SIGKILL. Answers the command's exit status if it
    /// was reaped.
    pub async fn terminate(&mut self, grace: Duration) -> Option<ExitStatus> {
        if self.status.is_some() && !self.group_alive() {
            return self.status;
        }
        let _ = killpg(self.pgid, Signal::SIGTERM);
        let _ = killpg(self.pgid, Signal::SIGCONT);
        let deadline = Instant::now() + grace;
        loop {
            if self.status.is_none() {
                if let Ok(Some(status)) = self.child.try_wait() {
                    self.status = Some(status);
                }
            }
            if self.status.is_some() && !self.group_alive() {
                return self.status;
            }
            if Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(POLL).await;
        }
        let _ = killpg(self.pgid, Signal::SIGKILL);
        if self.status.is_none() {
            self.status = self.child.wait().await.ok();
        }
        self.status
    }

    /// Kills a command that never started (the lock was not obtained): SIGKILL to the group.
    pub async fn abandon(&mut self) {
        let _ = killpg(self.pgid, Signal::SIGKILL);
        if self.status.is_none() {
            self.status = self.child.wait().await.ok();
        }
    }
}

/// `value` in single quotes for `sh` (a `'` becomes `'\''`).
pub fn shell_quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_keeps_every_byte() {
        assert_eq!(shell_quote("orders"), "'orders'");
        assert_eq!(shell_quote("it's $HOME"), r"'it'\''s $HOME'");
    }

    /// Issue 16, finding 4: on lock loss only the direct child was killed; `sh -c 'sleep ...'`
    /// left `sleep` running.
    #[tokio::test]
    async fn the_command_starts_only_when_told_and_its_whole_group_is_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let script = format!(
            "echo \"$PICKET_TOKEN $$\" > {0}.tmp; mv {0}.tmp {0}; sleep 601 & echo $! > {0}.sleep; wait",
            out.display()
        );
        let mut group = Group::spawn("sh", &["-c".into(), script]).unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!out.exists(), "nothing runs before start");
        group.start(&[("PICKET_TOKEN", "42".into())]).await.unwrap();
        let sleep_file = out.with_extension("sleep");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !(out.exists() && sleep_file.exists()) {
            assert!(Instant::now() < deadline, "the command ran");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let said = std::fs::read_to_string(&out).unwrap();
        assert_eq!(
            said.trim(),
            format!("42 {}", group.pid()),
            "same pid after exec"
        );
        let sleep_pid: i32 = loop {
            if let Ok(text) = std::fs::read_to_string(&sleep_file) {
                if let Ok(pid) = text.trim().parse() {
                    break pid;
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let status = group.terminate(Duration::from_secs(2)).await;
        assert!(status.is_some_and(|s| !s.success()), "{status:?}");
        let sleep = Pid::from_raw(sleep_pid);
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::fs::read_to_string(format!("/proc/{sleep}/stat"))
            .is_ok_and(|stat| !stat.contains(") Z"))
        {
            assert!(
                Instant::now() < deadline,
                "sleep {sleep} survived its group"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
