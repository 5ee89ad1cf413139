//! What happened to an order, from the store alone (docs/operating.md): the timeline that
//! `GET /admin/orders/{id}/timeline` answers and `payonce-server timeline ORDER_ID` prints,
//! the dispute evidence, the look-ups and the review queue. Read only; the operator's read is
//! journaled by the edge (`src/http/admin.rs`).

use crate::store::journal::{self as db, By, Row};
use payonce_protocol::admin::{actor, answer, kind, member};
use serde_json::{json, Value};
use sqlx::AnyPool;

/// The order's timeline, or `None` when no such order exists (past retention, or never).
pub(crate) async fn timeline(pool: &AnyPool, id: &str) -> sqlx::Result<Option<Value>> {
    let Some(order) = db::order(pool, id).await? else {
        return Ok(None);
    };
    let journal = db::of_order(pool, id).await?;
    let audit = db::audit(pool, id).await?;
    Ok(Some(json!({
        (answer::ORDER): order,
        (answer::ATTEMPTS): db::attempts(pool, id).await?,
        (answer::PAYMENTS): db::payments(pool, id).await?,
        (answer::REFUNDS): db::refunds(pool, id).await?,
        (answer::MAILS): db::mails(pool, id).await?,
        (answer::EVENTS): events(journal, audit),
    })))
}

/// The journal and audit rows as one list in time order, each marked with its source; at
/// the same instant the journal's rows come in the order they happened (`detail.seq`: a
/// request's entry and its provider calls are written when it is answered, after the
/// decisions of its transactions), then the audit rows of the state changes they caused.
fn events(journal: Vec<Row>, audit: Vec<Value>) -> Vec<Value> {
    let mut all: Vec<(i64, u8, u64, Value)> = journal
        .into_iter()
        .map(|r| {
            let seq = r.detail[member::SEQ].as_u64().unwrap_or(0);
            let mut v = serde_json::to_value(&r).unwrap_or(Value::Null);
            v[answer::SOURCE] = answer::SOURCE_JOURNAL.into();
            (r.at, 0, seq, v)
        })
        .collect();
    all.extend(audit.into_iter().map(|mut a| {
        let at = a["at"].as_i64().unwrap_or(0);
        a[answer::SOURCE] = answer::SOURCE_AUDIT.into();
        (at, 1, 0, a)
    }));
    all.sort_by_key(|(at, source, seq, _)| (*at, *source, *seq));
    all.into_iter().map(|(_, _, _, v)| v).collect()
}

/// One JSON document for a dispute answer: the checkout the customer confirmed (lines,
/// amount, currency, version), the key that paid with the inputs its fingerprint binds,
/// each request of that key with its time and answer, the provider's ids, the receipt
/// mails and the refund history. `None`: no such order.
pub(crate) async fn evidence(pool: &AnyPool, id: &str) -> sqlx::Result<Option<Value>> {
    let Some(t) = timeline(pool, id).await? else {
        return Ok(None);
    };
    let attempts = t[answer::ATTEMPTS].as_array().cloned().unwrap_or_default();
    let paid_by = t[answer::PAYMENTS][0]["attemptId"]
        .as_str()
        .map(str::to_owned);
    let confirmed = attempts
        .iter()
        .find(|a| paid_by.is_some() && a["id"].as_str() == paid_by.as_deref())
        .cloned();
    let key = confirmed.as_ref().and_then(|a| a["key"].as_str());
    let requests: Vec<&Value> = t[answer::EVENTS]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e[answer::SOURCE] == answer::SOURCE_JOURNAL && e["actor"] == actor::REQUEST)
        .filter(|e| {
            [kind::PAY, kind::CANCEL, kind::REFUND]
                .map(Value::from)
                .contains(&e["kind"])
        })
        .filter(|e| key.is_none() || e["key"].as_str() == key)
        .collect();
    let mut provider_ids: Vec<String> = t[answer::EVENTS]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["providerId"].as_str().map(str::to_owned))
        .collect();
    // A call about an attempt whose object the answer did not name carries its provider key:
    // not a provider object.
    let keys: Vec<&str> = attempts
        .iter()
        .filter_map(|a| a["providerKey"].as_str())
        .collect();
    provider_ids.retain(|p| !keys.contains(&p.as_str()));
    provider_ids.sort();
    provider_ids.dedup();
    let o = &t[answer::ORDER];
    Ok(Some(json!({
        (answer::ORDER): {
            "id": o["id"], "userId": o["userId"], "status": o["status"],
            "version": o["version"], "items": o["items"], "coupon": o["coupon"],
            "subtotal": o["subtotal"], "discount": o["discount"],
            "amount": o["amount"], "currency": o["currency"], "createdAt": o["createdAt"],
        },
        (answer::CONFIRMED_ATTEMPT): confirmed,
        (answer::REQUESTS): requests,
        (answer::PROVIDER_IDS): provider_ids,
        (answer::PAYMENTS): t[answer::PAYMENTS],
        (answer::MAILS): t[answer::MAILS],
        (answer::REFUNDS): t[answer::REFUNDS],
    })))
}

