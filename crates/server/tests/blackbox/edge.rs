//! The HTTP edge under slow clients: hundreds of connections that never finish their
//! headers or never send their declared body must not take `/healthz` down, and are closed
//! once the header (or body) timeout passes; a client that never reads its answers is
//! closed after the write timeout; one address holds at most its connection cap (an eighth
//! of the total by default, so two trickling addresses cannot hold every slot); a kept-alive
//! connection ends at its request count or its age, however often it sends; a head past
//! hyper's buffer is refused as soon as the buffer is full.

use crate::common::{client, Backend, HttpApi, Opts, TestApp};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

// Far above the setup's usual 0.3 s, so that opening the 300 connections on a loaded machine
// still ends before the timeouts (otherwise the test proves nothing).
const HEADER_TIMEOUT_MS: u64 = 5_000;
const BODY_TIMEOUT_MS: u64 = 5_000;
/// Connections of each kind: silent, headers never finished, body never sent.
const EACH: usize = 100;

async fn open(addr: &str, send: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    if !send.is_empty() {
        s.write_all(send).await.expect("write");
    }
    s
}

/// Reads until EOF or error, at most `within`; true when the server closed the connection.
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue, // an answer (e.g. the 400 of a timed-out body); then EOF
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_do_not_starve_healthz_and_are_closed_after_the_timeouts() {
    let opts = Opts {
        extra: vec![
            "--header-timeout-ms".into(),
            HEADER_TIMEOUT_MS.to_string(),
            "--body-timeout-ms".into(),
            BODY_TIMEOUT_MS.to_string(),
            // All 300 come from one address; the per-address cap has its own tests here.
            "--max-connections-per-peer".into(),
            "1024".into(),
        ],
        ..Opts::default()
    };
    let app = TestApp::spawn_with(Backend::Sqlite, opts)
        .await
        .expect("app");
    let addr = app.api.trim_start_matches("http://").to_owned();
    let started = Instant::now();
    let mut silent = Vec::new();
    let mut half_head = Vec::new();
    let mut no_body = Vec::new();
    for _ in 0..EACH {
        silent.push(open(&addr, b"").await);
        half_head.push(open(&addr, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ").await);
        no_body.push(
            open(
                &addr,
                b"POST /webhooks/provider HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{",
            )
            .await,
        );
    }
    // All 300 are held; a fresh client is still answered at once.
    for _ in 0..3 {
        let t = Instant::now();
        let r = tokio::time::timeout(
            Duration::from_secs(1),
            client().get(app.url("/healthz")).send(),
        )
        .await
        .expect("/healthz answered within 1 s while 300 slow connections are held")
        .expect("/healthz request");
        assert_eq!(r.status(), 200);
        assert!(t.elapsed() < Duration::from_secs(1));
    }
    assert!(
        started.elapsed() < Duration::from_millis(HEADER_TIMEOUT_MS),
        "the setup outlived the header timeout; the checks below would prove nothing"
    );
    // Past the timeouts (plus slack for a loaded machine) every slow connection is closed.
    let patience = Duration::from_millis(HEADER_TIMEOUT_MS.max(BODY_TIMEOUT_MS) + 3_000);
    for (kind, conns) in [
        ("silent", &mut silent),
        ("half-sent head", &mut half_head),
        ("declared body never sent", &mut no_body),
    ] {
        let mut open_still = 0;
        for s in conns.iter_mut() {
            let left = patience.saturating_sub(started.elapsed());
            if !closed_within(s, left.max(Duration::from_millis(10))).await {
                open_still += 1;
            }
        }
        assert_eq!(open_still, 0, "{kind}: {open_still} of {EACH} still open");
    }
    assert!(
        started.elapsed() >= Duration::from_millis(HEADER_TIMEOUT_MS),
        "closed before the timeout: something else closed them"
    );
    // And the server still serves.
    let r = client()
        .get(app.url("/healthz"))
        .send()
        .await
        .expect("healthz");
    assert_eq!(r.status(), 200);
}

/// Sends `head` and the first half of `body` on a fresh connection, pauses (long enough for
/// a server that answers early to answer and close), sends the rest, then reads the whole
/// answer: its text, and whether the exchange ended with a clean close (no reset).
async fn exchange(addr: &str, head: &[u8], body: &[u8]) -> (String, bool) {
    let mut s = open(addr, head).await;
    let (first, rest) = body.split_at(body.len() / 2);
    let mut wrote = s.write_all(first).await;
    // The pause is the point: a server that answers before the body is whole does it now.
    tokio::time::sleep(Duration::from_millis(100)).await;
    if wrote.is_ok() {
        wrote = s.write_all(rest).await;
    }
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut answer))
        .await
        .expect("the server closes within 10 s");
    let clean = wrote.is_ok() && read.is_ok();
    (String::from_utf8_lossy(&answer).into_owned(), clean)
}

