//! The load generator: `workers` tasks each doing one request at a time (a client with one
//! keep-alive connection), either a fixed number of jobs between them or for a fixed time,
//! and what came out: rate, latency percentiles, errors.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The figures of one phase.
#[derive(Debug, Default, Clone)]
pub(crate) struct Sample {
    /// Jobs that succeeded inside the measured window.
    pub ok: usize,
    pub errors: usize,
    pub first_error: Option<String>,
    /// The measured window.
    pub wall: Duration,
    /// Latency of each successful job, microseconds, sorted.
    lat_us: Vec<u64>,
}

impl Sample {
    /// Successful jobs per second.
    pub(crate) fn rate(&self) -> f64 {
        let secs = self.wall.as_secs_f64();
        if secs > 0.0 {
            self.ok as f64 / secs
        } else {
            0.0
        }
    }

    /// The `q`-quantile (0..=1) of latency in milliseconds (nearest rank).
    pub(crate) fn ms(&self, q: f64) -> f64 {
        if self.lat_us.is_empty() {
            return 0.0;
        }
        let rank = (q * self.lat_us.len() as f64).ceil() as usize;
        let i = rank.clamp(1, self.lat_us.len()) - 1;
        self.lat_us[i] as f64 / 1000.0
    }

    /// The slowest job in milliseconds.
    pub(crate) fn max_ms(&self) -> f64 {
        self.lat_us.last().map_or(0.0, |&us| us as f64 / 1000.0)
    }

    /// Two samples as one: their jobs, errors and windows added.
    pub(crate) fn merged(mut self, other: Sample) -> Sample {
        self.ok += other.ok;
        self.errors += other.errors;
        self.first_error = self.first_error.or(other.first_error);
        self.wall += other.wall;
        self.lat_us.extend(other.lat_us);
        self.lat_us.sort_unstable();
        self
    }

    /// Builds a sample from raw latencies.
    pub(crate) fn from_latencies(mut lat_us: Vec<u64>, errors: usize, wall: Duration) -> Self {
        lat_us.sort_unstable();
        Self {
            ok: lat_us.len(),
            errors,
            first_error: None,
            wall,
            lat_us,
        }
    }

    fn merge(&mut self, other: WorkerResult) {
        self.ok += other.lat_us.len();
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        self.lat_us.extend(other.lat_us);
    }
}

#[derive(Default)]
struct WorkerResult {
    lat_us: Vec<u64>,
    errors: usize,
    first_error: Option<String>,
}

impl WorkerResult {
    fn record(&mut self, started: Instant, result: Result<(), String>) {
        match result {
            Ok(()) => self
                .lat_us
                .push(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX)),
            Err(e) => {
                self.errors += 1;
                self.first_error.get_or_insert(e);
            }
        }
    }
}

/// Runs jobs `0..n`, shared by `workers` tasks; `job(worker, index)`. The window is from
/// the first job's start to the last job's end.
pub(crate) async fn by_count<F, Fut>(workers: usize, n: usize, job: F) -> Sample
where
    F: Fn(usize, usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), String>> + Send + 'static,
{
    let job = Arc::new(job);
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let (job, next) = (job.clone(), next.clone());
            tokio::spawn(async move {
                let mut out = WorkerResult::default();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    let t0 = Instant::now();
                    let r = job(w, i).await;
                    out.record(t0, r);
                }
                out
            })
        })
        .collect();
    finish(handles, started, None).await
}

/// Runs jobs for `warmup + measure`; only jobs that start after the warm-up and end inside
/// the window count. Worker `w` runs indexes `w, w + workers, w + 2·workers, …`.
pub(crate) async fn by_time<F, Fut>(
    workers: usize,
    warmup: Duration,
    measure: Duration,
    job: F,
) -> Sample
where
    F: Fn(usize, usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), String>> + Send + 'static,
{
    let job = Arc::new(job);
    let begin = Instant::now() + warmup;
    let end = begin + measure;
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let job = job.clone();
            tokio::spawn(async move {
                let mut out = WorkerResult::default();
                for k in 0.. {
                    let t0 = Instant::now();
                    if t0 >= end {
                        break;
                    }
                    let r = job(w, w + k * workers).await;
                    if t0 >= begin && Instant::now() <= end {
                        out.record(t0, r);
                    }
                }
                out
            })
        })
        .collect();
    finish(handles, begin, Some(measure)).await
}

async fn finish(
    handles: Vec<tokio::task::JoinHandle<WorkerResult>>,
    started: Instant,
    window: Option<Duration>,
) -> Sample {
    let mut sample = Sample::default();
    for h in handles {
        match h.await {
            Ok(r) => sample.merge(r),
            Err(e) => {
                sample.errors += 1;
                sample
                    .first_error
                    .get_or_insert(format!("worker failed: {e}"));
            }
        }
    }
    sample.wall = window.unwrap_or_else(|| started.elapsed());
    sample.lat_us.sort_unstable();
    sample
}
