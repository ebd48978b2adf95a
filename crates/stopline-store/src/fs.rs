//! The one I/O seam of the control directory.
//!
//! Every byte the store reads or writes goes through [`Fs`], one method per durable step, each
//! named by a failpoint. [`RealFs`] is the binary's implementation; the model checker supplies
//! an in-memory one with crash semantics, and so steps exactly the protocol code the binary runs.
//!
//! Contract of a durable step: when it returns `Ok`, what it wrote survives a crash (for
//! `write_new`, the file's contents; a directory entry only after `sync_dir` of its directory).
//! A failed fsync is never retried on the same descriptor: the kernel may have dropped the dirty
//! pages and a retry would report a false success. Callers write a fresh file instead.
//!
//! Nothing here may block a reader for good (docs/reference.md §5): every file is opened
//! `O_NOFOLLOW | O_NONBLOCK` and must be a regular file (`fstat`), so a FIFO, socket, device,
//! directory or symlink planted in the control directory is an error, never a wait; and every
//! lock is taken with a bound, so a process frozen while it holds one (SIGSTOP) costs the others
//! at most their bound, never a hang.

use crate::failpoint;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

/// A held file lock; released on drop.
pub trait LockGuard: Send {}

/// The store's filesystem operations. `fp` names the failpoint of each step.
pub trait Fs: Send + Sync {
    /// `create_new` + write all + fsync the file (mode 0600). Fails if `path` exists.
    fn write_new(&self, path: &Path, bytes: &[u8], fp: &str) -> io::Result<()>;
    /// Append `bytes` (creating the file 0600 if needed), then fsync when `sync`.
    fn append(&self, path: &Path, bytes: &[u8], sync: bool, fp: &str) -> io::Result<()>;
    /// As [`Fs::append`], and where the file ended just after `bytes` were written: the
    /// writer's own end, whatever others append after it (an `O_APPEND` write is placed at the
    /// end atomically, and the descriptor's offset is then just past it). A journal's writer
    /// compares it with the end it expects to know whether the file holds exactly what it
    /// wrote. `None`: this filesystem cannot tell (the default), and the writer re-reads.
    fn append_end(
        &self,
        path: &Path,
        bytes: &[u8],
        sync: bool,
        fp: &str,
    ) -> io::Result<Option<u64>> {
        self.append(path, bytes, sync, fp)?;
        Ok(None)
    }
    /// fsync a directory, making its entries durable.
    fn sync_dir(&self, dir: &Path, fp: &str) -> io::Result<()>;
    /// Create `to` as a hard link of `from` (fails if `to` exists).
    fn hard_link(&self, from: &Path, to: &Path, fp: &str) -> io::Result<()>;
    /// Rename `from` over `to`.
    fn rename(&self, from: &Path, to: &Path, fp: &str) -> io::Result<()>;
    /// Remove a file.
    fn remove_file(&self, path: &Path, fp: &str) -> io::Result<()>;
    /// Create a directory and its parents, mode 0700. Existing directories are fine.
    fn create_dir_all(&self, path: &Path, fp: &str) -> io::Result<()>;
    /// Truncate a file to `len` bytes and fsync it.
    fn truncate(&self, path: &Path, len: u64, fp: &str) -> io::Result<()>;
    /// Read a whole file.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// Read a file from byte `offset` to its end (empty when it is shorter). The default reads
    /// the whole file and keeps the part from `offset`.
    fn read_from(&self, path: &Path, offset: u64) -> io::Result<Vec<u8>> {
        let bytes = self.read(path)?;
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(bytes.len());
        Ok(bytes[start..].to_vec())
    }
    /// As [`Fs::read_from`], with the identity of the file the bytes came from (taken from the
    /// same open descriptor), for a reader that follows a file across reads (`follow.rs`).
    /// `None`: this filesystem cannot tell, and the reader reads as if it had never seen the
    /// file (the default).
    fn read_from_identified(
        &self,
        path: &Path,
        offset: u64,
    ) -> io::Result<(Vec<u8>, Option<FileId>)> {
        Ok((self.read_from(path, offset)?, None))
    }
    /// The identity of the file at `path` now (`None`: this filesystem cannot tell). The
    /// default opens it and reads nothing of it.
    fn identify(&self, path: &Path) -> io::Result<Option<FileId>> {
        self.read_from_identified(path, u64::MAX).map(|(_, id)| id)
    }
    /// The names in a directory, sorted.
    fn read_dir(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Whether a path exists (without following a final symlink).
    fn exists(&self, path: &Path) -> io::Result<bool>;
    /// Take an advisory lock on `path`, exclusive or shared. With `create`, a missing file is
    /// created 0600; without it, a missing file is `NotFound`. With `wait`, a lock another
    /// process still holds when the bound runs out is `WouldBlock` (see [`lock_busy`]); without
    /// it the call waits for as long as the holder keeps the lock.
    fn lock(
        &self,
        path: &Path,
        exclusive: bool,
        create: bool,
        wait: Option<Duration>,
    ) -> io::Result<Box<dyn LockGuard>>;
}

/// A filesystem over another: every method forwards to [`FsLayer::inner`] unless the layer
/// overrides it, and every layer is an [`Fs`]. A layer overrides only what it changes (a
/// benchmark's build that skips fsync, a test that counts reads), so it cannot fall behind when
/// `Fs` gains a method.
///
/// Forwarding is whole: `append_end`, `read_from_identified` and `identify` reach the inner
/// filesystem's own, not `Fs`'s defaults over this layer. So a layer that changes `append`
/// changes `append_end` too, and one that watches reads watches every read method it cares for.
pub trait FsLayer: Send + Sync {
    /// The filesystem underneath.
    fn inner(&self) -> &dyn Fs;
    /// See [`Fs::write_new`].
    fn write_new(&self, path: &Path, bytes: &[u8], fp: &str) -> io::Result<()> {
        self.inner().write_new(path, bytes, fp)
    }
    /// See [`Fs::append`].
    fn append(&self, path: &Path, bytes: &[u8], sync: bool, fp: &str) -> io::Result<()> {
        self.inner().append(path, bytes, sync, fp)
    }
    /// See [`Fs::append_end`].
    fn append_end(
        &self,
        path: &Path,
        bytes: &[u8],
        sync: bool,
        fp: &str,
    ) -> io::Result<Option<u64>> {
        self.inner().append_end(path, bytes, sync, fp)
    }
    /// See [`Fs::sync_dir`].
    fn sync_dir(&self, dir: &Path, fp: &str) -> io::Result<()> {
        self.inner().sync_dir(dir, fp)
    }
    /// See [`Fs::hard_link`].
    fn hard_link(&self, from: &Path, to: &Path, fp: &str) -> io::Result<()> {
        self.inner().hard_link(from, to, fp)
    }
    /// See [`Fs::rename`].
    fn rename(&self, from: &Path, to: &Path, fp: &str) -> io::Result<()> {
        self.inner().rename(from, to, fp)
    }
    /// See [`Fs::remove_file`].
    fn remove_file(&self, path: &Path, fp: &str) -> io::Result<()> {
        self.inner().remove_file(path, fp)
    }
    /// See [`Fs::create_dir_all`].
    fn create_dir_all(&self, path: &Path, fp: &str) -> io::Result<()> {
        self.inner().create_dir_all(path, fp)
    }
    /// See [`Fs::truncate`].
    fn truncate(&self, path: &Path, len: u64, fp: &str) -> io::Result<()> {
        self.inner().truncate(path, len, fp)
    }
    /// See [`Fs::read`].
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.inner().read(path)
    }
    /// See [`Fs::read_from`].
    fn read_from(&self, path: &Path, offset: u64) -> io::Result<Vec<u8>> {
        self.inner().read_from(path, offset)
    }
    /// See [`Fs::read_from_identified`].
    fn read_from_identified(
        &self,
        path: &Path,
        offset: u64,
    ) -> io::Result<(Vec<u8>, Option<FileId>)> {
        self.inner().read_from_identified(path, offset)
    }
    /// See [`Fs::identify`].
    fn identify(&self, path: &Path) -> io::Result<Option<FileId>> {
        self.inner().identify(path)
    }
    /// See [`Fs::read_dir`].
    fn read_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.inner().read_dir(dir)
    }
    /// See [`Fs::exists`].
    fn exists(&self, path: &Path) -> io::Result<bool> {
        self.inner().exists(path)
    }
    /// See [`Fs::lock`].
    fn lock(
        &self,
        path: &Path,
        exclusive: bool,
        create: bool,
        wait: Option<Duration>,
    ) -> io::Result<Box<dyn LockGuard>> {
        self.inner().lock(path, exclusive, create, wait)
    }
}