/// A client still writing a 2 MiB chunked body reads the whole 413 problem and a clean close
/// (the body is drained), not a reset; heads past our limits but within hyper's are answered
/// with problems too, so the raised hyper limits are really above ours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_requests_get_problems_and_a_clean_close() {
    let app = TestApp::spawn_with(Backend::Sqlite, Opts::default())
        .await
        .expect("app");
    let addr = app.api.trim_start_matches("http://").to_owned();
    let chunk = format!("{:x}\r\n{}\r\n", 64 * 1024, "a".repeat(64 * 1024));
    let body = format!("{}0\r\n\r\n", chunk.repeat(32)); // 2 MiB
    let head = b"POST /orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
    let (answer, clean) = exchange(&addr, head, body.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );
    assert!(
        answer.contains("application/problem+json") && answer.contains("\"PAYLOAD_TOO_LARGE\""),
        "{answer}"
    );
    assert!(clean, "the connection was reset instead of closed");
    let headers: String = (0..150).map(|i| format!("X-H{i}: v\r\n")).collect();
    for (head, want) in [
        (
            format!(
                "GET /catalog?q={} HTTP/1.1\r\nHost: x\r\n\r\n",
                "a".repeat(20_000)
            ),
            "414",
        ),
        (
            format!("GET /catalog HTTP/1.1\r\nHost: x\r\n{headers}\r\n"),
            "431",
        ),
        (
            format!(
                "GET /catalog HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
                "v".repeat(40_000)
            ),
            "431",
        ),
    ] {
        let (answer, clean) = exchange(&addr, head.as_bytes(), b"").await;
        assert!(answer.starts_with(&format!("HTTP/1.1 {want}")), "{answer}");
        assert!(answer.contains("application/problem+json"), "{answer}");
        assert!(clean);
    }
}

/// A client that pipelines 400 `GET /openapi.json` (about 10 MB of answers) and never reads
/// them: once the network stops taking the answers, the server closes the connection within
/// the write timeout, so with one permit (`--max-connections 1`) a waiting `/healthz` is
/// answered instead of waiting for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_its_answers_is_closed_after_the_write_timeout() {
    const PIPELINED: usize = 400;
    let opts = Opts {
        extra: ["--write-timeout-ms", "500", "--max-connections", "1"]
            .map(String::from)
            .to_vec(),
        ..Opts::default()
    };
    let app = TestApp::spawn_with(Backend::Sqlite, opts)
        .await
        .expect("app");
    let addr: std::net::SocketAddr = app.api.trim_start_matches("http://").parse().unwrap();
    // A small receive window, so the answers back up into the server at once.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut reader = socket.connect(addr).await.expect("connect");
    let requests = "GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n".repeat(PIPELINED);
    reader.write_all(requests.as_bytes()).await.expect("write");
    // The one permit is held by `reader`: this waits in the backlog until it is closed.
    let healthz = tokio::time::timeout(
        Duration::from_secs(15),
        client().get(app.url("/healthz")).send(),
    )
    .await
    .expect("/healthz answered: the connection that never reads was closed")
    .expect("/healthz request");
    assert_eq!(healthz.status(), 200);
    // What the server had handed to the network arrives, then the close: not all 400.
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(15), reader.read_to_end(&mut got)).await;
    assert!(read.is_ok(), "the connection is closed, not idle");
    let answers = String::from_utf8_lossy(&got)
        .matches("HTTP/1.1 200")
        .count();
    assert!(
        answers < PIPELINED,
        "{answers} of {PIPELINED} answers: closed before the last"
    );
}

