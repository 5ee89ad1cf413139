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