impl<L: FsLayer> Fs for L {
    fn write_new(&self, path: &Path, bytes: &[u8], fp: &str) -> io::Result<()> {
        FsLayer::write_new(self, path, bytes, fp)
    }
    fn append(&self, path: &Path, bytes: &[u8], sync: bool, fp: &str) -> io::Result<()> {
        FsLayer::append(self, path, bytes, sync, fp)
    }
    fn append_end(
        &self,
        path: &Path,
        bytes: &[u8],
        sync: bool,
        fp: &str,
    ) -> io::Result<Option<u64>> {
        FsLayer::append_end(self, path, bytes, sync, fp)
    }
    fn sync_dir(&self, dir: &Path, fp: &str) -> io::Result<()> {
        FsLayer::sync_dir(self, dir, fp)
    }
    fn hard_link(&self, from: &Path, to: &Path, fp: &str) -> io::Result<()> {
        FsLayer::hard_link(self, from, to, fp)
    }
    fn rename(&self, from: &Path, to: &Path, fp: &str) -> io::Result<()> {
        FsLayer::rename(self, from, to, fp)
    }
    fn remove_file(&self, path: &Path, fp: &str) -> io::Result<()> {
        FsLayer::remove_file(self, path, fp)
    }
    fn create_dir_all(&self, path: &Path, fp: &str) -> io::Result<()> {
        FsLayer::create_dir_all(self, path, fp)
    }
    fn truncate(&self, path: &Path, len: u64, fp: &str) -> io::Result<()> {
        FsLayer::truncate(self, path, len, fp)
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        FsLayer::read(self, path)
    }
    fn read_from(&self, path: &Path, offset: u64) -> io::Result<Vec<u8>> {
        FsLayer::read_from(self, path, offset)
    }
    fn read_from_identified(
        &self,
        path: &Path,
        offset: u64,
    ) -> io::Result<(Vec<u8>, Option<FileId>)> {
        FsLayer::read_from_identified(self, path, offset)
    }
    fn identify(&self, path: &Path) -> io::Result<Option<FileId>> {
        FsLayer::identify(self, path)
    }
    fn read_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        FsLayer::read_dir(self, dir)
    }
    fn exists(&self, path: &Path) -> io::Result<bool> {
        FsLayer::exists(self, path)
    }
    fn lock(
        &self,
        path: &Path,
        exclusive: bool,
        create: bool,
        wait: Option<Duration>,
    ) -> io::Result<Box<dyn LockGuard>> {
        FsLayer::lock(self, path, exclusive, create, wait)
    }
}

