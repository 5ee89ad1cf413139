//! The protocol crate, `docs/protocol.md` and the companion server's `openapi.json` cannot
//! drift: every header, path, body member and error code this crate defines must be named in
//! both documents. The lists come from the crate itself (`headers::ALL`, `paths::ALL`,
//! `ErrorCode::ALL`, and the members serde reads for each body type), so a name added here
//! without documenting it fails this test.

use payonce_protocol::body::paths;
use payonce_protocol::headers;
use payonce_protocol::*;
use serde::de::{self, Deserialize, Visitor};
use std::collections::BTreeSet;

const DOC: &str = include_str!("../../../docs/protocol.md");
const OPENAPI: &str = include_str!("../../server/openapi.json");

/// The member names `T`'s `Deserialize` accepts, with serde's renames applied: a deserializer
/// that answers `deserialize_struct` by recording the field list (and then refusing).
fn members<'de, T: Deserialize<'de>>() -> Vec<&'static str> {
    struct Probe<'a>(&'a mut Vec<&'static str>);
    impl<'de> de::Deserializer<'de> for Probe<'_> {
        type Error = de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("probe"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _name: &'static str,
            fields: &'static [&'static str],
            _visitor: V,
        ) -> Result<V::Value, Self::Error> {
            self.0.extend_from_slice(fields);
            Err(de::Error::custom("probe"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
            identifier ignored_any
        }
    }
    let mut out = Vec::new();
    let _ = T::deserialize(Probe(&mut out));
    assert!(
        !out.is_empty(),
        "{} is not a struct",
        std::any::type_name::<T>()
    );
    out
}

/// Every body member of the public API (requests, answers, problems).
fn body_members() -> BTreeSet<&'static str> {
    let lists = [
        members::<DevSessionRequest>(),
        members::<DevSessionResponse>(),
        members::<CatalogItem>(),
        members::<CartLine>(),
        members::<CreateOrderRequest>(),
        members::<UpdateCartRequest>(),
        members::<OrderLine>(),
        members::<Order>(),
        members::<PayRequest>(),
        members::<Payment>(),
        members::<PayResponse>(),
        members::<CancelRequest>(),
        members::<CancelResponse>(),
        members::<RefundResponse>(),
        members::<DevConfig>(),
        members::<MailboxQuery>(),
        members::<Mail>(),
        members::<Mailbox>(),
        members::<Problem>(),
        members::<NextAction>(),
        // ActionRequiredProblem flattens Problem (serde then reads it as a map, which the
        // probe cannot list): its own member is named here.
        vec!["next"],
    ];
    lists.into_iter().flatten().collect()
}

/// True when `doc` names `word` in backticks (alone or as the start of a code span such as
/// `` `POST /orders/{id}/pay` ``'s path part).
fn doc_names(word: &str) -> bool {
    let bytes = DOC.as_bytes();
    DOC.match_indices(word).any(|(at, _)| {
        let before = at.checked_sub(1).map(|i| bytes[i]);
        let after = bytes.get(at + word.len()).copied();
        matches!(before, Some(b'`' | b' ')) && matches!(after, Some(b'`' | b' ' | b'?'))
    })
}

fn openapi() -> serde_json::Value {
    serde_json::from_str(OPENAPI).expect("openapi.json parses")
}

/// Every `properties` name anywhere in the document.
fn openapi_properties(v: &serde_json::Value, out: &mut BTreeSet<String>) {
    match v {
        serde_json::Value::Object(map) => {
            if let Some(serde_json::Value::Object(props)) = map.get("properties") {
                out.extend(props.keys().cloned());
            }
            map.values().for_each(|v| openapi_properties(v, out));
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| openapi_properties(v, out)),
        _ => {}
    }
}

fn report(kind: &str, where_: &str, missing: &[&str]) {
    assert!(
        missing.is_empty(),
        "{kind} defined in crates/protocol but missing from {where_}: {missing:?}"
    );
}

