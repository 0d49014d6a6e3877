//! [`SimDisk`]: an in-memory [`Disk`] that loses what a real crash can lose, deterministically.
//!
//! Crash model (see `docs/storage.md`):
//! - File data: every write or length change since the file's last successful `sync_data` is
//!   *unsynced*. At [`SimDisk::crash`] a prefix of the unsynced operations of each file survives,
//!   in the order they were made, and the first lost write may survive torn (a prefix of its
//!   bytes, optionally followed by zeros up to its end, as when the length reached the disk and
//!   the data did not). [`CrashMode::DropUnsynced`] keeps nothing unsynced.
//! - Directory entries: a create, rename or remove is durable only after `sync_dir` of its
//!   directory; at a crash every entry reverts to its last durable state (a renamed file whose
//!   directory was not synced is back under its old name, with its old contents).
//! - Directories themselves are durable on creation (a simplification).
//! - [`SimDisk::corrupt`] flips bits in place, both in the live and the durable bytes (media
//!   damage); [`SimDisk::fail_next_syncs`] makes the next fsyncs fail (nothing becomes durable).
//!
//! All random choices come from a ChaCha8 RNG seeded at construction, so a run is replayed
//! exactly from its seed. A [`SimDisk`] is a cloneable handle (the state is behind an
//! `Arc<Mutex<..>>`), so the simulator keeps one per node and it outlives the node's restarts.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

use crate::disk::{Disk, DiskFile};
use crate::format::{self, Frame};

/// What a crash keeps of the unsynced writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashMode {
    /// Drop every unsynced byte and every unsynced directory change.
    DropUnsynced,
    /// Keep a random prefix (from the seed) of each file's unsynced operations, the last kept
    /// write possibly torn; directory changes not synced are still lost.
    TornPrefix,
}

/// One unsynced change to a file's bytes.
#[derive(Debug, Clone)]
enum Op {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

#[derive(Debug, Clone, Default)]
struct Inode {
    /// What a read sees now.
    data: Vec<u8>,
    /// What survives a crash.
    durable: Vec<u8>,
    /// Changes since the last sync, in order; `durable` + all of them == `data`.
    ops: Vec<Op>,
}

#[derive(Debug, Clone)]
struct State {
    rng: ChaCha8Rng,
    /// Bumped by every crash; handles from an earlier epoch are stale.
    epoch: u64,
    inode_next: u64,
    inodes: BTreeMap<u64, Inode>,
    entries: BTreeMap<PathBuf, u64>,
    entries_durable: BTreeMap<PathBuf, u64>,
    dirs: BTreeSet<PathBuf>,
    syncs_to_fail: u32,
    dir_syncs_to_fail: u32,
    sync_data_count: u64,
    sync_dir_count: u64,
}

/// A deterministic in-memory disk. Cloning gives another handle to the same disk.
#[derive(Debug, Clone)]
pub struct SimDisk {
    state: Arc<Mutex<State>>,
}

/// An open file of a [`SimDisk`]; it refers to the file's inode, like a real descriptor.
#[derive(Debug)]
pub struct SimFile {
    state: Arc<Mutex<State>>,
    inode: u64,
    epoch: u64,
}

fn apply(data: &mut Vec<u8>, op: &Op) {
    match op {
        Op::Write {
            offset,
            data: bytes,
        } => write_at(data, *offset, bytes),
        Op::SetLen(len) => data.resize(to_usize(*len), 0),
    }
}

fn write_at(data: &mut Vec<u8>, offset: u64, bytes: &[u8]) {
    let start = to_usize(offset);
    let end = start + bytes.len();
    if data.len() < end {
        data.resize(end, 0);
    }
    data[start..end].copy_from_slice(bytes);
}

/// `(start, end)` of the last data record of a segment's bytes that a group commit covers: in
/// version 2 the last record a commit record closes (a record after the last commit record was
/// never synced: `sync` writes the commit record before its fdatasync); in version 1, which has
/// no commit records, the last record that checks out.
fn last_record_span(bytes: &[u8]) -> Option<(usize, usize)> {
    let header = format::decode_segment_header_any(bytes).ok()?;
    let mut off = header.data_start;
    let (mut last, mut closed) = (None, None);
    while off < bytes.len() {
        match format::check_frame(bytes, off, u32::MAX - 64, header.version) {
            Ok(Frame::Record { end }) => {
                last = Some((off, end));
                off = end;
            }
            Ok(Frame::Commit { end, .. }) => {
                closed = last;
                off = end;
            }
            Err(_) => break,
        }
    }
    if header.version >= format::SEGMENT_VERSION_2 {
        closed
    } else {
        last
    }
}

fn to_usize(n: u64) -> usize {
    usize::try_from(n).expect("SimDisk offsets fit in memory")
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("no such file: {}", path.display()),
    )
}