/// Which file a path named when it was read, and how long it was then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    /// Device and inode: the same pair is the same file (a rename over the path is another).
    pub dev: u64,
    /// See `dev`.
    pub ino: u64,
    /// Its length in bytes.
    pub len: u64,
    /// Its status-change time in nanoseconds: any write, rename or replacement moves it.
    pub ctime_ns: i128,
    /// Its birth time in nanoseconds (`statx`'s `btime`; `None`: this filesystem cannot tell).
    /// An inode number is reused at once once freed (ext4 hands a file renamed over a journal
    /// the inode of the journal's generation before), so device and inode alone do not tell a
    /// file from one created later under the same number; its birth time does.
    pub born_ns: Option<i128>,
}

impl FileId {
    /// True when `self` and `other` are the same file (device, inode and birth time).
    pub fn same_file(&self, other: &FileId) -> bool {
        self.dev == other.dev && self.ino == other.ino && self.born_ns == other.born_ns
    }
}

/// True when `error` is a bounded lock that another process still held at its bound.
pub fn lock_busy(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::WouldBlock
}

/// The longest a single entry of the control directory may take to open and read before the
/// read counts as a fault (docs/reference.md §5).
pub const ENTRY_READ_BOUND: Duration = Duration::from_secs(1);

/// Open `path` for reading without following a final symlink and without blocking on a FIFO or
/// device, and refuse anything that is not a regular file.
fn open_regular(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc_flags::O_NOFOLLOW | libc_flags::O_NONBLOCK)
        .open(path)
        .map_err(|error| {
            // ELOOP is what O_NOFOLLOW reports for a symlink.
            match error.raw_os_error() {
                Some(libc_flags::ELOOP) => not_regular(path, "a symlink"),
                // What opening a socket (or a FIFO opened for writing without a reader) says.
                Some(libc_flags::ENXIO) => not_regular(path, "a socket"),
                _ => error,
            }
        })?;
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        use std::os::unix::fs::FileTypeExt;
        let what = if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_socket() {
            "a socket"
        } else if kind.is_dir() {
            "a directory"
        } else if kind.is_block_device() || kind.is_char_device() {
            "a device"
        } else {
            "not a regular file"
        };
        return Err(not_regular(path, what));
    }
    Ok(file)
}

