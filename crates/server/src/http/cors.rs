//! Who may call the API from a page on another origin: one rule for `--dev` and for
//! production. A production server grants exactly the `--cors-origin` origins (exact
//! match, no patterns), with credentials only under `--cors-credentials`; `--dev` adds any
//! `http://localhost[:port]` or `http://127.0.0.1[:port]` page, with credentials, and the
//! dev fault header. Either way a preflight allows exactly the request headers the SDK
//! sends (`Content-Type`, `Idempotency-Key`, `X-Request-Id`, and the app's `Authorization`), and a page may
//! read the headers a client acts on (`Retry-After`, `Idempotent-Replayed`,
//! `Idempotency-Key-Retention`, `X-Request-Id`). With neither, no CORS header is ever sent.

use axum::http::{header, HeaderName, HeaderValue, Method};
use payonce_protocol::headers::{
    DEV_FAULT, IDEMPOTENCY_KEY, IDEMPOTENT_REPLAYED, KEY_RETENTION, REQUEST_ID, RETRY_AFTER,
};
use std::time::Duration;
use tower_http::cors::{AllowOrigin, CorsLayer};

/// The layer for these settings, or `None` when no page on another origin may call.
pub(crate) fn layer(cors: &crate::config::Cors, dev: bool) -> Option<CorsLayer> {
    if cors.origins.is_empty() && !dev {
        return None;
    }
    let names = |list: &[&str]| -> Vec<HeaderName> {
        list.iter()
            .filter_map(|n| HeaderName::from_bytes(n.as_bytes()).ok())
            .collect()
    };
    let listed = cors.origins.clone();
    let allowed = AllowOrigin::predicate(move |origin: &HeaderValue, _| {
        listed.contains(origin) || (dev && is_local_origin(origin.as_bytes()))
    });
    let sent: &[&str] = if dev {
        &[IDEMPOTENCY_KEY, REQUEST_ID, DEV_FAULT]
    } else {
        &[IDEMPOTENCY_KEY, REQUEST_ID]
    };
    Some(
        CorsLayer::new()
            .allow_origin(allowed)
            .allow_credentials(dev || cors.credentials)
            .allow_methods([Method::GET, Method::POST, Method::PATCH])
            .allow_headers(
                [header::CONTENT_TYPE, header::AUTHORIZATION]
                    .into_iter()
                    .chain(names(sent))
                    .collect::<Vec<_>>(),
            )
            .expose_headers(names(&[
                RETRY_AFTER,
                IDEMPOTENT_REPLAYED,
                KEY_RETENTION,
                REQUEST_ID,
            ]))
            .max_age(Duration::from_secs(600)),
    )
}

/// True for `http://localhost`, `http://127.0.0.1`, with an optional numeric port.
pub(crate) fn is_local_origin(origin: &[u8]) -> bool {
    let Ok(origin) = std::str::from_utf8(origin) else {
        return false;
    };
    let Some(rest) = origin
        .strip_prefix("http://localhost")
        .or_else(|| origin.strip_prefix("http://127.0.0.1"))
    else {
        return false;
    };
    match rest.strip_prefix(':') {
        None => rest.is_empty(),
        Some(port) => (1..=5).contains(&port.len()) && port.bytes().all(|b| b.is_ascii_digit()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn local_origins() {
        for ok in [
            "http://localhost:5173",
            "http://127.0.0.1:8080",
            "http://localhost",
        ] {
            assert!(is_local_origin(ok.as_bytes()), "{ok}");
        }
        for bad in [
            "https://localhost:5173",
            "http://localhost.evil.com",
            "http://127.0.0.1:80x",
            "http://localhost:",
            "null",
        ] {
            assert!(!is_local_origin(bad.as_bytes()), "{bad}");
        }
    }

    proptest! {
        #[test]
        fn origins_never_panic(s in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = is_local_origin(&s);
        }
    }
}