#[test]
fn every_error_code_is_documented_and_in_openapi() {
    let spec = openapi();
    let enum_ = &spec["components"]["schemas"]["Problem"]["properties"]["code"]["enum"];
    let in_openapi: BTreeSet<&str> = enum_
        .as_array()
        .expect("Problem.code has an enum")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    let codes: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    let doc: Vec<&str> = codes.iter().copied().filter(|c| !doc_names(c)).collect();
    report("error codes", "docs/protocol.md", &doc);
    let api: Vec<&str> = codes
        .iter()
        .copied()
        .filter(|c| !in_openapi.contains(c))
        .collect();
    report("error codes", "openapi.json (Problem.code enum)", &api);
}

#[test]
fn every_header_is_documented_and_in_openapi() {
    let doc: Vec<&str> = headers::ALL
        .iter()
        .copied()
        .filter(|h| !doc_names(h))
        .collect();
    report("headers", "docs/protocol.md", &doc);
    let api: Vec<&str> = headers::ALL
        .iter()
        .copied()
        .filter(|h| !OPENAPI.contains(&format!("\"{h}\"")))
        .collect();
    report("headers", "openapi.json", &api);
}

#[test]
fn every_path_is_documented_and_in_openapi() {
    // The helpers spell the same templates as the list.
    for p in [
        paths::order("{id}"),
        paths::cart("{id}"),
        paths::pay("{id}"),
        paths::cancel("{id}"),
        paths::refund("{id}"),
    ] {
        assert!(
            paths::ALL.contains(&p.as_str()),
            "{p} missing from paths::ALL"
        );
    }
    let spec = openapi();
    let in_openapi = spec["paths"].as_object().expect("openapi has paths");
    let doc: Vec<&str> = paths::ALL
        .iter()
        .copied()
        .filter(|p| !doc_names(p))
        .collect();
    report("paths", "docs/protocol.md", &doc);
    let api: Vec<&str> = paths::ALL
        .iter()
        .copied()
        .filter(|p| !in_openapi.contains_key(*p))
        .collect();
    report("paths", "openapi.json", &api);
    // The operator's routes (docs/operating.md documents them; the protocol does not).
    let admin = payonce_protocol::admin::paths::ALL
        .iter()
        .chain([
            &payonce_protocol::admin::paths::PAGE,
            &payonce_protocol::admin::paths::DEV_OPERATOR,
        ])
        .copied()
        .filter(|p| !in_openapi.contains_key(*p))
        .collect::<Vec<_>>();
    report("operator paths", "openapi.json", &admin);
}

#[test]
fn every_body_member_is_documented_and_in_openapi() {
    let mut props = BTreeSet::new();
    openapi_properties(&openapi(), &mut props);
    let all = body_members();
    let doc: Vec<&str> = all.iter().copied().filter(|m| !doc_names(m)).collect();
    report("body members", "docs/protocol.md", &doc);
    let api: Vec<&str> = all
        .iter()
        .copied()
        .filter(|m| !props.contains(*m))
        .collect();
    report("body members", "openapi.json", &api);
}

/// Names found anywhere in the document are not enough for a problem's extension members
/// (`payment` is also a `PayResponse` member): each must be a property of the Problem schema.
#[test]
fn every_problem_member_is_in_the_openapi_problem_schema() {
    let spec = openapi();
    let props = spec["components"]["schemas"]["Problem"]["properties"]
        .as_object()
        .expect("Problem has properties");
    let missing: Vec<&str> = members::<Problem>()
        .into_iter()
        .filter(|m| !props.contains_key(*m))
        .collect();
    report("Problem members", "openapi.json (Problem)", &missing);
}

#[test]
fn the_probe_sees_renames_and_every_member() {
    // If the probe missed members, the tests above could not fail for them.
    assert_eq!(
        members::<PayRequest>(),
        ["orderVersion", "paymentMethodId", "extras"]
    );
    assert!(members::<Problem>().contains(&"type"));
    assert!(doc_names("Idempotency-Key"));
    assert!(!doc_names("NO_SUCH_CODE_ANYWHERE"));
}