/// When every other process holding a lock on `file` is stopped (state `T` or `t` in
/// `/proc/<pid>/stat`), their pids; `None` when any holder runs, none is found, or `/proc` cannot
/// tell (then the caller just waits out its bound).
fn holders_all_stopped(file: &File) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata().ok()?;
    let dev = meta.dev();
    let id = format!(
        "{:02x}:{:02x}:{}",
        rustix::fs::major(dev),
        rustix::fs::minor(dev),
        meta.ino()
    );
    let own = std::process::id().to_string();
    let locks = fs::read_to_string("/proc/locks").ok()?;
    let holders: Vec<&str> = locks
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        // `N: FLOCK ADVISORY READ pid dev:ino start end`; waiters are marked `->`.
        .filter(|f| f.len() > 5 && f[1] == "FLOCK" && f[5] == id)
        .map(|f| f[4])
        .filter(|pid| *pid != own)
        .collect();
    if holders.is_empty() {
        return None;
    }
    for pid in &holders {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let state = stat.rsplit_once(')')?.1.split_whitespace().next()?;
        if state != "T" && state != "t" {
            return None;
        }
    }
    Some(holders.join(", "))
}

fn not_regular(path: &Path, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{} is {what}, not a regular file", path.display()),
    )
}

/// The open(2) flags and errno this file needs, from rustix's constants.
mod libc_flags {
    pub const O_NOFOLLOW: i32 = rustix::fs::OFlags::NOFOLLOW.bits() as i32;
    pub const O_NONBLOCK: i32 = rustix::fs::OFlags::NONBLOCK.bits() as i32;
    pub const ELOOP: i32 = rustix::io::Errno::LOOP.raw_os_error();
    pub const ENXIO: i32 = rustix::io::Errno::NXIO.raw_os_error();
}

/// The real filesystem.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealFs;