/// `--max-connections-per-peer 2`: a third connection from 127.0.0.1 is closed at once (long
/// before the header timeout would), while a client from another address (127.0.0.2) is
/// served; once one of the two ends, 127.0.0.1 is served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_holds_at_most_its_connection_cap() {
    let opts = Opts {
        extra: ["--max-connections-per-peer", "2"]
            .map(String::from)
            .to_vec(),
        ..Opts::default()
    };
    let app = TestApp::spawn_with(Backend::Sqlite, opts)
        .await
        .expect("app");
    let addr: std::net::SocketAddr = app.api.trim_start_matches("http://").parse().unwrap();
    let from = |ip: [u8; 4]| async move {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind((ip, 0).into()).unwrap();
        socket.connect(addr).await.expect("connect")
    };
    let healthz = |mut s: TcpStream| async move {
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut answer = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut answer))
            .await
            .ok()?
            .ok()?;
        Some(String::from_utf8_lossy(&answer).into_owned())
    };
    let held = [from([127, 0, 0, 1]).await, from([127, 0, 0, 1]).await];
    let mut third = from([127, 0, 0, 1]).await;
    assert!(
        closed_within(&mut third, Duration::from_secs(5)).await,
        "a third connection from one address is closed at once (header timeout: 10 s)"
    );
    let other = healthz(from([127, 0, 0, 2]).await)
        .await
        .unwrap_or_default();
    assert!(
        other.starts_with("HTTP/1.1 200"),
        "another address: {other}"
    );
    drop(held);
    let again = payonce_testkit::eventually(
        Duration::from_secs(5),
        Duration::from_millis(50),
        || async {
            healthz(from([127, 0, 0, 1]).await)
                .await
                .filter(|a| a.starts_with("HTTP/1.1 200"))
        },
    )
    .await;
    assert!(
        again.is_some(),
        "the address is served once its connections ended"
    );
}

/// A head that grows past hyper's buffer (`MAX_READ_BUFFER`, 64 KiB) is refused once the
/// buffer is full (431, or a close), not buffered until the header timeout (hyper's
/// default buffer is about 408 KiB: 1,024 such heads held 428 MiB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_past_the_read_buffer_is_refused_before_the_header_timeout() {
    let app = TestApp::spawn_with(Backend::Sqlite, Opts::default())
        .await
        .expect("app");
    let addr = app.api.trim_start_matches("http://").to_owned();
    let head = format!(
        "GET /catalog HTTP/1.1\r\nHost: x\r\nX-Big: {}",
        "v".repeat(100 * 1024)
    );
    let mut s = TcpStream::connect(&addr).await.expect("connect");
    let _ = s.write_all(head.as_bytes()).await; // the server may close before it all went
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        read.is_ok() && (answer.is_empty() || answer.starts_with("HTTP/1.1 431")),
        "refused within 5 s (the header timeout is 10 s): {read:?} {answer}"
    );
}

/// A connection from `ip` to `addr`.
async fn connect_from(ip: [u8; 4], addr: std::net::SocketAddr) -> std::io::Result<TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind((ip, 0).into())?;
    socket.connect(addr).await
}