impl SimDisk {
    /// A new empty disk whose random choices come from `seed`.
    pub fn new(seed: u64) -> SimDisk {
        let mut dirs = BTreeSet::new();
        dirs.insert(PathBuf::from("/"));
        dirs.insert(PathBuf::new());
        SimDisk {
            state: Arc::new(Mutex::new(State {
                rng: ChaCha8Rng::seed_from_u64(seed),
                epoch: 0,
                inode_next: 1,
                inodes: BTreeMap::new(),
                entries: BTreeMap::new(),
                entries_durable: BTreeMap::new(),
                dirs,
                syncs_to_fail: 0,
                dir_syncs_to_fail: 0,
                sync_data_count: 0,
                sync_dir_count: 0,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .expect("SimDisk state poisoned by a panic while it was held")
    }

    /// An independent deep copy of this disk (same contents, same RNG state).
    pub fn fork(&self) -> SimDisk {
        SimDisk {
            state: Arc::new(Mutex::new(self.lock().clone())),
        }
    }

    /// Crashes the machine: every unsynced byte and directory change is lost, except that a
    /// random prefix of each file's unsynced writes may survive (the last one torn). Open
    /// handles become stale.
    pub fn crash(&self) {
        self.crash_with(CrashMode::TornPrefix);
    }

    /// Crashes the machine with an explicit [`CrashMode`].
    pub fn crash_with(&self, mode: CrashMode) {
        let mut st = self.lock();
        let st = &mut *st;
        st.epoch += 1;
        st.entries = st.entries_durable.clone();
        let live: BTreeSet<u64> = st.entries.values().copied().collect();
        st.inodes.retain(|id, _| live.contains(id));
        for inode in st.inodes.values_mut() {
            let mut data = std::mem::take(&mut inode.durable);
            if mode == CrashMode::TornPrefix && !inode.ops.is_empty() {
                let kept = (st.rng.next_u64() % (inode.ops.len() as u64 + 1)) as usize;
                for op in &inode.ops[..kept] {
                    apply(&mut data, op);
                }
                if let Some(Op::Write {
                    offset,
                    data: bytes,
                }) = inode.ops.get(kept)
                {
                    let cut = (st.rng.next_u64() % (bytes.len() as u64 + 1)) as usize;
                    let mut torn = bytes[..cut].to_vec();
                    if st.rng.next_u32() & 1 == 0 {
                        torn.resize(bytes.len(), 0);
                    }
                    write_at(&mut data, *offset, &torn);
                }
            }
            inode.ops.clear();
            inode.durable = data.clone();
            inode.data = data;
        }
    }

    /// Flips bits of the byte at `offset` of `path`, in the live and the durable contents.
    /// Returns the mask applied (never zero).
    pub fn corrupt(&self, path: &Path, offset: u64) -> io::Result<u8> {
        let mut st = self.lock();
        let st = &mut *st;
        let id = *st.entries.get(path).ok_or_else(|| not_found(path))?;
        let mask = loop {
            let m = (st.rng.next_u32() & 0xff) as u8;
            if m != 0 {
                break m;
            }
        };
        let inode = st
            .inodes
            .get_mut(&id)
            .expect("entry points at a live inode");
        let at = to_usize(offset);
        if at >= inode.data.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("offset {offset} past the end of {}", path.display()),
            ));
        }
        inode.data[at] ^= mask;
        if at < inode.durable.len() {
            inode.durable[at] ^= mask;
        }
        Ok(mask)
    }

    /// Damages the **last synced data record** of the log in `log_dir` (media damage after a
    /// group commit, not a torn write): in the durable contents of its newest segment, a byte of
    /// the last record a commit record closes is flipped (live contents too). Returns the file and the
    /// offset damaged, or `None` if no segment there holds a durable record. Recovery must not
    /// take this for a torn tail (`docs/storage.md`, "Recovery rules").
    pub fn damage_synced_record(&self, log_dir: &Path) -> Option<(PathBuf, u64)> {
        let (path, offset) = {
            let mut guard = self.lock();
            let st = &mut *guard;
            let path = st
                .entries
                .keys()
                .filter(|p| p.parent() == Some(log_dir))
                .filter(|p| p.extension().is_some_and(|e| e == "seg"))
                .max()?
                .clone();
            let durable = &st.inodes[&st.entries[&path]].durable;
            let (start, end) = last_record_span(durable)?;
            let pick = st.rng.next_u64() % (end - start) as u64;
            (path, start as u64 + pick)
        };
        self.corrupt(&path, offset).ok()?;
        Some((path, offset))
    }

    /// The next `n` calls to `sync_data` or `sync_dir` fail (and make nothing durable).
    pub fn fail_next_syncs(&self, n: u32) {
        self.lock().syncs_to_fail = n;
    }

    /// The next `n` calls to `sync_dir` fail (and make nothing durable); file syncs still work.
    pub fn fail_next_dir_syncs(&self, n: u32) {
        self.lock().dir_syncs_to_fail = n;
    }

    /// How many `sync_data` calls succeeded so far.
    pub fn sync_data_count(&self) -> u64 {
        self.lock().sync_data_count
    }

    /// How many `sync_dir` calls succeeded so far.
    pub fn sync_dir_count(&self) -> u64 {
        self.lock().sync_dir_count
    }

    /// The current contents of a file, if it exists.
    pub fn read_file(&self, path: &Path) -> Option<Vec<u8>> {
        let st = self.lock();
        let id = st.entries.get(path)?;
        Some(st.inodes[id].data.clone())
    }

    /// Paths of every file, sorted.
    pub fn paths(&self) -> Vec<PathBuf> {
        self.lock().entries.keys().cloned().collect()
    }
}

impl State {
    fn take_sync_failure(&mut self) -> io::Result<()> {
        if self.syncs_to_fail > 0 {
            self.syncs_to_fail -= 1;
            return Err(io::Error::other("SimDisk: injected fsync failure"));
        }
        Ok(())
    }