struct FlockGuard(#[allow(dead_code)] File);
impl LockGuard for FlockGuard {}

/// Appends of this process to the real filesystem, one at a time: a failed append is cut back
/// before another thread's line can be written after its torn bytes.
static APPENDS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// [`Fs::append`] on the real filesystem; with `end`, also where the file ended just after
/// `bytes` ([`Fs::append_end`]). The one append of every journal of the home (docs/reference.md §5): it
/// lands whole or leaves the file as it was.
///
/// - Before writing, a torn tail (the file does not end in a newline: a crash's remnant, or a
///   failed append whose cut-back failed) is cut back to the end of its last complete line, so
///   no line is ever glued onto a torn one. When that cut fails, so does the append: the
///   journal is closed to this writer until a cut succeeds.
/// - A write that lands partly and fails (a full disk) is cut back to where it started
///   (ftruncate, fsync) before the failure is reported; so is a write whose fsync fails, while
///   nothing was appended after it. Failpoints: `<fp>.partial` (half the bytes land, then the
///   armed error) and `<fp>.cutback` (the cut-back fails).
fn append_file(
    path: &Path,
    bytes: &[u8],
    sync: bool,
    fp: &str,
    end: bool,
) -> io::Result<Option<u64>> {
    use std::io::Seek;
    failpoint::hit(&format!("{fp}.write"))?;
    let mut file = open_0600(path, true, false)?;
    let appends = APPENDS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !bytes.is_empty() {
        cut_torn_tail(&file, path, fp)?;
    }
    let mut written = 0usize;
    let failed = match failpoint::hit(&format!("{fp}.partial")) {
        Err(error) => {
            let half = &bytes[..bytes.len() / 2];
            file.write_all(half)?;
            written = half.len();
            Some(error)
        }
        Ok(()) => loop {
            if written == bytes.len() {
                break None;
            }
            match file.write(&bytes[written..]) {
                Ok(0) => break Some(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(n) => written += n,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => break Some(error),
            }
        },
    };
    // After an `O_APPEND` write the offset is just past what it wrote (a failed write moves
    // nothing): where this append's bytes end.
    let landed_end = if written > 0 {
        file.stream_position()?
    } else {
        0
    };
    if let Some(error) = failed {
        if written > 0 {
            cut_back(&file, path, landed_end - written as u64, landed_end, fp)?;
        }
        return Err(error);
    }
    drop(appends);
    if sync {
        let synced = failpoint::hit(&format!("{fp}.fsync")).and_then(|()| file.sync_data());
        if let Err(error) = synced {
            // Not durable, so not to be read: cut back while nothing follows it (lines
            // appended after it are whole, and what they say stands on its own).
            let _appends = APPENDS
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if !bytes.is_empty() && file.metadata()?.len() == landed_end {
                cut_back(&file, path, landed_end - bytes.len() as u64, landed_end, fp)?;
            }
            return Err(error);
        }
    }
    Ok(end.then_some(landed_end))
}

/// Cut `file` back from `end` to `start` (the bytes of a failed append) and fsync it, unless
/// something else was appended after them meanwhile (then the next append's tail check sees a
/// whole last line, or cuts the torn one). `Err` when the cut fails: the caller reports that,
/// and the journal's next append cuts the torn tail first or fails too.
fn cut_back(file: &File, path: &Path, start: u64, end: u64, fp: &str) -> io::Result<()> {
    if file.metadata()?.len() != end {
        return Ok(());
    }
    failpoint::hit(&format!("{fp}.cutback"))
        .and_then(|()| file.set_len(start))
        .and_then(|()| file.sync_all())
        .map_err(|error| {
            io::Error::new(
                error.kind(),
                format!(
                    "{} holds the torn bytes {start}..{end} of a failed append and cutting them off failed ({error}): the journal takes no append until they are cut",
                    path.display()
                ),
            )
        })
}

/// When `file` does not end in a newline, cut it back to the end of its last complete line and
/// fsync it (the tail is a crash's remnant, or what a failed cut-back left).
fn cut_torn_tail(file: &File, path: &Path, fp: &str) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(());
    }
    let mut last = [0u8; 1];
    file.read_exact_at(&mut last, len - 1)?;
    if last[0] == b'\n' {
        return Ok(());
    }
    // Find the last newline, reading backwards a block at a time.
    let mut keep = 0u64;
    let mut upto = len;
    let mut block = vec![0u8; 64 * 1024];
    while upto > 0 {
        let from = upto.saturating_sub(block.len() as u64);
        let chunk = &mut block[..(upto - from) as usize];
        file.read_exact_at(chunk, from)?;
        if let Some(at) = chunk.iter().rposition(|&b| b == b'\n') {
            keep = from + at as u64 + 1;
            break;
        }
        upto = from;
    }
    tracing::warn!(
        file = %path.display(),
        bytes = len - keep,
        "cutting off the torn tail of a journal before appending to it"
    );
    cut_back(file, path, keep, len, fp)
}

