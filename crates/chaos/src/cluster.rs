//! The system under test: one standalone mock provider (its ledger in a state file, so a
//! killed provider comes back with its charges), N API instances on one PostgreSQL database
//! and one Redis database, a TCP balancer in front of the instances, and a supervisor that
//! restarts whatever died.
//!
//! Customers and the provider's webhooks both go through the balancer, as they would
//! through a load balancer in front of a real deployment: a connection goes to the next
//! instance that accepts it, so a dead instance costs a request in flight (the connection
//! drops), not every request until it is back.

use crate::ChaosError;
use payonce_testkit::eventually;
use payonce_testkit::pg::PgDb;
use rand::{Rng, SeedableRng};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};

/// Settings of the processes.
pub(crate) struct ClusterConfig {
    pub server_bin: PathBuf,
    pub pg_admin_url: String,
    /// `redis://HOST:PORT/DB`.
    pub redis_url: String,
    pub instances: usize,
    pub seed: u64,
    /// `--provider stripe`: localstripe behind a fault proxy instead of the mock provider.
    pub stripe: Option<Arc<crate::stripe::StripeSide>>,
    /// `--upgrade-from`: the previous release's payonce-server, which the instances start on.
    pub upgrade_from: Option<PathBuf>,
}

/// `--upgrade-from`: the previous release and the long flags its `--help` lists (a flag it
/// lacks is left off its command line, so a run can cross a release that added one).
struct OldRelease {
    bin: PathBuf,
    flags: std::collections::HashSet<String>,
}

impl OldRelease {
    fn probe(bin: PathBuf) -> Result<OldRelease, ChaosError> {
        let out = std::process::Command::new(&bin)
            .arg("--help")
            .output()
            .map_err(|e| ChaosError::Spawn(bin.display().to_string(), e))?;
        let help = String::from_utf8_lossy(&out.stdout);
        let flags = help
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .filter(|w| w.starts_with("--") && w.len() > 2)
            .map(str::to_owned)
            .collect();
        Ok(OldRelease { bin, flags })
    }

    /// `args` without the flags (and their values) this release does not know.
    fn known(&self, args: Vec<String>) -> Vec<String> {
        let mut kept = Vec::with_capacity(args.len());
        let mut skipping = false;
        for a in args {
            if a.starts_with("--") {
                skipping = !self.flags.contains(&a);
            }
            if !skipping {
                kept.push(a);
            }
        }
        kept
    }
}

/// Timings the instances run with: short enough that a run settles in seconds, in the same
/// proportions as the defaults (lease > provider timeout; reconciliation after leases).
const SERVER_FLAGS: &[&str] = &[
    "--dev",
    "--provider-timeout-ms",
    "1000",
    "--lease-ms",
    "2500",
    "--in-progress-wait-ms",
    "300",
    "--jobs-interval-ms",
    "500",
    "--reconcile-after-ms",
    "4000",
    // Customers are many users of one shop; per-user limits are not under test here.
    "--pay-rate-per-min",
    "0",
    "--new-attempts-per-min",
    "0",
    "--orders-per-min",
    "0",
    "--tombstones-per-min",
    "0",
];

/// One supervised process.
struct Slot {
    name: String,
    port: u16,
    child: Option<Child>,
    /// When a dead process is due to be started again.
    restart_at: Option<Instant>,
    /// Arm this failpoint at the next start (consumed by it).
    next_failpoint: Option<&'static str>,
    /// The failpoint the running process was started with.
    armed: Option<&'static str>,
    /// Keep it down (between `kill` and `start` of the provider fault, or at the end).
    held: bool,
    /// `--upgrade-from`: it runs (and restarts on) the previous release.
    old: bool,
    /// A stop the upgrade asked for: its exit is not a finding.
    stopping: bool,
}

