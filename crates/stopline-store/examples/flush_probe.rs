//! How long a latch-sized durable write waits while other threads flush the same disk (//! where `gate_closed_ms`'s tail comes from). A diagnostic, not a benchmark of stopline itself.
//!
//! ```sh
//! cargo run --release -p stopline-store --example flush_probe -- DIR FLUSHERS SAMPLES
//! ```
//!
//! `FLUSHERS` background threads keep the disk busy the way a gateway's journals do under load:
//! the even ones append 300 bytes to a file of their own and `fdatasync` it, the odd ones create
//! a small file, `fsync` it and its directory, and remove it. Meanwhile the probe alternates two
//! latch-sized (400 bytes) writes, 10 ms apart, and times each:
//!
//! - **new file**: `create_new`, write, `fsync`, the way a scoped latch's staging body is
//!   written (docs/reference.md §5); its fsync commits the file system's journal.
//! - **overwrite**: the same bytes written over the start of a file whose 4 KiB were written and
//!   fsynced beforehand (not timed), then `fdatasync`: no metadata changes, so no journal commit,
//!   only the data and the device's cache flush.
//!
//! If the second has the same tail as the first, the tail is the device's flush queue, not the
//! file system's journal. Prints one JSON line of percentiles (ms). Files stay under `DIR`.
#![allow(clippy::disallowed_methods)] // an example measuring the disk in a scratch directory

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(dir), Some(flushers), Some(samples)) = (
        args.next().map(PathBuf::from),
        args.next().and_then(|a| a.parse::<usize>().ok()),
        args.next().and_then(|a| a.parse::<usize>().ok()),
    ) else {
        eprintln!("usage: flush_probe DIR FLUSHERS SAMPLES");
        std::process::exit(2);
    };
    if let Err(error) = run(&dir, flushers, samples.max(1)) {
        eprintln!("error: flush_probe: {error}");
        std::process::exit(1);
    }
}

fn run(dir: &Path, flushers: usize, samples: usize) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..flushers)
        .map(|i| {
            let (dir, stop) = (dir.to_path_buf(), stop.clone());
            std::thread::spawn(move || flush(&dir, i, &stop))
        })
        .collect();
    let measured = probe(dir, samples);
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        thread
            .join()
            .map_err(|_| std::io::Error::other("a flusher panicked"))??;
    }
    let (mut created, mut overwritten) = measured?;
    println!(
        "{{\"flushers\":{flushers},\"samples\":{samples},\"new_file_ms\":{},\"overwrite_ms\":{}}}",
        percentiles(&mut created),
        percentiles(&mut overwritten)
    );
    Ok(())
}

/// One background flusher: appends and `fdatasync` (even), or small files made durable and
/// removed (odd), until told to stop.
fn flush(dir: &Path, index: usize, stop: &AtomicBool) -> std::io::Result<()> {
    let line = [b'x'; 300];
    let mut journal = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("journal-{index}")))?;
    let directory = File::open(dir)?;
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        if index.is_multiple_of(2) {
            journal.write_all(&line)?;
            journal.sync_data()?;
        } else {
            let path = dir.join(format!("record-{index}-{n}"));
            let mut file = File::create_new(&path)?;
            file.write_all(&line[..100])?;
            file.sync_all()?;
            directory.sync_all()?;
            std::fs::remove_file(&path)?;
            n += 1;
        }
    }
    Ok(())
}

/// The two timed writes, alternated; (new file, overwrite) in milliseconds.
fn probe(dir: &Path, samples: usize) -> std::io::Result<(Vec<f64>, Vec<f64>)> {
    let body = [b'y'; 400];
    let directory = File::open(dir)?;
    let (mut created, mut overwritten) = (Vec::new(), Vec::new());
    for i in 0..samples {
        let started = Instant::now();
        let mut file = File::create_new(dir.join(format!("new-{i}")))?;
        file.write_all(&body)?;
        file.sync_all()?;
        created.push(started.elapsed().as_secs_f64() * 1000.0);
        drop(file);

        let slot = dir.join(format!("slot-{i}"));
        let mut file = File::create_new(&slot)?;
        file.write_all(&[b' '; 4096])?;
        file.sync_all()?;
        directory.sync_all()?;
        drop(file);
        std::thread::sleep(Duration::from_millis(10));

        let started = Instant::now();
        let file = OpenOptions::new().write(true).open(&slot)?;
        file.write_all_at(&body, 0)?;
        file.sync_data()?;
        overwritten.push(started.elapsed().as_secs_f64() * 1000.0);
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok((created, overwritten))
}

fn percentiles(values: &mut [f64]) -> String {
    values.sort_by(f64::total_cmp);
    let at = |p: f64| values[((values.len() - 1) as f64 * p).round() as usize];
    format!(
        "{{\"p50\":{:.2},\"p90\":{:.2},\"p99\":{:.2},\"max\":{:.2}}}",
        at(0.5),
        at(0.9),
        at(0.99),
        at(1.0)
    )
}
