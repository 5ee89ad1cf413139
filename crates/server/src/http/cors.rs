//! Who may call the API from a page on another origin: one rule for `--dev` and for
//! production. A production server grants exactly the `--cors-origin` origins (exact
//! match, no patterns), with credentials only under `--cors-credentials`; `--dev` adds any
//! `http://localhost[:port]` or `http://127.0.0.1[:port]` page, with credentials, and the
//! dev fault header. Either way a preflight allows exactly the request headers the SDK
//! sends (`Content-Type`, `Idempotency-Key`, `X-Request-Id`, and the app's `Authorization`), and a page may
//! read the headers a client acts on (`Retry-After`, `Idempotent-Replayed`,
//! `Idempotency-Key-Retention`, `X-Request-Id`). With neither, no CORS header is ever sent.

use axum::http::{header, HeaderName, HeaderValue, Method};
use clap::Args;
use payonce_protocol::headers::{
    DEV_FAULT, IDEMPOTENCY_KEY, IDEMPOTENT_REPLAYED, KEY_RETENTION, REQUEST_ID, RETRY_AFTER,
};
use std::time::Duration;
use tower_http::cors::{AllowOrigin, CorsLayer};

/// The CORS flags.
#[derive(Debug, Clone, Args)]
pub struct CorsArgs {
    /// An origin (`https://shop.example`, `http://127.0.0.1:5173`: scheme, host and port
    /// only) whose pages may call the API; repeatable, matched exactly. Without it (and
    /// without `--dev`) the server sends no CORS headers: only same-origin pages can call it.
    #[arg(
        long = "cors-origin",
        env = "PAYONCE_CORS_ORIGINS",
        value_delimiter = ','
    )]
    pub origins: Vec<String>,
    /// Let those pages send cookies (`Access-Control-Allow-Credentials: true`), as the SDK
    /// does by default (`credentials: "include"`). Without it, give the SDK
    /// `credentials: "omit"` and authenticate with `Authorization`.
    #[arg(long = "cors-credentials", env = "PAYONCE_CORS_CREDENTIALS")]
    pub credentials: bool,
}

/// [`CorsArgs`], checked.
#[derive(Debug, Clone, Default)]
pub(crate) struct Cors {
    origins: Vec<HeaderValue>,
    credentials: bool,
}

impl Cors {
    /// Checks every origin; the error names the first bad one.
    pub(crate) fn from_args(args: &CorsArgs) -> Result<Self, String> {
        let origins = args
            .origins
            .iter()
            .map(|o| origin(o).ok_or_else(|| format!("--cors-origin {o:?}: write an origin as scheme://host[:port] (http or https, no path), e.g. https://shop.example")))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            origins,
            credentials: args.credentials,
        })
    }
}

/// `text` when it is an origin exactly as a browser sends it in `Origin` (so an exact match
/// can ever succeed): `http(s)://host[:port]`, lower case, no default port, no path.
fn origin(text: &str) -> Option<HeaderValue> {
    let url = reqwest::Url::parse(text).ok()?;
    let serialized = url.origin().ascii_serialization();
    let web = matches!(url.scheme(), "http" | "https");
    (web && serialized == text).then(|| HeaderValue::from_str(text).ok())?
}

/// The layer for these settings, or `None` when no page on another origin may call.
pub(crate) fn layer(cors: &Cors, dev: bool) -> Option<CorsLayer> {
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

    #[test]
    fn only_origins_a_browser_can_send_are_accepted() {
        for ok in [
            "https://shop.example",
            "http://127.0.0.1:5173",
            "https://a.b.example:8443",
        ] {
            assert!(origin(ok).is_some(), "{ok}");
        }
        for bad in [
            "*",
            "null",
            "shop.example",
            "https://shop.example/",
            "https://shop.example/checkout",
            "https://Shop.example",
            "https://shop.example:443",
            "ftp://shop.example",
            "https://user@shop.example",
        ] {
            assert!(origin(bad).is_none(), "{bad}");
        }
        let args = CorsArgs {
            origins: vec![
                "https://shop.example".into(),
                "https://shop.example/".into(),
            ],
            credentials: false,
        };
        let err = Cors::from_args(&args).unwrap_err();
        assert!(err.contains("\"https://shop.example/\""), "{err}");
    }

    proptest! {
        #[test]
        fn origins_never_panic(s in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = is_local_origin(&s);
            if let Ok(text) = std::str::from_utf8(&s) {
                let _ = origin(text);
            }
        }
    }
}
