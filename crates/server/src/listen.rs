//! Binding a listener (port 0 allowed) and waiting for SIGINT/SIGTERM: shared by the API
//! (`src/server.rs`) and a dev build's provider listeners (`src/dev/`). And the API's
//! per-connection guards: the per-address connection cap, the write deadline, and the
//! connection's lifetime (age and request count).

use crate::config::Lifetime;
use crate::state::RunError;
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;

/// Binds `addr`; returns the listener and the address it got.
pub(crate) async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), RunError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| RunError::Listen { addr, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| RunError::Listen { addr, source })?;
    Ok((listener, local))
}

/// Resolves on SIGINT or SIGTERM.
pub(crate) async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

/// `--max-connections-per-peer`: open API connections per client address. Without it one
/// address could take every permit of `--max-connections` and stop the accept loop for
/// everybody. The map holds only addresses with an open connection, so it has at most
/// `--max-connections` entries.
///
/// An IPv6 client counts by its /64 ([`peer_group`]): a host is usually given a whole /64
/// and picks its addresses in it at will, so a cap per address would cap nothing.
#[derive(Clone)]
pub(crate) struct PeerCap {
    cap: usize,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl PeerCap {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            cap,
            open: Arc::default(),
        }
    }

    /// A slot for one more connection of `peer`, or `None` when its group holds `cap`
    /// already.
    pub(crate) fn admit(&self, peer: IpAddr) -> Option<PeerSlot> {
        let ip = peer_group(peer);
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let n = open.entry(ip).or_insert(0);
        if *n >= self.cap {
            return None;
        }
        *n += 1;
        Some(PeerSlot {
            peers: self.clone(),
            ip,
        })
    }
}

/// The address `peer`'s connections are counted under: an IPv4 address as itself (an IPv4
/// client on a dual-stack socket too), an IPv6 address as its /64.
fn peer_group(peer: IpAddr) -> IpAddr {
    match peer.to_canonical() {
        IpAddr::V6(v6) => {
            let prefix = u128::from(v6) & !(u128::from(u64::MAX));
            IpAddr::V6(Ipv6Addr::from(prefix))
        }
        v4 => v4,
    }
}

/// One connection counted by a [`PeerCap`]; dropping it frees the slot.
pub(crate) struct PeerSlot {
    peers: PeerCap,
    ip: IpAddr,
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut open = self
            .peers
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = open.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// `--write-timeout-ms`: a connection whose answer the client does not take. hyper's header
/// timeout runs only while it waits for a request head and the request timeout only while
/// the handler runs, so a client that pipelines requests and never reads would otherwise
/// hold its connection (and its permit) for ever. The clock starts when the network first
/// refuses bytes (a write is pending: the client's window and the kernel's buffer are full)
/// and stops when hyper flushes, which it does only once its buffer is empty, i.e. the whole
/// answer was handed to the network. Past `limit` the write fails and hyper closes the
/// connection. A client that trickles an answer in gets `limit` for all of it, not per byte.
pub(crate) struct WriteDeadline<T> {
    io: T,
    limit: Duration,
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<T> WriteDeadline<T> {
    pub(crate) fn new(io: T, limit: Duration) -> Self {
        Self {
            io,
            limit,
            stalled: None,
        }
    }

    /// A pending write starts (or keeps) the clock; past the limit it is an error. The
    /// timer is polled with the same context, so it wakes the connection when it fires.
    fn watch<R>(&mut self, cx: &mut Context<'_>, r: Poll<io::Result<R>>) -> Poll<io::Result<R>> {
        if r.is_ready() {
            return r;
        }
        let limit = self.limit;
        let timer = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client took no answer within --write-timeout-ms",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteDeadline<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        self.watch(cx, r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.watch(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.io).poll_flush(cx);
        if matches!(r, Poll::Ready(Ok(()))) {
            self.stalled = None;
        }
        self.watch(cx, r)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.io).poll_shutdown(cx);
        self.watch(cx, r)
    }
}

/// The answers one connection may still give: its last one (the request count reached, or
/// the connection past its age) carries `Connection: close`, so the client knows to open a
/// new connection, and hyper closes this one once the answer is written.
pub(crate) struct Budget {
    born: Instant,
    answered: AtomicU64,
    life: Lifetime,
}

impl Budget {
    /// The budget of a connection accepted at `born`.
    pub(crate) fn new(life: Lifetime, born: Instant) -> Self {
        Self {
            born,
            answered: AtomicU64::new(0),
            life,
        }
    }

    /// Counts one answer, given at `now`; true when it is the connection's last.
    pub(crate) fn last_answer(&self, now: Instant) -> bool {
        let n = self.answered.fetch_add(1, Ordering::Relaxed) + 1;
        n >= self.life.max_requests || now.duration_since(self.born) >= self.life.max_age
    }
}

/// Drives one API connection to its end. At its age, or when the server shuts down (a
/// message on `stop`, or its sender gone), hyper is asked to close it gracefully: an idle
/// connection closes at once, one in the middle of a request after that answer. Past its
/// age an idle connection would otherwise wait out the header timeout.
pub(crate) async fn drive<I, S, B>(
    conn: hyper::server::conn::http1::Connection<I, S>,
    life: Lifetime,
    mut stop: tokio::sync::watch::Receiver<()>,
) -> hyper::Result<()>
where
    S: hyper::service::HttpService<hyper::body::Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    B: hyper::body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => return r,
        () = tokio::time::sleep(life.max_age) => {}
        _ = stop.changed() => {}
    }
    conn.as_mut().graceful_shutdown();
    conn.await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_holds_at_most_its_cap_and_a_closed_connection_frees_its_slot() {
        let peers = PeerCap::new(2);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
        let first = peers.admit(a).expect("first");
        let _second = peers
            .admit(mapped)
            .expect("second: the same address, dual-stack");
        assert!(peers.admit(a).is_none(), "third");
        assert!(
            peers.admit("192.0.2.2".parse().unwrap()).is_some(),
            "another address"
        );
        drop(first);
        assert!(peers.admit(a).is_some(), "a slot freed");
        assert!(
            peers.open.lock().unwrap().len() <= 2,
            "only addresses with open connections"
        );
    }

    #[test]
    fn ipv6_clients_count_by_their_64() {
        let peers = PeerCap::new(2);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let _a = peers.admit(ip("2001:db8:1:2::1")).expect("first");
        let _b = peers
            .admit(ip("2001:db8:1:2:ffff:ffff:ffff:fffe"))
            .expect("second: another address of the same /64");
        assert!(
            peers.admit(ip("2001:db8:1:2:abcd::7")).is_none(),
            "third of the /64"
        );
        assert!(
            peers.admit(ip("2001:db8:1:3::1")).is_some(),
            "the next /64 is another client"
        );
    }

    #[test]
    fn the_last_answer_is_the_one_at_the_request_count() {
        let life = Lifetime {
            max_age: Duration::from_secs(3600),
            max_requests: 3,
        };
        let born = Instant::now();
        let budget = Budget::new(life, born);
        let last: Vec<bool> = (0..4).map(|_| budget.last_answer(born)).collect();
        assert_eq!(last, [false, false, true, true]);
    }

    #[test]
    fn an_answer_at_the_age_is_the_last() {
        let life = Lifetime {
            max_age: Duration::from_secs(60),
            max_requests: 1_000,
        };
        let born = Instant::now();
        let budget = Budget::new(life, born);
        assert!(!budget.last_answer(born + Duration::from_millis(59_999)));
        assert!(budget.last_answer(born + Duration::from_secs(60)));
    }
}