/// Sends a kept-alive `GET /healthz` on `s` and reads its whole answer: the head (lowercase),
/// or `None` when the server closed the connection instead.
async fn healthz_on(s: &mut TcpStream) -> Option<String> {
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .ok()?;
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).to_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if got.len() >= end + 4 + length {
                return Some(head);
            }
        }
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// 1,024 kept-alive connections from two addresses (512 each), each with a request answered
/// (an attacker then sends one every few seconds to keep them): with the default per-address
/// cap, an eighth of `--max-connections`, each address holds 128 and the rest are closed at
/// once, so `/healthz` from a third address is answered within 1 s. (With a cap of half the
/// total, the two addresses held all 1,024 permits and `/healthz` waited in the backlog.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickling_connections_from_two_addresses_leave_healthz_answering() {
    const EACH: usize = 512;
    let opts = Opts {
        // The held connections outlive the test rather than the header timeout.
        extra: ["--header-timeout-ms", "120000"].map(String::from).to_vec(),
        ..Opts::default()
    };
    let app = TestApp::spawn_with(Backend::Sqlite, opts)
        .await
        .expect("app");
    let addr: std::net::SocketAddr = app.api.trim_start_matches("http://").parse().unwrap();
    let trickler = |ip: [u8; 4]| async move {
        let mut s = connect_from(ip, addr).await.ok()?;
        let answered = tokio::time::timeout(Duration::from_secs(30), healthz_on(&mut s))
            .await
            .ok()??;
        answered.starts_with("http/1.1 200").then_some(s)
    };
    let attempts = (0..EACH).flat_map(|_| [trickler([127, 0, 0, 1]), trickler([127, 0, 0, 2])]);
    let held: Vec<TcpStream> = futures_util::future::join_all(attempts)
        .await
        .into_iter()
        .flatten()
        .collect();
    let probe = async {
        let mut s = connect_from([127, 0, 0, 3], addr).await.ok()?;
        healthz_on(&mut s).await
    };
    let answer = tokio::time::timeout(Duration::from_secs(1), probe).await;
    assert!(
        matches!(&answer, Ok(Some(head)) if head.starts_with("http/1.1 200")),
        "/healthz from a third address within 1 s while {} connections are held: {answer:?}",
        held.len()
    );
    assert!(
        held.len() <= 2 * 1_024 / 8,
        "{} connections held by two addresses",
        held.len()
    );
}

/// `--max-requests-per-connection 3`: the third answer on a kept-alive connection carries
/// `Connection: close` and the server then closes it; the first two keep it open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_ends_after_its_request_count_with_connection_close() {
    let opts = Opts {
        extra: ["--max-requests-per-connection", "3"]
            .map(String::from)
            .to_vec(),
        ..Opts::default()
    };
    let app = TestApp::spawn_with(Backend::Sqlite, opts)
        .await
        .expect("app");
    let addr: std::net::SocketAddr = app.api.trim_start_matches("http://").parse().unwrap();
    let mut s = connect_from([127, 0, 0, 1], addr).await.expect("connect");
    for n in 1..=3 {
        let head = healthz_on(&mut s).await.expect("answered");
        assert!(head.starts_with("http/1.1 200"), "{head}");
        assert_eq!(
            head.contains("\r\nconnection: close"),
            n == 3,
            "answer {n}: {head}"
        );
    }
    assert!(
        closed_within(&mut s, Duration::from_secs(5)).await,
        "closed after the last answer (the header timeout is 10 s)"
    );
}

/// `--connection-max-age-ms 1000`: a client that sends a small request every 200 ms (each
/// restarting the header timeout, here 120 s) still loses its connection once it is 1 s old:
/// an answer with `Connection: close`, or the close of the idle connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickling_connection_is_closed_at_its_age() {
    let opts = Opts {
        extra: [
            "--connection-max-age-ms",
            "1000",
            "--header-timeout-ms",
            "120000",
        ]
        .map(String::from)
        .to_vec(),
        ..Opts::default()
    };
    let app = TestApp::spawn_with(Backend::Sqlite, opts)
        .await
        .expect("app");
    let addr: std::net::SocketAddr = app.api.trim_start_matches("http://").parse().unwrap();
    let mut s = connect_from([127, 0, 0, 1], addr).await.expect("connect");
    let opened = Instant::now();
    let mut answers = 0;
    // Ends with the connection: the closing answer, or none (closed while idle).
    while opened.elapsed() < Duration::from_secs(20) {
        match healthz_on(&mut s).await {
            Some(head) if head.contains("\r\nconnection: close") => {
                answers += 1;
                break;
            }
            Some(_) => answers += 1,
            None => break,
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let ended = opened.elapsed();
    assert!(
        closed_within(&mut s, Duration::from_secs(5)).await,
        "the connection ended within 20 s of its 1 s age ({answers} answers)"
    );
    // Load only delays the close, so this bound cannot flake: not closed before its age.
    assert!(
        ended >= Duration::from_secs(1),
        "kept alive until its age: ended after {ended:?}, {answers} answers"
    );
}
