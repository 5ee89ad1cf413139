//! Local TLS services for the server's TLS tests, all made by the test itself: a CA and a
//! server certificate for `127.0.0.1` / `localhost` ([`Certs`]), a private PostgreSQL with
//! `ssl=on` ([`TlsPg`]), a private `redis-server` listening on a TLS port only
//! ([`crate::redis::PrivateRedis::start_tls`]), and a TLS terminator in front of a plain
//! HTTP service such as the mock provider ([`terminate`]).

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A fresh CA and a certificate it signed for `127.0.0.1` and `localhost`, as PEM files in a
/// directory of their own (removed on drop).
pub struct Certs {
    pub dir: PathBuf,
    /// The CA certificate: what a client must trust.
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    cert_der: CertificateDer<'static>,
    key_der: Vec<u8>,
}

impl Certs {
    pub fn new() -> Certs {
        use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
        let dir = std::env::temp_dir().join(format!("payonce-tls-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("certificate dir");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(
            rcgen::DnType::CommonName,
            format!("payonce test CA {}", dir.display()),
        );
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("CA key"))
            .expect("CA certificate");
        let key = KeyPair::generate().expect("server key");
        let cert = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .expect("server params")
            .signed_by(&key, &ca)
            .expect("server certificate");
        let me = Certs {
            ca: dir.join("ca.pem"),
            cert: dir.join("server.pem"),
            key: dir.join("server.key"),
            cert_der: cert.der().clone(),
            key_der: key.serialize_der(),
            dir,
        };
        std::fs::write(&me.ca, ca.pem()).expect("write CA");
        std::fs::write(&me.cert, cert.pem()).expect("write certificate");
        std::fs::write(&me.key, key.serialize_pem()).expect("write key");
        me
    }
}

impl Default for Certs {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Serves TLS with `certs` on a free loopback port and forwards each connection's plain
/// bytes to `upstream` (`http://HOST:PORT`); returns the `https://127.0.0.1:PORT` URL. Runs
/// until the test's runtime ends.
pub async fn terminate(certs: &Certs, upstream: &str) -> String {
    use tokio_rustls::rustls::{crypto::aws_lc_rs, ServerConfig};
    let upstream = upstream
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(certs.key_der.clone()));
    let config = ServerConfig::builder_with_provider(Arc::new(aws_lc_rs::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(vec![certs.cert_der.clone()], key)
        .expect("server certificate");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the TLS terminator");
    let url = format!("https://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, upstream) = (acceptor.clone(), upstream.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return; // a client that refused our certificate: its test says so
                };
                if let Ok(mut plain) = tokio::net::TcpStream::connect(&upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                }
            });
        }
    });
    url
}

/// A free loopback port.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
    l.local_addr().expect("addr").port()
}

/// A PostgreSQL server of the test's own (`initdb` in a temp dir), with `ssl=on` and the
/// [`Certs`] server certificate, trust auth for `root`; stopped and removed on drop. Under
/// root it runs as the `postgres` user (PostgreSQL refuses root).
pub struct TlsPg {
    child: Child,
    dir: PathBuf,
    pub port: u16,
}

/// How to get the PostgreSQL server binaries, for the failure message.
pub const PG_HOW: &str =
    "install them with: apt-get install postgresql (or set PAYONCE_TEST_PG_BIN to their directory)";

impl TlsPg {
    /// `None` when the binaries are missing and skipping is allowed ([`crate::unavailable`]).
    pub async fn start(certs: &Certs) -> Option<TlsPg> {
        let Some(bin) = pg_bin() else {
            return crate::unavailable("no PostgreSQL server binaries", PG_HOW, "TLS tests");
        };
        let dir = std::env::temp_dir().join(format!("payonce-pg-{}", uuid::Uuid::new_v4()));
        let data = dir.join("data");
        std::fs::create_dir_all(&dir).expect("pg dir");
        let owner = run_as();
        for (from, to) in [(&certs.cert, "server.crt"), (&certs.key, "server.key")] {
            std::fs::copy(from, dir.join(to)).expect("copy certificate");
            // PostgreSQL refuses a key that others can read.
            std::fs::set_permissions(dir.join(to), std::fs::Permissions::from_mode(0o600))
                .expect("chmod");
        }
        if let Some((uid, gid)) = owner {
            for p in [&dir, &dir.join("server.crt"), &dir.join("server.key")] {
                std::os::unix::fs::chown(p, Some(uid), Some(gid)).expect("chown to postgres");
            }
        }
        let mut initdb = as_owner(Command::new(bin.join("initdb")), owner, &dir);
        let out = initdb
            .args([
                "-U",
                "root",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
                "-D",
            ])
            .arg(&data)
            .output()
            .expect("run initdb");
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let port = free_port();
        let conf = |k: &str, v: &Path| format!("{k}={}", v.display());
        let child = as_owner(Command::new(bin.join("postgres")), owner, &dir)
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-c", "listen_addresses=127.0.0.1"])
            .args(["-c", "ssl=on", "-c", "fsync=off", "-k"])
            .arg(&dir)
            .args(["-c", &conf("ssl_cert_file", &dir.join("server.crt"))])
            .args(["-c", &conf("ssl_key_file", &dir.join("server.key"))])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run postgres");
        let me = TlsPg { child, dir, port };
        let url = me.url("sslmode=disable");
        let up = crate::eventually(Duration::from_secs(20), Duration::from_millis(50), || {
            let url = url.clone();
            async move {
                use sqlx::Connection;
                sqlx::PgConnection::connect(&url).await.ok()
            }
        })
        .await;
        assert!(
            up.is_some(),
            "private postgres on port {port} never answered"
        );
        Some(me)
    }

    /// `postgres://root@127.0.0.1:PORT/postgres?QUERY`.
    pub fn url(&self, query: &str) -> String {
        format!("postgres://root@127.0.0.1:{}/postgres?{query}", self.port)
    }
}

impl Drop for TlsPg {
    fn drop(&mut self) {
        // SIGINT: PostgreSQL's fast shutdown, which also ends its backends.
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The newest `/usr/lib/postgresql/*/bin` with `initdb`, or `PAYONCE_TEST_PG_BIN`.
fn pg_bin() -> Option<PathBuf> {
    if let Ok(dir) = std::env::var("PAYONCE_TEST_PG_BIN") {
        return Some(PathBuf::from(dir));
    }
    let mut bins: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| Some(e.ok()?.path().join("bin")))
        .filter(|b| b.join("initdb").exists())
        .collect();
    bins.sort_by_key(|b| {
        let v = b.parent().and_then(|p| p.file_name()).map(|n| n.to_owned());
        v.and_then(|n| n.to_str()?.parse::<u32>().ok())
    });
    bins.pop()
}

/// The `postgres` user's uid and gid when we are root, else `None` (run as ourselves).
fn run_as() -> Option<(u32, u32)> {
    use std::os::unix::fs::MetadataExt;
    if std::fs::metadata("/proc/self").ok()?.uid() != 0 {
        return None;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    let line = passwd.lines().find(|l| l.starts_with("postgres:"));
    let fields: Vec<&str> = line
        .expect("running as root, PostgreSQL needs the postgres user (apt-get install postgresql)")
        .split(':')
        .collect();
    Some((fields[2].parse().ok()?, fields[3].parse().ok()?))
}

fn as_owner(mut cmd: Command, owner: Option<(u32, u32)>, dir: &Path) -> Command {
    if let Some((uid, gid)) = owner {
        cmd.uid(uid).gid(gid);
    }
    cmd.current_dir(dir).stdin(Stdio::null());
    cmd
}