/// Every header constant of `headers`, by its Rust name, so the SDK's source (which names
/// them, not their values) can be read. Held to `headers::ALL` below, so it cannot go stale.
const HEADER_CONSTS: &[(&str, &str)] = &[
    ("IDEMPOTENCY_KEY", headers::IDEMPOTENCY_KEY),
    ("IDEMPOTENT_REPLAYED", headers::IDEMPOTENT_REPLAYED),
    ("RETRY_AFTER", headers::RETRY_AFTER),
    ("KEY_RETENTION", headers::KEY_RETENTION),
    ("DEV_FAULT", headers::DEV_FAULT),
    ("WEBHOOK_SIGNATURE", headers::WEBHOOK_SIGNATURE),
    ("STRIPE_SIGNATURE", headers::STRIPE_SIGNATURE),
    ("SESSION_COOKIE", headers::SESSION_COOKIE),
    ("REQUEST_ID", headers::REQUEST_ID),
];

/// The SDK's Rust sources (`src/` at the workspace root), concatenated.
fn sdk_source() -> String {
    fn walk(dir: &std::path::Path, out: &mut String) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("dir entry").path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push_str(&std::fs::read_to_string(&p).expect("read a source file"));
            }
        }
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../src");
    let mut out = String::new();
    walk(&root, &mut out);
    out
}

/// The header values the SDK's source names right after `prefix` and before `close`
/// (`header(NAME)` for a read, `(NAME, value)` for a header it sets), through
/// `headers::NAME` or `payonce_protocol::headers::NAME`.
fn sdk_headers_after(src: &str, prefix: &str, close: char) -> BTreeSet<&'static str> {
    let mut found = BTreeSet::new();
    for (at, _) in src.match_indices(prefix) {
        let rest = src[at + prefix.len()..].trim_start();
        let rest = rest.strip_prefix("payonce_protocol::").unwrap_or(rest);
        let Some(rest) = rest.strip_prefix("headers::") else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || *c == '_')
            .collect();
        let closes = rest[name.len()..].starts_with(close);
        if let (true, Some((_, v))) = (closes, HEADER_CONSTS.iter().find(|(n, _)| *n == name)) {
            found.insert(*v);
        }
    }
    found
}

/// The code spans (`` `…` ``) of `text` that are payonce header names, with where each
/// starts.
fn header_spans(text: &str) -> Vec<(usize, &'static str)> {
    let mut at = 0;
    let mut out = Vec::new();
    for (i, part) in text.split('`').enumerate() {
        if i % 2 == 1 {
            if let Some(h) = headers::ALL.iter().copied().find(|h| *h == part) {
                out.push((at, h));
            }
        }
        at += part.len() + 1;
    }
    out
}

/// `doc`'s text from `start` (included) up to the first `end` after it.
fn between<'a>(doc: &'a str, start: &str, end: &str) -> &'a str {
    let from = doc
        .find(start)
        .unwrap_or_else(|| panic!("{start:?} not found"));
    let rest = &doc[from..];
    &rest[..rest.find(end).unwrap_or(rest.len())]
}

/// What a cross-origin backend must allow and expose, as a doc's CORS passage says it: the
/// header names from `allow` up to `expose`, and from `expose` to the end of that sentence.
fn cors_lists(passage: &str, allow: &str, expose: &str) -> [BTreeSet<&'static str>; 2] {
    let a = passage.find(allow).expect("the allow clause");
    let e = passage.find(expose).expect("the expose clause");
    let end = passage[e..].find(". ").map_or(passage.len(), |i| e + i);
    let spans = header_spans(passage);
    let within = |from: usize, to: usize| {
        spans
            .iter()
            .filter(|(at, _)| (from..to).contains(at))
            .map(|(_, h)| *h)
            .collect()
    };
    [within(a, e), within(e, end)]
}

