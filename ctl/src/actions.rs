//! The subcommands of `picketctl snapshot`, `cluster`, `semaphore`, `classes` and
//! `force-release`, and the answers their flags take.

use std::path::PathBuf;

use clap::{Subcommand, ValueEnum};

#[derive(Debug, Subcommand)]
pub enum SnapshotAction {
    /// Stream a consistent snapshot from the leader and write it to FILE: checked whole, then
    /// written atomically (a temp file beside FILE, fsync, rename; mode 0600: it holds
    /// session-secret hashes and the audit trail). An existing FILE is replaced only by a
    /// complete backup.
    ///
    /// Exit status: 0 saved, 1 refused (the rule is printed: missing_role, not_leader...) or
    /// the file could not be written, 6 unreachable.
    Save { file: PathBuf },
    /// Verify FILE offline (format version, length, SHA-256, decoding) and print its header:
    /// cluster id, revision, time, members, format version. Needs no cluster.
    ///
    /// Exit status: 0 the file is a good backup, 2 it is not (the rule is printed:
    /// backup_empty, backup_truncated, backup_checksum, backup_format_version, ...).
    Status { file: PathBuf },
}

#[derive(Debug, Subcommand)]
pub enum ClusterAction {
    /// The members (node id, client endpoint, voter or learner) of the newest membership the
    /// first replica that answers knows, and the leader it follows.
    Members,
    /// Asks every member, at the client endpoint the cluster lists for it, for its own status:
    /// role, the leader it follows, applied slot and how far it is behind the most advanced
    /// member, whether it serves, and its storage condition (clean, torn_tail_cut,
    /// durable_state_lost; a damaged directory left behind). Like `etcdctl endpoint status
    /// --cluster`. A member that does not answer within --timeout-ms is listed with the error.
    ///
    /// Exit status: 0 every member answered and serves, 1 some member did not answer or does
    /// not serve (the table says which and why), 6 no replica answered.
    Status,
    /// Add NODE_ID as a learner: it receives the log and votes on nothing until promoted.
    /// Start its picketd with `join = true` (docs/runbooks/replace-machine.md). Answered once
    /// the log chose the change.
    ///
    /// Exit status: 0 done, 1 refused (the rule is printed: already_member,
    /// membership_change_in_progress, missing_role, not_leader...), 2 bad arguments,
    /// 6 unreachable.
    Add {
        node_id: u64,
        /// Its replica-to-replica host:port.
        #[arg(long)]
        peer_address: String,
        /// Its gRPC host:port for clients.
        #[arg(long)]
        client_address: String,
        /// Its HTTP host:port (metrics, health, console), if it has one.
        #[arg(long, default_value = "")]
        http_address: String,
        /// Why (required; goes to the audit log).
        #[arg(long)]
        reason: String,
        #[command(flatten)]
        wait: WaitInEffect,
    },
    /// Promote learner NODE_ID to voter. Refused while it is more than 64 slots behind the
    /// leader or has not answered it (rule learner_not_caught_up) unless --force.
    ///
    /// Exit status as `add`.
    Promote {
        node_id: u64,
        #[arg(long)]
        reason: String,
        /// Promote even a learner that is behind or silent (a voter that cannot vote weakens
        /// the quorum).
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        wait: WaitInEffect,
    },
    /// Remove member NODE_ID (voter or learner, the leader included: it steps down once the
    /// change is in effect). Refused when fewer of the remaining voters than their quorum
    /// answered the leader lately (rule quorum_unreachable) unless --force. Stop the removed
    /// replica's picketd afterwards.
    ///
    /// Exit status as `add`.
    Remove {
        node_id: u64,
        #[arg(long)]
        reason: String,
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        wait: WaitInEffect,
    },
}

/// `--wait` of `cluster add | promote | remove`.
#[derive(Clone, Copy, Debug, clap::Args)]
pub struct WaitInEffect {
    /// Answer once the change is in effect on every member of the new membership (each one
    /// applied the slot it governs from, as its own status reports), not only once the log
    /// chose it: after `remove --wait`, the old replica may be stopped
    /// (docs/runbooks/replace-machine.md, step 5). A member that does not answer is waited
    /// for. Exit status 4 when --wait-timeout passes first (the change stays chosen).
    #[arg(long)]
    pub wait: bool,
    /// How long --wait waits (e.g. 30s, 2m; 1ms to one day).
    #[arg(long, value_parser = crate::parse_duration, default_value = "60s", requires = "wait")]
    pub wait_timeout: std::time::Duration,
}