fn open_0600(path: &Path, append: bool, create_new: bool) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.write(true).mode(0o600);
    if create_new {
        options.create_new(true);
    } else {
        options.create(true);
    }
    if append {
        // Read too: the tail check before an append reads the file's last bytes.
        options.append(true).read(true);
    }
    options.open(path)
}

impl Fs for RealFs {
    fn write_new(&self, path: &Path, bytes: &[u8], fp: &str) -> io::Result<()> {
        failpoint::hit(&format!("{fp}.create"))?;
        let mut file = open_0600(path, false, true)?;
        failpoint::hit(&format!("{fp}.write"))?;
        file.write_all(bytes)?;
        failpoint::hit(&format!("{fp}.fsync"))?;
        file.sync_all()
    }

    fn append(&self, path: &Path, bytes: &[u8], sync: bool, fp: &str) -> io::Result<()> {
        append_file(path, bytes, sync, fp, false).map(|_| ())
    }

    fn append_end(
        &self,
        path: &Path,
        bytes: &[u8],
        sync: bool,
        fp: &str,
    ) -> io::Result<Option<u64>> {
        append_file(path, bytes, sync, fp, true)
    }

    fn sync_dir(&self, dir: &Path, fp: &str) -> io::Result<()> {
        failpoint::hit(fp)?;
        File::open(dir)?.sync_all()
    }

    fn hard_link(&self, from: &Path, to: &Path, fp: &str) -> io::Result<()> {
        failpoint::hit(fp)?;
        fs::hard_link(from, to)
    }

    fn rename(&self, from: &Path, to: &Path, fp: &str) -> io::Result<()> {
        failpoint::hit(fp)?;
        fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path, fp: &str) -> io::Result<()> {
        failpoint::hit(fp)?;
        fs::remove_file(path)
    }

