//! `picketctl snapshot save | status`: backup files (docs/storage.md, "Backup files";
//! docs/runbooks/restore-from-backup.md).

use std::fmt::Write as _;
use std::path::Path;

use picket_client::Client;
use picket_proto::backup::{decode_backup, read_backup_file, write_file_atomically, Backup};
use serde_json::json;

use super::render::{utc, Report};
use super::CtlError;

/// Largest backup picketctl assembles in memory (far above the state's bounds).
const BACKUP_BYTES_MAX: u64 = 4 << 30;

/// Streams a backup from the leader, checks it whole, then writes it to `file` atomically.
pub async fn save(client: &Client, file: &Path) -> Result<Report, CtlError> {
    let mut stream = client.save_snapshot().await?;
    let mut bytes: Vec<u8> = Vec::new();
    let mut total = None;
    while let Some(chunk) = stream
        .message()
        .await
        .map_err(|status| CtlError::Io(format!("the backup stream broke: {}", status.message())))?
    {
        if chunk.offset != bytes.len() as u64 || chunk.total_bytes > BACKUP_BYTES_MAX {
            return Err(CtlError::Io(format!(
                "the backup stream sent a chunk at {} of {} bytes after {} bytes: nothing was written",
                chunk.offset,
                chunk.total_bytes,
                bytes.len()
            )));
        }
        total.get_or_insert(chunk.total_bytes);
        bytes.extend_from_slice(&chunk.data);
    }
    if total != Some(bytes.len() as u64) {
        return Err(CtlError::Io(format!(
            "the backup stream ended after {} of {:?} bytes: nothing was written",
            bytes.len(),
            total
        )));
    }
    // Checked before anything is written: a file on disk is always one `status` accepts.
    let backup = decode_backup(&bytes).map_err(|e| {
        CtlError::Io(format!(
            "the leader sent a bad backup ({e}): nothing was written"
        ))
    })?;
    write_file_atomically(file, &bytes).map_err(CtlError::Io)?;
    Ok(report("saved", file, &backup, bytes.len()))
}

/// Reads and checks `file` offline; prints its header.
pub fn status(file: &Path) -> Result<Report, CtlError> {
    let backup = read_backup_file(file).map_err(CtlError::Refused)?;
    let len = std::fs::metadata(file).map_or(0, |m| m.len() as usize);
    Ok(report("verified", file, &backup, len))
}

fn report(verb: &str, file: &Path, backup: &Backup, len: usize) -> Report {
    let h = &backup.header;
    let mut human = format!(
        "{verb} {} ({len} bytes, format version {})\n",
        file.display(),
        backup.version
    );
    let _ = writeln!(human, "  cluster     {}", h.cluster_id);
    let _ = writeln!(
        human,
        "  revision    {} (every token of the cluster up to this backup is at or below it)",
        h.revision
    );
    let _ = writeln!(
        human,
        "  taken       {} by node {} (slot {} applied)",
        utc(h.taken_at_unix_ms),
        h.taken_by_node_id,
        h.slot_applied
    );
    let _ = writeln!(human, "  log time    {}", utc(h.time_ms));
    let members: Vec<String> = h
        .members
        .iter()
        .map(|m| {
            format!(
                "{}{} {}",
                m.node_id,
                if m.voter { "" } else { " (learner)" },
                m.client_endpoint
            )
        })
        .collect();
    let _ = writeln!(human, "  members     {}", members.join(", "));
    let s = &backup.state;
    let _ = writeln!(
        human,
        "  state       {} sessions, {} held keys, {} classes, {} semaphores, {} pending force-releases, {} audit records",
        s.sessions.len(),
        s.locks.len(),
        s.classes.len(),
        s.semaphores.len(),
        s.force_releases.len(),
        s.audit.len()
    );
    let _ = writeln!(human, "  sha256      {}", backup.checksum_hex);
    let json = json!({
        "file": file.display().to_string(),
        "bytes": len,
        "format_version": backup.version,
        "cluster_id": h.cluster_id,
        "revision": h.revision,
        "time_ms": h.time_ms,
        "taken_at_unix_ms": h.taken_at_unix_ms,
        "taken_by_node_id": h.taken_by_node_id,
        "slot_applied": h.slot_applied,
        "members": h.members.iter().map(|m| json!({
            "node_id": m.node_id, "voter": m.voter, "client_endpoint": m.client_endpoint,
        })).collect::<Vec<_>>(),
        "sessions": s.sessions.len(),
        "held_keys": s.locks.len(),
        "classes": s.classes.len(),
        "semaphores": s.semaphores.len(),
        "force_releases": s.force_releases.len(),
        "audit_records": s.audit.len(),
        "sha256": backup.checksum_hex,
    });
    Report { json, human }
}