#[derive(Debug, Subcommand)]
pub enum SemaphoreAction {
    /// Declare NS/KEY a semaphore with --permits N (1..=1024), change its N, or remove the
    /// declaration with --permits 0 (only when nobody holds or waits). Lowering N takes no
    /// permit away: no permit is granted until fewer than N hold. Audited with --reason.
    ///
    /// Exit status: 0 done, 1 refused by the cluster (the rule is printed, e.g.
    /// key_held_as_lock, semaphore_in_use, missing_role), 2 bad arguments, 6 unreachable.
    Set {
        namespace: String,
        key: String,
        /// N: 1..=1024, or 0 to remove the declaration.
        #[arg(long)]
        permits: u32,
        /// Why (required; recorded in the audit trail).
        #[arg(long)]
        reason: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum ClassesAction {
    /// Create or replace the class of a key prefix ("" is the namespace default).
    Put {
        namespace: String,
        /// Class name, [a-z0-9][a-z0-9-]{0,62}.
        #[arg(long)]
        name: String,
        #[arg(long, default_value = "")]
        prefix: String,
        /// A correctness lock: the resource checks tokens.
        #[arg(long)]
        fenced: bool,
        #[arg(long, default_value_t = 10_000)]
        ttl_ms_default: u64,
        #[arg(long, default_value_t = 60_000)]
        ttl_ms_max: u64,
        /// Alert when a hold lasts longer (0: never).
        #[arg(long, default_value_t = 0)]
        hold_ms_max_expected: u64,
        #[arg(long, default_value = "")]
        owner: String,
        #[arg(long, default_value = "")]
        runbook_url: String,
        #[arg(long, default_value = "")]
        description: String,
    },
    /// Remove the class of a key prefix.
    Remove {
        namespace: String,
        #[arg(long, default_value = "")]
        prefix: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum ForceRelease {
    /// Step one: ask for a force-release. Shows the holder, token, age, queue and whether the
    /// class is fenced.
    Request {
        namespace: String,
        key: String,
        /// The token you saw in `inspect` (the release fails if the key changed hands).
        #[arg(long)]
        token: u64,
        /// The holder's session id, as `inspect` showed it: required for a shared key whose
        /// holders share the token (granted together); optional otherwise (checked if given).
        #[arg(long)]
        session: Option<u64>,
        /// Why (recorded in the audit trail).
        #[arg(long)]
        reason: String,
        /// Also revoke the holder's session (its client fences itself when it learns it: pushed on its session stream, else at its next keepalive).
        #[arg(long)]
        revoke_session: bool,
        /// Checklist: has the holder's process stopped? Required for an advisory class
        /// (nothing refuses its old holder); recorded for a fenced one.
        #[arg(long, value_enum, value_name = "yes|no|unknown")]
        holder_stopped: Option<Answer>,
        /// Checklist: would it be acceptable if the old holder and the next one both ran?
        /// Required for an advisory class. With anything but `yes` while the holder is not
        /// known to have stopped, the request needs --statement, and only an incident commander
        /// may approve it (docs/locks.md, "The advisory rule").
        #[arg(long, value_enum, value_name = "yes|no|unknown")]
        double_run_acceptable: Option<Answer>,
        /// Why the release is still right although a double run is unsafe (recorded in the
        /// audit trail and shown to the approver first).
        #[arg(long, default_value = "")]
        statement: String,
    },
    /// Step two, by a different person: approve a pending request. Shows the class's fenced
    /// flag and safety statement and requires acknowledging the class kind: `--ack fenced` or
    /// `--ack advisory`, matching it, or (without `--ack`, at a terminal) typing the kind when
    /// asked. Without `--ack` and without a terminal it refuses.
    Approve {
        id: u64,
        /// What you acknowledge the class to be: `fenced` (the resource refuses the old
        /// holder's tokens) or `advisory` (releasing may let two writers in). Must match the
        /// request; nothing is sent otherwise. Absent: asked interactively when stdin is a
        /// terminal, refused otherwise.
        #[arg(long, value_enum)]
        ack: Option<Ack>,
    },
    /// Deny (withdraw) a pending request.
    Deny {
        id: u64,
        #[arg(long)]
        reason: String,
    },
    /// List pending requests.
    List,
}

/// A checklist answer (`--holder-stopped`, `--double-run-acceptable`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Answer {
    Yes,
    No,
    Unknown,
}

impl Answer {
    pub fn to_wire(self) -> i32 {
        (match self {
            Answer::Yes => picket_proto::proto::ChecklistAnswer::Yes,
            Answer::No => picket_proto::proto::ChecklistAnswer::No,
            Answer::Unknown => picket_proto::proto::ChecklistAnswer::Unknown,
        }) as i32
    }
}

/// The fenced flag an approver acknowledges having seen (`--ack fenced|advisory`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Ack {
    Fenced,
    Advisory,
}

impl Ack {
    pub fn from_fenced(fenced: bool) -> Ack {
        if fenced {
            Ack::Fenced
        } else {
            Ack::Advisory
        }
    }

    pub fn word(self) -> &'static str {
        match self {
            Ack::Fenced => "fenced",
            Ack::Advisory => "advisory",
        }
    }
}