    fn create_dir_all(&self, path: &Path, fp: &str) -> io::Result<()> {
        failpoint::hit(fp)?;
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path)
    }

    fn truncate(&self, path: &Path, len: u64, fp: &str) -> io::Result<()> {
        failpoint::hit(fp)?;
        let file = OpenOptions::new().write(true).open(path)?;
        file.set_len(len)?;
        file.sync_all()
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let started = Instant::now();
        let mut bytes = Vec::new();
        let mut file = open_regular(path)?;
        failpoint::read_delay(path);
        file.read_to_end(&mut bytes)?;
        if started.elapsed() > ENTRY_READ_BOUND {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "reading {} took {} ms, more than the {} ms bound",
                    path.display(),
                    started.elapsed().as_millis(),
                    ENTRY_READ_BOUND.as_millis()
                ),
            ));
        }
        Ok(bytes)
    }

    fn read_from(&self, path: &Path, offset: u64) -> io::Result<Vec<u8>> {
        self.read_from_identified(path, offset)
            .map(|(bytes, _)| bytes)
    }

    fn read_from_identified(
        &self,
        path: &Path,
        offset: u64,
    ) -> io::Result<(Vec<u8>, Option<FileId>)> {
        use std::io::{Seek, SeekFrom};
        use std::os::unix::fs::MetadataExt;
        let started = Instant::now();
        let mut file = open_regular(path)?;
        let meta = file.metadata()?;
        let id = FileId {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
            born_ns: meta
                .created()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .and_then(|d| i128::try_from(d.as_nanos()).ok()),
        };
        let mut bytes = Vec::new();
        if id.len > offset {
            file.seek(SeekFrom::Start(offset))?;
            file.read_to_end(&mut bytes)?;
        }
        if started.elapsed() > ENTRY_READ_BOUND {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "reading {} took {} ms, more than the {} ms bound",
                    path.display(),
                    started.elapsed().as_millis(),
                    ENTRY_READ_BOUND.as_millis()
                ),
            ));
        }
        Ok((bytes, Some(id)))
    }

    fn read_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(dir)? {
            names.push(entry?.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        match fs::symlink_metadata(path) {
            Ok(_) => Ok(true),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(error) => Err(error),
        }
    }

    fn lock(
        &self,
        path: &Path,
        exclusive: bool,
        create: bool,
        wait: Option<Duration>,
    ) -> io::Result<Box<dyn LockGuard>> {
        use rustix::fs::FlockOperation;
        // Read-only unless the file must be created: `flock` needs no write access, and closing
        // a descriptor opened for writing is an IN_CLOSE_WRITE that every inotify watcher of the
        // home (each gateway's) reads as a change — a gateway's own read woke it again, for good.
        let open = |write: bool| {
            OpenOptions::new()
                .read(true)
                .write(write)
                .create(write)
                .truncate(false)
                .mode(0o600)
                .custom_flags(libc_flags::O_NOFOLLOW | libc_flags::O_NONBLOCK)
                .open(path)
        };
        let file = match open(false) {
            Err(error) if create && error.kind() == io::ErrorKind::NotFound => open(true)?,
            other => other?,
        };
        if !file.metadata()?.file_type().is_file() {
            return Err(not_regular(path, "not a regular file"));
        }
        let Some(wait) = wait else {
            let operation = if exclusive {
                FlockOperation::LockExclusive
            } else {
                FlockOperation::LockShared
            };
            rustix::fs::flock(&file, operation)?;
            return Ok(Box::new(FlockGuard(file)));
        };
        // Poll without blocking until the bound: a blocking flock cannot be interrupted by a
        // deadline, and a holder frozen by SIGSTOP would keep us waiting for good.
        let operation = if exclusive {
            FlockOperation::NonBlockingLockExclusive
        } else {
            FlockOperation::NonBlockingLockShared
        };
        let deadline = Instant::now() + wait;
        let mut pause = Duration::from_micros(200);
        let mut looked = None::<Instant>;
        loop {
            match rustix::fs::flock(&file, operation) {
                Ok(()) => return Ok(Box::new(FlockGuard(file))),
                Err(rustix::io::Errno::WOULDBLOCK) | Err(rustix::io::Errno::INTR) => {}
                Err(errno) => return Err(errno.into()),
            }
            // A holder that is stopped (SIGSTOP, a debugger) releases nothing until someone
            // resumes it: waiting out the bound would only delay the caller. Looked at every
            // 20 ms at most.
            if looked.is_none_or(|at| at.elapsed() >= Duration::from_millis(20)) {
                looked = Some(Instant::now());
                if let Some(stopped) = holders_all_stopped(&file) {
                    return Err(io::Error::new(
                        io::ErrorKind::WouldBlock,
                        format!(
                            "{} is locked by stopped process {stopped} and will not be released until it is resumed",
                            path.display()
                        ),
                    ));
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    format!(
                        "{} is locked by another process and was not released within {} ms",
                        path.display(),
                        wait.as_millis()
                    ),
                ));
            }
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(Duration::from_millis(1));
        }
    }
}
