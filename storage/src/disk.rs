//! The `Disk` trait under the log, hard state and snapshots, and [`RealDisk`] over `std::fs`.
//!
//! The trait is deliberately small: whole-file namespace operations (create, open, rename,
//! remove, list, directory fsync) and positional reads/writes on an open file. Everything the
//! storage layer promises about durability is expressed with `sync_data` on a file and
//! `sync_dir` on a directory, so a simulated disk ([`crate::SimDisk`]) can model exactly what a
//! crash loses.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// A file system as the storage layer sees it.
///
/// Paths are used as given (no working-directory games). Durability rules, which both
/// implementations follow:
/// - bytes written to a file are durable only after that file's [`DiskFile::sync_data`];
/// - a create, rename or remove is durable only after [`Disk::sync_dir`] on the parent directory;
/// - directories made by [`Disk::create_dir_all`] are durable when the call returns.
pub trait Disk: Send + Sync + fmt::Debug {
    /// An open file of this disk.
    type File: DiskFile;

    /// Creates a directory and its parents; succeeds if it already exists.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Names of the regular files directly inside `dir`, sorted. Subdirectories are left out.
    fn list_files(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Whether a regular file exists at `path`.
    fn file_exists(&self, path: &Path) -> io::Result<bool>;
    /// Opens an existing file for reading and writing.
    fn open(&self, path: &Path) -> io::Result<Self::File>;
    /// Creates a file (truncating any existing one) for reading and writing.
    fn create(&self, path: &Path) -> io::Result<Self::File>;
    /// Atomically replaces `to` with `from` (both in the same directory).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Makes the creates, renames and removes of entries directly in `dir` durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
}

/// An open file of a [`Disk`].
pub trait DiskFile: Send + Sync + fmt::Debug {
    /// Current length in bytes (including unsynced writes).
    fn len(&self) -> io::Result<u64>;
    /// Whether the file is empty.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Reads exactly `buf.len()` bytes at `offset`; `UnexpectedEof` if the file is shorter.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Writes all of `data` at `offset`, extending the file (with zeros) if needed.
    fn write_all_at(&mut self, data: &[u8], offset: u64) -> io::Result<()>;
    /// Truncates or extends (with zeros) the file to `len` bytes.
    fn set_len(&mut self, len: u64) -> io::Result<()>;
    /// `fdatasync`: makes every byte written so far, and the length, durable.
    fn sync_data(&mut self) -> io::Result<()>;
    /// Writes all of `data` at `offset` and makes **those bytes** durable, with the file's
    /// length, before it returns: a write with `O_DSYNC` semantics (`pwritev2` with
    /// `RWF_DSYNC` in [`RealFile`]). Other writes not yet synced may stay unsynced. This
    /// provided version writes, then [`DiskFile::sync_data`]s the whole file (which promises
    /// more).
    fn write_all_at_dsync(&mut self, data: &[u8], offset: u64) -> io::Result<()> {
        self.write_all_at(data, offset)?;
        self.sync_data()
    }
}

/// The real file system, through `std::fs`.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealDisk;

/// A file of [`RealDisk`].
#[derive(Debug)]
pub struct RealFile(File);

impl Disk for RealDisk {
    type File = RealFile;

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        // Directories this call creates are made durable: each new directory's parent is
        // fsynced, from the top down, so the entry exists after a crash.
        let missing: Vec<&Path> = dir.ancestors().take_while(|a| !a.exists()).collect();
        fs::create_dir_all(dir)?;
        for created in missing.iter().rev() {
            if let Some(parent) = created.parent().filter(|p| !p.as_os_str().is_empty()) {
                self.sync_dir(parent)?;
            }
        }
        Ok(())
    }

    fn list_files(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                names.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        names.sort();
        Ok(names)
    }

    fn file_exists(&self, path: &Path) -> io::Result<bool> {
        match fs::metadata(path) {
            Ok(meta) => Ok(meta.is_file()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn open(&self, path: &Path) -> io::Result<RealFile> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map(RealFile)
    }

    fn create(&self, path: &Path) -> io::Result<RealFile> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map(RealFile)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}

impl DiskFile for RealFile {
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        FileExt::read_exact_at(&self.0, buf, offset)
    }

    fn write_all_at(&mut self, data: &[u8], offset: u64) -> io::Result<()> {
        FileExt::write_all_at(&self.0, data, offset)
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.0.sync_data()
    }

    /// One `pwritev2(RWF_DSYNC)`: the kernel writes the range and, like `fdatasync`, the
    /// metadata needed to read it back (the file size) before returning (`generic_write_sync`
    /// runs `vfs_fsync_range(.., datasync)` over the written range). A kernel without it
    /// (before 4.7: `EOPNOTSUPP`; before 4.6: `ENOSYS`) gets a `pwrite` and an `fdatasync`.
    #[cfg(target_os = "linux")]
    fn write_all_at_dsync(&mut self, data: &[u8], offset: u64) -> io::Result<()> {
        use rustix::io::{Errno, ReadWriteFlags};
        use std::sync::atomic::{AtomicBool, Ordering};
        static UNSUPPORTED: AtomicBool = AtomicBool::new(false);
        let (mut rest, mut at) = (data, offset);
        while !rest.is_empty() && !UNSUPPORTED.load(Ordering::Relaxed) {
            let slices = [io::IoSlice::new(rest)];
            match rustix::io::pwritev2(&self.0, &slices, at, ReadWriteFlags::DSYNC) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    rest = &rest[n..];
                    at += n as u64;
                }
                Err(Errno::INTR) => {}
                Err(Errno::NOSYS | Errno::OPNOTSUPP) if rest.len() == data.len() => {
                    UNSUPPORTED.store(true, Ordering::Relaxed);
                }
                Err(e) => return Err(e.into()),
            }
        }
        if rest.is_empty() {
            return Ok(());
        }
        FileExt::write_all_at(&self.0, rest, at)?;
        self.0.sync_data()
    }
}