/// What the supervisor saw die.
#[derive(Debug, Default, Clone)]
pub(crate) struct Stats {
    /// Instance exits by cause: our SIGKILL.
    pub killed: u64,
    /// Aborts at an armed failpoint, by name.
    pub failpoint_crashes: Vec<(String, u64)>,
    /// Aborts on the `crash-after-charge` request fault.
    pub crash_after_charge: u64,
    /// Other exits (must be 0: an instance that dies by itself is a finding).
    pub other_exits: Vec<String>,
    /// Stops the upgrade asked for (an instance restarted, or replaced by the new release).
    pub upgrade_stops: u64,
    /// Of those, the ones that may cut a job round between the relay's 250 and its commit
    /// (a receipt then goes again): the upgrade's SIGKILL, and any stop of the previous
    /// release, which may predate `finish_rounds` (crates/server/src/server.rs: this release
    /// waits for its round in flight at a graceful stop, an older one ended it with the
    /// process).
    pub upgrade_cuts: u64,
    /// Provider kills.
    pub provider_kills: u64,
    pub restarts: u64,
}

pub(crate) struct Cluster {
    cfg: ClusterConfig,
    pub dir: PathBuf,
    pub db_name: String,
    db_url: String,
    /// The run's database, dropped by `remove`.
    pg: Mutex<Option<PgDb>>,
    /// A pool on the run's database (the audit reads it).
    pub db: sqlx::PgPool,
    pub provider_port: u16,
    pub lb_port: u16,
    /// The relay every instance sends receipts to; the audit counts what it received.
    pub sink: payonce_testkit::smtp::SmtpSink,
    secret: String,
    webhook_chaos: String,
    instances: Vec<Mutex<Slot>>,
    provider: Mutex<Slot>,
    stats: Mutex<Stats>,
    stop: AtomicBool,
    supervisor: Mutex<Option<tokio::task::JoinHandle<()>>>,
    balancer: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The balancer's socket, bound before the processes start (the provider's webhook URL
    /// names it), served from `run_background`.
    lb_listener: Mutex<Option<TcpListener>>,
    rr: AtomicUsize,
    pub lb_connections: AtomicU64,
    /// `--upgrade-from`: the previous release.
    old: Option<OldRelease>,
    /// `--upgrade-from`: connections the balancer gave to the previous release, to this one.
    pub lb_to_old: AtomicU64,
    pub lb_to_new: AtomicU64,
}