#[test]
fn the_header_table_of_this_test_is_every_header() {
    let listed: BTreeSet<&str> = HEADER_CONSTS.iter().map(|(_, v)| *v).collect();
    let all: BTreeSet<&str> = headers::ALL.iter().copied().collect();
    assert_eq!(listed, all);
}

/// The SDK reads exactly `SDK_READS` off an answer and sets `SDK_SENDS` (and the dev-only
/// fault header) on a request: the lists the docs below are held to are the SDK's own.
#[test]
fn the_sdk_reads_and_sends_the_headers_the_protocol_lists() {
    let src = sdk_source();
    let reads = sdk_headers_after(&src, "header(", ')');
    let want: BTreeSet<&str> = headers::SDK_READS.iter().copied().collect();
    assert_eq!(
        reads, want,
        "the SDK's header reads (src/) vs headers::SDK_READS"
    );
    let sends = sdk_headers_after(&src, "(", ',');
    for h in headers::SDK_SENDS {
        assert!(sends.contains(h), "the SDK does not set {h}");
    }
    for h in &sends {
        assert!(
            headers::SDK_SENDS.contains(h) || *h == headers::DEV_FAULT,
            "the SDK sets {h}, missing from headers::SDK_SENDS"
        );
    }
}

#[test]
fn protocol_section_3_names_every_sdk_header_and_its_cors_rule() {
    let section = between(DOC, "## 3. Headers", "## 4.");
    let sdk: BTreeSet<&str> = headers::SDK_SENDS
        .iter()
        .chain(headers::SDK_READS)
        .copied()
        .collect();
    for h in sdk {
        assert!(
            section.contains(&format!("| `{h}` |")),
            "docs/protocol.md §3 has no row for {h}, a header the SDK sends or reads"
        );
    }
    let cors = between(section, "**CORS.**", "\n\n");
    let [allowed, exposed] = cors_lists(
        cors,
        "Access-Control-Allow-Headers",
        "Access-Control-Expose-Headers",
    );
    for h in headers::SDK_SENDS {
        assert!(allowed.contains(h), "§3's CORS rule does not allow {h}");
    }
    let want: BTreeSet<&str> = headers::SDK_READS.iter().copied().collect();
    assert_eq!(exposed, want, "§3's CORS expose list vs what the SDK reads");
}

#[test]
fn the_conformance_doc_allows_and_exposes_what_the_sdk_sends_and_reads() {
    let doc = include_str!("../../../docs/conformance.md");
    let passage = between(doc, "Cross-origin, the backend must", "\n\n");
    let [allowed, exposed] = cors_lists(passage, "allow", "expose");
    for h in headers::SDK_SENDS {
        assert!(
            allowed.contains(h),
            "docs/conformance.md does not allow {h}"
        );
    }
    let want: BTreeSet<&str> = headers::SDK_READS.iter().copied().collect();
    assert_eq!(
        exposed, want,
        "docs/conformance.md's expose list vs what the SDK reads"
    );
}

#[test]
fn every_reason_is_listed_with_its_code() {
    let table = between(DOC, "**`reason`**", "\n\n**");
    let row = |code: &str| {
        table
            .lines()
            .find(|l| l.starts_with(&format!("| `{code}` |")))
            .unwrap_or_else(|| panic!("no `reason` row for {code} in docs/protocol.md"))
    };
    let keys = row(ErrorCode::IdempotencyKeyInvalid.as_str());
    for e in KeyError::ALL {
        assert!(keys.contains(&format!("`{}`", e.reason())), "{e:?}");
    }
    let hooks = row(ErrorCode::WebhookSignatureInvalid.as_str());
    for r in payonce_protocol::problem::reason::WEBHOOK_SIGNATURE {
        assert!(hooks.contains(&format!("`{r}`")), "reason {r}");
    }
}