/// The journal rows found by `by`, and the orders they name.
pub(crate) async fn lookup(pool: &AnyPool, by: By, value: &str) -> sqlx::Result<Value> {
    let rows = db::lookup(pool, by, value).await?;
    let mut orders: Vec<&str> = rows.iter().filter_map(|r| r.order_id.as_deref()).collect();
    orders.sort_unstable();
    orders.dedup();
    Ok(json!({
        (answer::ORDERS): orders,
        (answer::ENTRIES): rows,
        (answer::LIMIT): db::READ_LIMIT,
    }))
}

/// The review queue, each with the latest reason the audit trail gives and its age at `now`.
pub(crate) async fn reviews(pool: &AnyPool, now: i64) -> sqlx::Result<Value> {
    let mut list = db::reviews(pool).await?;
    for r in &mut list {
        let entity = r["attemptId"].as_str().or(r["orderId"].as_str());
        let reason = match entity {
            Some(e) => db::last_reason(pool, e).await?,
            None => None,
        };
        let since = r["since"].as_i64().unwrap_or(now);
        r[answer::REASON] = reason.into();
        r[answer::AGE_MS] = (now - since).max(0).into();
    }
    Ok(json!({ (answer::REVIEWS): list }))
}

/// The timeline as text, one line per event, for an operator at a shell.
pub(crate) fn text(t: &Value) -> String {
    let o = &t[answer::ORDER];
    let mut out = format!(
        "order {} user {} status {} version {} amount {} {}\n",
        o["id"].as_str().unwrap_or("?"),
        o["userId"].as_str().unwrap_or("?"),
        o["status"].as_str().unwrap_or("?"),
        o["version"],
        o["amount"],
        o["currency"].as_str().unwrap_or("?"),
    );
    for a in t[answer::ATTEMPTS].as_array().into_iter().flatten() {
        out += &format!(
            "attempt {} key {} status {} version {} amount {} provider {}\n",
            a["id"].as_str().unwrap_or("?"),
            a["key"].as_str().unwrap_or("?"),
            a["status"].as_str().unwrap_or("?"),
            a["orderVersion"],
            a["amount"],
            a["providerRef"]
                .as_str()
                .or(a["chargeId"].as_str())
                .unwrap_or("-"),
        );
    }
    let mut last: Option<i64> = None;
    for e in t[answer::EVENTS].as_array().into_iter().flatten() {
        let at = e["at"].as_i64().unwrap_or(0);
        let gap = last.map_or(String::new(), |l| format!("+{}ms", at - l));
        last = Some(at);
        let what = match e[answer::SOURCE].as_str() {
            Some(answer::SOURCE_AUDIT) => format!(
                "audit {} {} {} -> {} ({})",
                e["entity"].as_str().unwrap_or("?"),
                e["entityId"].as_str().unwrap_or("?"),
                e["from"].as_str().unwrap_or("-"),
                e["to"].as_str().unwrap_or("?"),
                e["reason"].as_str().unwrap_or(""),
            ),
            _ => format!(
                "{} {} request {} key {} provider {} {}",
                e["actor"].as_str().unwrap_or("?"),
                e["kind"].as_str().unwrap_or("?"),
                e["requestId"].as_str().unwrap_or("-"),
                e["key"].as_str().unwrap_or("-"),
                e["providerId"].as_str().unwrap_or("-"),
                e["detail"],
            ),
        };
        out += &format!("{at} {gap:>9} {what}\n");
    }
    out
}