fn free_port() -> Result<u16, ChaosError> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl Cluster {
    /// Creates the database, starts the provider, the instances (one at a time: the first
    /// runs the migrations), the balancer and the supervisor.
    pub(crate) async fn start(cfg: ClusterConfig) -> Result<Cluster, ChaosError> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let dir = std::env::temp_dir().join(format!("payonce-chaos-{id}"));
        std::fs::create_dir_all(&dir)?;
        let pg = PgDb::create(&cfg.pg_admin_url, "payonce_chaos")
            .await
            .map_err(|e| ChaosError::Setup(e.to_string()))?;
        let (db_name, db_url) = (pg.name.clone(), pg.url.clone());
        let old = match &cfg.upgrade_from {
            Some(bin) => Some(OldRelease::probe(bin.clone())?),
            None => None,
        };

        // Redis: the run's own database index, empty at the start.
        payonce_testkit::redis::flushed(&cfg.redis_url, Duration::from_secs(5))
            .await
            .map_err(|e| ChaosError::Setup(format!("redis at {}: {e}", cfg.redis_url)))?;

        let mut rng = rand::rngs::StdRng::seed_from_u64(cfg.seed ^ 0xc1u64);
        // The provider's webhook misbehaviour, from the seed: always duplicates, delays and
        // reordering; in half the runs also "early" webhooks (before the charge call returns).
        let webhook_chaos = format!(
            "dup={:.2},delay-ms={},reorder,reorder-ms=300{}",
            rng.gen_range(0.1..0.5),
            rng.gen_range(200..2000),
            if rng.gen_bool(0.5) { ",early" } else { "" }
        );
        let lb = TcpListener::bind("127.0.0.1:0").await?;
        let lb_port = lb.local_addr()?.port();
        let slot = |name: String, port, old: bool| {
            Mutex::new(Slot {
                name,
                port,
                child: None,
                restart_at: None,
                next_failpoint: None,
                armed: None,
                held: false,
                old,
                stopping: false,
            })
        };
        let mut instances = Vec::new();
        for i in 0..cfg.instances {
            instances.push(slot(format!("api{i}"), free_port()?, old.is_some()));
        }
        let provider_port = free_port()?;
        let sink = payonce_testkit::smtp::SmtpSink::start()
            .await
            .ok_or_else(|| {
                ChaosError::Setup(format!(
                    "no SMTP sink: {}",
                    payonce_testkit::smtp::HOW_TO_INSTALL
                ))
            })?;
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(4)
            .connect(&db_url)
            .await?;
        let cluster = Cluster {
            dir,
            db_name,
            db_url,
            pg: Mutex::new(Some(pg)),
            db: pool,
            provider_port,
            lb_port,
            sink,
            secret: format!("chaos-session-secret-{id}"),
            webhook_chaos,
            instances,
            provider: slot("provider".into(), provider_port, false),
            stats: Mutex::new(Stats::default()),
            stop: AtomicBool::new(false),
            supervisor: Mutex::new(None),
            balancer: Mutex::new(None),
            lb_listener: Mutex::new(Some(lb)),
            rr: AtomicUsize::new(0),
            lb_connections: AtomicU64::new(0),
            old,
            lb_to_old: AtomicU64::new(0),
            lb_to_new: AtomicU64::new(0),
            cfg,
        };
        match &cluster.cfg.stripe {
            Some(stripe) => {
                let url = format!(
                    "{}{}",
                    cluster.api_url(),
                    payonce_protocol::paths::STRIPE_WEBHOOKS
                );
                stripe.register_webhook(&url).await?;
            }
            None => {
                cluster.spawn_into(&cluster.provider, true)?;
                cluster.wait_port(provider_port).await?;
            }
        }
        if let Some(old) = &cluster.old {
            // As in production: the release's own `migrate` step, then starts that check.
            let line = cluster.migrate_with(&old.bin).await?;
            println!("payonce-chaos: the previous release migrated the database: {line}");
        }
        for slot in &cluster.instances {
            cluster.spawn_into(slot, false)?;
            let port = lock(slot).port;
            cluster.wait_healthy(port).await?;
        }
        // Stock for a long run: plenty of the common SKUs; the limited poster stays scarce so
        // customers compete for it (stock errors would show there first).
        sqlx::query("UPDATE catalog SET stock = 1000000 WHERE sku <> 'poster-limited'")
            .execute(&cluster.db)
            .await?;
        Ok(cluster)
    }

    /// The supervised processes: the instances, and the mock provider unless the run is
    /// against localstripe (never killed: its data lives in memory; its faults are the proxy's).
    fn slots(&self) -> impl Iterator<Item = &Mutex<Slot>> {
        let provider = self.cfg.stripe.is_none().then_some(&self.provider);
        self.instances.iter().chain(provider)
    }

    /// Starts the balancer and the supervisor (they need the `Arc`).
    pub(crate) fn run_background(self: &Arc<Self>) {
        if let Some(lb) = lock(&self.lb_listener).take() {
            let me = self.clone();
            *lock(&self.balancer) = Some(tokio::spawn(async move { me.balance(lb).await }));
        }
        let me = self.clone();
        *lock(&self.supervisor) = Some(tokio::spawn(async move { me.supervise().await }));
    }

    pub(crate) fn instance_ports(&self) -> Vec<u16> {
        self.instances.iter().map(|s| lock(s).port).collect()
    }

    /// `--provider stripe`: localstripe and its proxy.
    pub(crate) fn stripe(&self) -> Option<Arc<crate::stripe::StripeSide>> {
        self.cfg.stripe.clone()
    }

    /// The URL customers use (the balancer).
    pub(crate) fn api_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.lb_port)
    }

    pub(crate) fn provider_url(&self) -> String {
        match &self.cfg.stripe {
            Some(stripe) => stripe.provider_url(),
            None => format!("http://127.0.0.1:{}", self.provider_port),
        }
    }

    /// Starts the process of `slot` (a failpoint set for the next start is armed).
    fn spawn_into(&self, slot: &Mutex<Slot>, provider: bool) -> Result<(), ChaosError> {
        let mut s = lock(slot);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("{}.log", s.name)))?;
        let mut args: Vec<String> = Vec::new();
        if provider {
            args.extend([
                "mock-provider".to_owned(),
                "--addr".into(),
                format!("127.0.0.1:{}", s.port),
                "--webhook-url".into(),
                format!("{}{}", self.api_url(), payonce_protocol::paths::WEBHOOKS),
                "--state-file".into(),
                self.dir.join("provider.json").display().to_string(),
                "--webhook-chaos".into(),
                self.webhook_chaos.clone(),
            ]);
        } else {
            args.extend(SERVER_FLAGS.iter().map(|s| (*s).to_owned()));
            args.extend([
                "--addr".to_owned(),
                format!("127.0.0.1:{}", s.port),
                "--provider-url".into(),
                self.provider_url(),
                "--database-url".into(),
                self.db_url.clone(),
                "--redis-url".into(),
                self.cfg.redis_url.clone(),
                "--session-secret".into(),
                self.secret.clone(),
                "--mailer".into(),
                "smtp".into(),
                "--smtp-url".into(),
                self.sink.url(),
                "--mail-from".into(),
                "receipts@chaos.payonce.test".into(),
                "--smtp-timeout-ms".into(),
                "1000".into(),
            ]);
            if self.cfg.stripe.is_some() {
                args.extend(
                    [
                        "--provider",
                        "stripe",
                        "--stripe-secret-key",
                        crate::stripe::SECRET_KEY,
                        "--stripe-webhook-secret",
                        crate::stripe::WEBHOOK_SECRET,
                    ]
                    .map(String::from),
                );
            }
        }
        let fp = s.next_failpoint.take();
        if let Some(fp) = fp {
            args.push("--failpoint".into());
            args.push(fp.into());
        }
        let mut bin = &self.cfg.server_bin;
        if let (Some(old), false) = (&self.old, provider) {
            // The production start: `migrate` ran as a step, the start only checks that this
            // binary may serve the schema (docs/deploy.md, "Upgrading").
            args.extend(["--migrate".to_owned(), "check".into()]);
            if s.old {
                bin = &old.bin;
                args = old.known(args);
            }
        }
        // Flags say everything; an inherited variable must not change the run.
        let child = Command::from(payonce_testkit::server::command(bin))
            .args(&args)
            .env_remove("PAYONCE_FAILPOINTS")
            .env("PAYONCE_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| ChaosError::Spawn(bin.display().to_string(), e))?;
        s.child = Some(child);
        s.armed = fp;
        s.restart_at = None;
        Ok(())
    }

    async fn wait_port(&self, port: u16) -> Result<(), ChaosError> {
        eventually(
            Duration::from_secs(60),
            Duration::from_millis(50),
            || async { TcpStream::connect(("127.0.0.1", port)).await.ok() },
        )
        .await
        .map(drop)
        .ok_or_else(|| {
            ChaosError::Setup(format!(
                "nothing listens on :{port} after 60 s; see the logs in {}",
                self.dir.display()
            ))
        })
    }

    pub(crate) async fn wait_healthy(&self, port: u16) -> Result<(), ChaosError> {
        let http = reqwest::Client::new();
        let url = format!(
            "http://127.0.0.1:{port}{}",
            payonce_protocol::paths::HEALTHZ
        );
        eventually(
            Duration::from_secs(60),
            Duration::from_millis(100),
            || async {
                let r = http.get(&url).timeout(Duration::from_secs(2)).send().await;
                r.ok().filter(|r| r.status().is_success()).map(drop)
            },
        )
        .await
        .ok_or_else(|| {
            ChaosError::Setup(format!(
                "instance :{port} not healthy after 60 s; see the logs in {}",
                self.dir.display()
            ))
        })
    }

    /// The balancer: each connection goes to the next instance that accepts it.
    async fn balance(self: Arc<Self>, lb: TcpListener) {
        loop {
            let Ok((mut inbound, _)) = lb.accept().await else {
                continue;
            };
            self.lb_connections.fetch_add(1, Ordering::Relaxed);
            let ports: Vec<(u16, bool)> = self
                .instances
                .iter()
                .map(|s| {
                    let s = lock(s);
                    (s.port, s.old)
                })
                .collect();
            let start = self.rr.fetch_add(1, Ordering::Relaxed);
            let me = self.clone();
            tokio::spawn(async move {
                for k in 0..ports.len() {
                    let (port, old) = ports[(start + k) % ports.len()];
                    let connect = TcpStream::connect(("127.0.0.1", port));
                    if let Ok(Ok(mut outbound)) =
                        tokio::time::timeout(Duration::from_millis(300), connect).await
                    {
                        let _ = outbound.set_nodelay(true);
                        let _ = inbound.set_nodelay(true);
                        if me.old.is_some() {
                            let to = if old { &me.lb_to_old } else { &me.lb_to_new };
                            to.fetch_add(1, Ordering::Relaxed);
                        }
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        return;
                    }
                }
                // No instance up: the client sees its connection close, as behind a real
                // balancer with no healthy backend.
            });
        }
    }

    /// Restarts dead processes after a short pause, and records why they died.
    async fn supervise(self: Arc<Self>) {
        let mut rng = rand::rngs::StdRng::seed_from_u64(self.cfg.seed ^ 0x5u64);
        while !self.stop.load(Ordering::Relaxed) {
            for (k, slot) in self.slots().enumerate() {
                let provider = k == self.instances.len();
                let exited = {
                    let mut s = lock(slot);
                    match s.child.as_mut().map(|c| c.try_wait()) {
                        Some(Ok(Some(status))) => {
                            s.child = None;
                            let planned = std::mem::take(&mut s.stopping);
                            Some((status, s.armed.take(), s.name.clone(), planned))
                        }
                        _ => None,
                    }
                };
                if let Some((status, armed, name, planned)) = exited {
                    let pause = if planned {
                        lock(&self.stats).upgrade_stops += 1;
                        // The upgrade starts the replacement right away.
                        Duration::ZERO
                    } else {
                        self.record_exit(&name, status, armed, provider);
                        Duration::from_millis(rng.gen_range(100..1200))
                    };
                    lock(slot).restart_at = Some(Instant::now() + pause);
                }
                let due = {
                    let s = lock(slot);
                    s.child.is_none()
                        && !s.held
                        && s.restart_at.is_some_and(|t| Instant::now() >= t)
                };
                if due {
                    if let Err(e) = self.spawn_into(slot, provider) {
                        // Try again in a second (an unexpected exit is already counted).
                        eprintln!("payonce-chaos: restart failed: {e}");
                        lock(slot).restart_at = Some(Instant::now() + Duration::from_secs(1));
                    } else {
                        lock(&self.stats).restarts += 1;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn record_exit(
        &self,
        name: &str,
        status: std::process::ExitStatus,
        armed: Option<&'static str>,
        provider: bool,
    ) {
        use std::os::unix::process::ExitStatusExt;
        let mut st = lock(&self.stats);
        match status.signal() {
            Some(9) if provider => st.provider_kills += 1,
            Some(9) => st.killed += 1,
            // SIGABRT: the dev faults abort. The log's last "aborting at" line says which.
            Some(6) if !provider => {
                let why = last_abort(&self.dir.join(format!("{name}.log")));
                match (why.as_deref(), armed) {
                    (Some(w), Some(fp)) if w == fp => {
                        match st.failpoint_crashes.iter_mut().find(|(n, _)| n == fp) {
                            Some((_, c)) => *c += 1,
                            None => st.failpoint_crashes.push((fp.to_owned(), 1)),
                        }
                    }
                    (Some(w), _) if w.contains("crash-after-charge") => st.crash_after_charge += 1,
                    _ => st.other_exits.push(format!("{name}: {status} ({why:?})")),
                }
            }
            _ => st.other_exits.push(format!("{name}: {status}")),
        }
    }

    /// `BIN migrate` on the run's database: its one line, or why it failed.
    pub(crate) async fn migrate_with(&self, bin: &std::path::Path) -> Result<String, ChaosError> {
        let out = Command::new(bin)
            .args(["migrate", "--database-url", &self.db_url])
            .env("PAYONCE_LOG", "warn")
            .output()
            .await
            .map_err(|e| ChaosError::Spawn(bin.display().to_string(), e))?;
        let said = |b: &[u8]| String::from_utf8_lossy(b).trim().to_owned();
        match out.status.success() {
            true => Ok(said(&out.stdout)),
            false => Err(ChaosError::Setup(format!(
                "{} migrate: {}: {}",
                bin.display(),
                out.status,
                said(&out.stderr)
            ))),
        }
    }

    /// `--upgrade-from`: this release's `migrate`, while the instances serve.
    pub(crate) async fn migrate_new(&self) -> Result<String, ChaosError> {
        self.migrate_with(&self.cfg.server_bin).await
    }

    /// `--upgrade-from`: stops instance `i` (SIGKILL when `crash`, else SIGTERM: a graceful
    /// stop), and has the supervisor start it again at once, on this release when `to_new`,
    /// else on the release it ran. Resolves when the new process answers `/healthz`, or with
    /// the last line of its log when it does not within 60 s.
    pub(crate) async fn restart_instance(
        &self,
        i: usize,
        to_new: bool,
        crash: bool,
    ) -> Result<(), String> {
        let (port, name) = {
            let mut s = lock(&self.instances[i]);
            s.stopping = true;
            let cuts = s.child.is_some() && (crash || s.old);
            if cuts {
                lock(&self.stats).upgrade_cuts += 1;
            }
            if to_new {
                s.old = false;
            }
            match s.child.as_mut() {
                Some(c) if crash => {
                    let _ = c.start_kill();
                }
                Some(c) => {
                    // tokio's `Child` only sends SIGKILL; a rollout stops an instance with
                    // SIGTERM, which the server answers by draining
                    // (crates/server/src/listen.rs).
                    if let Some(pid) = c.id() {
                        let _ = std::process::Command::new("kill")
                            .args(["-TERM", &pid.to_string()])
                            .status();
                    }
                }
                None => s.stopping = false,
            }
            (s.port, s.name.clone())
        };
        // The supervisor sees the exit (clearing `stopping`) and starts the replacement.
        let deadline = Instant::now() + Duration::from_secs(30);
        while lock(&self.instances[i]).stopping {
            if Instant::now() > deadline {
                return Err(format!("{name} did not stop within 30 s"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.wait_healthy(port).await.map_err(|_| {
            let log = std::fs::read_to_string(self.dir.join(format!("{name}.log")));
            let last = log
                .ok()
                .and_then(|l| l.lines().rev().find(|l| !l.trim().is_empty()).map(str::to_owned));
            format!(
                "{name} not healthy 60 s after its start on the {} release; its log's last line: {}",
                if to_new { "new" } else { "previous" },
                last.unwrap_or_default()
            )
        })
    }

    /// `--upgrade-from`: how many instances run the previous release.
    pub(crate) fn old_instances(&self) -> usize {
        self.instances.iter().filter(|s| lock(s).old).count()
    }

    /// Fault: SIGKILL instance `i` (the supervisor restarts it), arming `failpoint` for its
    /// next start when given.
    pub(crate) fn kill_instance(&self, i: usize, failpoint: Option<&'static str>) {
        let mut s = lock(&self.instances[i % self.instances.len()]);
        s.next_failpoint = failpoint;
        // Already down: the failpoint waits for its restart.
        if let Some(c) = s.child.as_mut() {
            let _ = c.start_kill();
        }
    }

    /// Fault: SIGKILL the provider and keep it down for `down`.
    pub(crate) fn kill_provider(&self, down: Duration) {
        if let Some(stripe) = &self.cfg.stripe {
            stripe.down_for(down);
            lock(&self.stats).provider_kills += 1;
            return;
        }
        let mut s = lock(&self.provider);
        if let Some(c) = s.child.as_mut() {
            let _ = c.start_kill();
        }
        // The supervisor records the exit and sets its own restart time; this one is later.
        s.restart_at = Some(Instant::now() + down);
        s.held = false;
    }

    /// Fault: empty the run's Redis database.
    pub(crate) async fn flush_redis(&self) -> Result<(), ChaosError> {
        payonce_testkit::redis::flushed(&self.cfg.redis_url, Duration::from_secs(2))
            .await
            .map(drop)
            .map_err(|e| ChaosError::Setup(format!("redis: {e}")))
    }

    /// After the faults: every process restarted without failpoints, and healthy.
    pub(crate) async fn all_clean(&self) -> Result<(), ChaosError> {
        for slot in self.slots() {
            let mut s = lock(slot);
            s.next_failpoint = None;
            s.held = false;
            if s.armed.is_some() {
                if let Some(c) = s.child.as_mut() {
                    let _ = c.start_kill();
                }
            }
            if s.child.is_none() || s.armed.is_some() {
                s.restart_at = Some(Instant::now());
            }
        }
        // Give the supervisor a few rounds to see the exits and restart.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let clean = self.slots().all(|s| {
                let s = lock(s);
                s.child.is_some() && s.armed.is_none()
            });
            if clean {
                break;
            }
            if Instant::now() > deadline {
                return Err(ChaosError::Setup(
                    "processes did not come back clean in 30 s".into(),
                ));
            }
        }
        if self.cfg.stripe.is_none() {
            self.wait_port(self.provider_port).await?;
        }
        for port in self.instance_ports() {
            self.wait_healthy(port).await?;
        }
        Ok(())
    }

    pub(crate) fn stats(&self) -> Stats {
        lock(&self.stats).clone()
    }

    /// Stops the supervisor and every process.
    pub(crate) async fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        let supervisor = lock(&self.supervisor).take();
        if let Some(h) = supervisor {
            let _ = h.await;
        }
        if let Some(h) = lock(&self.balancer).take() {
            h.abort();
        }
        for slot in self.slots() {
            let child = lock(slot).child.take();
            if let Some(mut c) = child {
                let _ = c.kill().await;
            }
        }
    }

    /// Keeps the database and the logs for a look afterwards (`--keep`).
    pub(crate) fn keep(&self) {
        if let Some(pg) = lock(&self.pg).take() {
            pg.keep();
        }
    }

    /// Drops the database and the logs.
    pub(crate) async fn remove(&self) {
        self.db.close().await;
        let pg = lock(&self.pg).take();
        if let Some(pg) = pg {
            pg.remove().await;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The reason in the last `dev fault: aborting at …` line of a log.
fn last_abort(log: &std::path::Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    text.lines().rev().find_map(|l| {
        l.split_once("dev fault: aborting at ")
            .map(|(_, w)| w.trim().to_owned())
    })
}

/// A poisoned lock only means another task panicked while holding it; the data is still the
/// best we have for the report.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_old_release_gets_only_the_flags_it_lists() {
        let old = OldRelease {
            bin: PathBuf::from("old"),
            flags: ["--dev", "--lease-ms", "--migrate"]
                .map(String::from)
                .into(),
        };
        let args = [
            "--dev",
            "--lease-ms",
            "2500",
            "--connection-max-age-ms",
            "5000",
            "--migrate",
            "check",
            "--newer-switch",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            old.known(args),
            ["--dev", "--lease-ms", "2500", "--migrate", "check"].map(String::from)
        );
    }
}