    fn check_parent(&self, path: &Path) -> io::Result<()> {
        let parent = path.parent().unwrap_or(Path::new(""));
        if self.dirs.contains(parent) {
            Ok(())
        } else {
            Err(not_found(parent))
        }
    }
}

impl Disk for SimDisk {
    type File = SimFile;

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.lock();
        for ancestor in dir.ancestors() {
            st.dirs.insert(ancestor.to_path_buf());
        }
        Ok(())
    }

    fn list_files(&self, dir: &Path) -> io::Result<Vec<String>> {
        let st = self.lock();
        if !st.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        let names = st
            .entries
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        Ok(names)
    }

    fn file_exists(&self, path: &Path) -> io::Result<bool> {
        Ok(self.lock().entries.contains_key(path))
    }

    fn open(&self, path: &Path) -> io::Result<SimFile> {
        let st = self.lock();
        let inode = *st.entries.get(path).ok_or_else(|| not_found(path))?;
        Ok(SimFile {
            state: Arc::clone(&self.state),
            inode,
            epoch: st.epoch,
        })
    }

    fn create(&self, path: &Path) -> io::Result<SimFile> {
        let mut st = self.lock();
        st.check_parent(path)?;
        let inode = match st.entries.get(path) {
            Some(&id) => {
                let node = st
                    .inodes
                    .get_mut(&id)
                    .expect("entry points at a live inode");
                node.data.clear();
                node.ops.push(Op::SetLen(0));
                id
            }
            None => {
                let id = st.inode_next;
                st.inode_next += 1;
                st.inodes.insert(id, Inode::default());
                st.entries.insert(path.to_path_buf(), id);
                id
            }
        };
        Ok(SimFile {
            state: Arc::clone(&self.state),
            inode,
            epoch: st.epoch,
        })
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = self.lock();
        st.check_parent(to)?;
        let id = st.entries.remove(from).ok_or_else(|| not_found(from))?;
        st.entries.insert(to.to_path_buf(), id);
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut st = self.lock();
        st.entries.remove(path).ok_or_else(|| not_found(path))?;
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.lock();
        let st = &mut *st;
        if !st.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        st.take_sync_failure()?;
        if st.dir_syncs_to_fail > 0 {
            st.dir_syncs_to_fail -= 1;
            return Err(io::Error::other(
                "SimDisk: injected directory fsync failure",
            ));
        }
        st.entries_durable.retain(|p, _| p.parent() != Some(dir));
        for (path, id) in &st.entries {
            if path.parent() == Some(dir) {
                st.entries_durable.insert(path.clone(), *id);
            }
        }
        // Inodes neither named now nor durably are gone for good.
        let live: BTreeSet<u64> = st
            .entries
            .values()
            .chain(st.entries_durable.values())
            .copied()
            .collect();
        st.inodes.retain(|id, _| live.contains(id));
        st.sync_dir_count += 1;
        Ok(())
    }
}

