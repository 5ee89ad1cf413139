//! `--perf DIR`: a system-wide CPU profile of one phase, for "what limits it" in
//! docs/benchmarks.md. `perf record -e cpu-clock -a` (the software clock works where the
//! hardware counters are not exposed, as on these VMs) samples every thread on the machine:
//! the server's HTTP workers, its store threads, the database, and this benchmark's own
//! clients, which share the cores. Read it with `perf report -i FILE --sort comm,dso`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A recording in progress; [`Recording::stop`] ends it (dropping it does too).
pub(crate) struct Recording(Option<(Child, PathBuf)>);

/// Starts recording into `dir/name.data` when `dir` is set; a `perf` that cannot start is
/// reported and the phase runs unprofiled.
pub(crate) fn start(dir: Option<&Path>, name: &str) -> Recording {
    let Some(dir) = dir else {
        return Recording(None);
    };
    let file = dir.join(format!("{name}.data"));
    let child = Command::new("perf")
        .args(["record", "-q", "-e", "cpu-clock", "-a", "-F", "499", "-o"])
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    match child {
        Ok(c) => {
            // perf needs a moment to open its buffers on every CPU before the phase starts.
            std::thread::sleep(std::time::Duration::from_millis(300));
            Recording(Some((c, file)))
        }
        Err(e) => {
            eprintln!("  perf: not recording {name}: {e}");
            Recording(None)
        }
    }
}

impl Recording {
    /// Ends the recording (SIGINT, as perf expects) and says where it is.
    pub(crate) fn stop(mut self) {
        self.end();
    }

    fn end(&mut self) {
        if let Some((mut child, file)) = self.0.take() {
            let _ = Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status();
            let _ = child.wait();
            eprintln!("  perf: {}", file.display());
        }
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        self.end();
    }
}