impl SimFile {
    fn with_inode<T>(&self, f: impl FnOnce(&mut State, u64) -> io::Result<T>) -> io::Result<T> {
        let mut st = self
            .state
            .lock()
            .expect("SimDisk state poisoned by a panic while it was held");
        if st.epoch != self.epoch {
            return Err(io::Error::other(
                "SimDisk: stale handle from before a crash",
            ));
        }
        if !st.inodes.contains_key(&self.inode) {
            return Err(io::Error::other("SimDisk: file was removed"));
        }
        f(&mut st, self.inode)
    }
}

impl DiskFile for SimFile {
    fn len(&self) -> io::Result<u64> {
        self.with_inode(|st, id| Ok(st.inodes[&id].data.len() as u64))
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.with_inode(|st, id| {
            let data = &st.inodes[&id].data;
            let start = to_usize(offset);
            let end = start.saturating_add(buf.len());
            if end > data.len() {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "SimDisk: read past the end of the file",
                ));
            }
            buf.copy_from_slice(&data[start..end]);
            Ok(())
        })
    }

    fn write_all_at(&mut self, bytes: &[u8], offset: u64) -> io::Result<()> {
        self.with_inode(|st, id| {
            let node = st.inodes.get_mut(&id).expect("checked above");
            let op = Op::Write {
                offset,
                data: bytes.to_vec(),
            };
            apply(&mut node.data, &op);
            node.ops.push(op);
            Ok(())
        })
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.with_inode(|st, id| {
            let node = st.inodes.get_mut(&id).expect("checked above");
            let op = Op::SetLen(len);
            apply(&mut node.data, &op);
            node.ops.push(op);
            Ok(())
        })
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.with_inode(|st, id| {
            st.take_sync_failure()?;
            let node = st.inodes.get_mut(&id).expect("checked above");
            // Replaying the ops costs what was written, not the size of the file.
            for op in std::mem::take(&mut node.ops) {
                apply(&mut node.durable, &op);
            }
            st.sync_data_count += 1;
            Ok(())
        })
    }

    /// Like `pwritev2(RWF_DSYNC)`: the written range and the file's length become durable;
    /// every other unsynced write stays unsynced (a crash may still lose or tear it). With a
    /// `set_len` pending the whole file is synced instead (a shrink then a regrow has no
    /// simple range form). Counted as a `sync_data`. An injected sync failure leaves the write
    /// done but not durable, as a failed `fdatasync` after it would.
    fn write_all_at_dsync(&mut self, bytes: &[u8], offset: u64) -> io::Result<()> {
        self.write_all_at(bytes, offset)?;
        self.with_inode(|st, id| {
            st.take_sync_failure()?;
            let node = st.inodes.get_mut(&id).expect("checked above");
            if node.ops.iter().any(|op| matches!(op, Op::SetLen(_))) {
                for op in std::mem::take(&mut node.ops) {
                    apply(&mut node.durable, &op);
                }
            } else {
                let (start, end) = (offset, offset + bytes.len() as u64);
                if node.durable.len() < node.data.len() {
                    node.durable.resize(node.data.len(), 0);
                }
                let range = to_usize(start)..to_usize(end);
                node.durable[range.clone()].copy_from_slice(&node.data[range]);
                // The range's durable bytes are now its newest: no older write may replay
                // over them at a crash.
                node.ops = std::mem::take(&mut node.ops)
                    .into_iter()
                    .flat_map(|op| clip(op, start, end))
                    .collect();
            }
            st.sync_data_count += 1;
            Ok(())
        })
    }
}

/// What is left of an unsynced write outside `[start, end)` (zero, one or two writes).
fn clip(op: Op, start: u64, end: u64) -> Vec<Op> {
    let Op::Write { offset, data } = op else {
        return vec![op];
    };
    let op_end = offset + data.len() as u64;
    if op_end <= start || offset >= end {
        return vec![Op::Write { offset, data }];
    }
    let mut kept = Vec::new();
    if offset < start {
        let head = to_usize(start - offset);
        kept.push(Op::Write {
            offset,
            data: data[..head].to_vec(),
        });
    }
    if op_end > end {
        let tail = to_usize(end - offset);
        kept.push(Op::Write {
            offset: end,
            data: data[tail..].to_vec(),
        });
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    fn setup(seed: u64) -> SimDisk {
        let disk = SimDisk::new(seed);
        disk.create_dir_all(&p("/d")).expect("mkdir");
        disk
    }

    #[test]
    fn unsynced_writes_are_lost_and_synced_ones_kept() {
        let disk = setup(1);
        let mut f = disk.create(&p("/d/f")).expect("create");
        f.write_all_at(b"durable", 0).expect("write");
        f.sync_data().expect("sync");
        disk.sync_dir(&p("/d")).expect("sync dir");
        f.write_all_at(b"-lost", 7).expect("write");
        assert_eq!(
            disk.read_file(&p("/d/f")).as_deref(),
            Some(&b"durable-lost"[..])
        );
        disk.crash_with(CrashMode::DropUnsynced);
        assert_eq!(disk.read_file(&p("/d/f")).as_deref(), Some(&b"durable"[..]));
        assert!(
            f.len().is_err(),
            "handle from before the crash must be stale"
        );
    }

    #[test]
    fn a_dsync_write_is_durable_alone_and_never_overwritten_by_an_older_write() {
        for seed in 0..64 {
            let disk = setup(seed);
            let mut f = disk.create(&p("/d/f")).expect("create");
            f.write_all_at(b"head", 0).expect("write");
            f.sync_data().expect("sync");
            disk.sync_dir(&p("/d")).expect("sync dir");
            f.write_all_at(b"HEAD", 0).expect("write"); // unsynced, outside the range
            f.write_all_at(b"0000000000", 4).expect("write"); // unsynced, under the range
            f.write_all_at_dsync(b"data", 6).expect("dsync write");
            let syncs = disk.sync_data_count();
            disk.crash();
            let got = disk.read_file(&p("/d/f")).expect("file");
            assert_eq!(got.len(), 14, "seed {seed}: the length is durable: {got:?}");
            assert_eq!(&got[6..10], b"data", "seed {seed}: {got:?}");
            assert_eq!(syncs, 2, "a dsync write counts as a sync");
        }
        let disk = setup(1);
        let mut f = disk.create(&p("/d/f")).expect("create");
        disk.sync_dir(&p("/d")).expect("sync dir");
        f.write_all_at(b"lost", 0).expect("write");
        f.write_all_at_dsync(b"kept", 4).expect("dsync write");
        disk.crash_with(CrashMode::DropUnsynced);
        assert_eq!(
            disk.read_file(&p("/d/f")).as_deref(),
            Some(&b"\0\0\0\0kept"[..]),
            "only the dsync write's range is durable"
        );
    }

    #[test]
    fn file_created_without_dir_sync_disappears() {
        let disk = setup(2);
        let mut f = disk.create(&p("/d/new")).expect("create");
        f.write_all_at(b"x", 0).expect("write");
        f.sync_data().expect("sync");
        disk.crash();
        assert_eq!(disk.read_file(&p("/d/new")), None);
    }

    #[test]
    fn rename_without_dir_sync_reverts_to_old_contents() {
        let disk = setup(3);
        for (name, body) in [("/d/a", &b"old"[..]), ("/d/a.tmp", &b"new"[..])] {
            let mut f = disk.create(&p(name)).expect("create");
            f.write_all_at(body, 0).expect("write");
            f.sync_data().expect("sync");
        }
        disk.sync_dir(&p("/d")).expect("sync dir");
        disk.rename(&p("/d/a.tmp"), &p("/d/a")).expect("rename");
        assert_eq!(disk.read_file(&p("/d/a")).as_deref(), Some(&b"new"[..]));
        disk.crash();
        assert_eq!(disk.read_file(&p("/d/a")).as_deref(), Some(&b"old"[..]));
        assert_eq!(disk.read_file(&p("/d/a.tmp")).as_deref(), Some(&b"new"[..]));
        disk.rename(&p("/d/a.tmp"), &p("/d/a")).expect("rename");
        disk.sync_dir(&p("/d")).expect("sync dir");
        disk.crash();
        assert_eq!(disk.read_file(&p("/d/a")).as_deref(), Some(&b"new"[..]));
        assert_eq!(disk.read_file(&p("/d/a.tmp")), None);
    }

    #[test]
    fn torn_crash_keeps_a_prefix_of_the_unsynced_writes() {
        for seed in 0..64 {
            let disk = setup(seed);
            let mut f = disk.create(&p("/d/f")).expect("create");
            disk.sync_dir(&p("/d")).expect("sync dir");
            f.write_all_at(b"base", 0).expect("write");
            f.sync_data().expect("sync");
            f.write_all_at(b"ABCD", 4).expect("write");
            f.write_all_at(b"EFGH", 8).expect("write");
            disk.crash();
            let got = disk.read_file(&p("/d/f")).expect("file");
            let full = b"baseABCDEFGH";
            assert!(got.len() <= full.len(), "seed {seed}: {got:?}");
            assert_eq!(&got[..4], b"base", "seed {seed}");
            // Each byte is either what was written or a zero of a torn, zero-filled write.
            for (i, &b) in got.iter().enumerate() {
                assert!(b == full[i] || b == 0, "seed {seed}: byte {i} is {b}");
            }
            // Whatever survives of the second write implies the first survived whole.
            if got.len() > 8 && got[8..].iter().any(|&b| b != 0) {
                assert_eq!(&got[..8], b"baseABCD", "seed {seed}");
            }
        }
    }

    #[test]
    fn same_seed_same_crash() {
        let run = |seed| {
            let disk = setup(seed);
            let mut f = disk.create(&p("/d/f")).expect("create");
            disk.sync_dir(&p("/d")).expect("sync dir");
            for i in 0..10u8 {
                f.write_all_at(&[i; 100], u64::from(i) * 100)
                    .expect("write");
            }
            disk.crash();
            disk.read_file(&p("/d/f")).expect("file")
        };
        assert_eq!(run(9), run(9));
        let differs = (10..20).any(|s| run(s) != run(9));
        assert!(differs, "crashes do not depend on the seed");
    }

    #[test]
    fn corrupt_flips_durable_bytes_and_sync_failures_make_nothing_durable() {
        let disk = setup(4);
        let mut f = disk.create(&p("/d/f")).expect("create");
        disk.sync_dir(&p("/d")).expect("sync dir");
        f.write_all_at(b"abc", 0).expect("write");
        f.sync_data().expect("sync");
        let mask = disk.corrupt(&p("/d/f"), 1).expect("corrupt");
        assert_ne!(mask, 0);
        assert!(disk.corrupt(&p("/d/f"), 3).is_err());
        disk.fail_next_syncs(1);
        f.write_all_at(b"zzz", 3).expect("write");
        assert!(f.sync_data().is_err());
        disk.crash_with(CrashMode::DropUnsynced);
        assert_eq!(
            disk.read_file(&p("/d/f")),
            Some(vec![b'a', b'b' ^ mask, b'c'])
        );
        assert_eq!(disk.sync_data_count(), 1);
    }

    #[test]
    fn fork_is_independent() {
        let disk = setup(5);
        let mut f = disk.create(&p("/d/f")).expect("create");
        f.write_all_at(b"one", 0).expect("write");
        let copy = disk.fork();
        f.write_all_at(b"two", 0).expect("write");
        assert_eq!(copy.read_file(&p("/d/f")).as_deref(), Some(&b"one"[..]));
        assert_eq!(disk.read_file(&p("/d/f")).as_deref(), Some(&b"two"[..]));
    }

    #[test]
    fn missing_parent_and_missing_file_are_not_found() {
        let disk = setup(6);
        let e = disk.create(&p("/nope/f")).expect_err("no parent dir");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        let e = disk.open(&p("/d/missing")).expect_err("no file");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(disk.list_files(&p("/d")).expect("list").is_empty());
    }
}
