//! The operator API (`/admin/…`; docs/operating.md): behind the operator credential
//! ([`Operator`]), every read and action journaled. The reads themselves are
//! `src/ops/timeline.rs`; the actions are a user's erasure (`src/store/erase.rs`) and the
//! resolve of a review flag (`src/ops/review.rs`).

use crate::auth::Operator;
use crate::error::{AppError, AppResult};
use crate::http::extract::{ApiJson, PathId};
use crate::http::journal::RequestId;
use crate::journal::{scoped, Scope};
use crate::ops::{review, timeline};
use crate::state::{AppState, OpsState};
use crate::store::journal::By;
use axum::extract::{RawQuery, State};
use axum::http::{header, Uri};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use payonce_protocol::admin::{actor, lookup, paths, resolve};
use payonce_protocol::ErrorCode;
use serde_json::{json, Value};

/// Longest accepted look-up value: every id and key is far shorter.
const MAX_VALUE_LEN: usize = 255;

/// The operator routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route(paths::PAGE, get(page))
        .route(&paths::timeline("{id}"), get(order_timeline))
        .route(&paths::evidence("{id}"), get(order_evidence))
        .route(paths::LOOKUP, get(find))
        .route(paths::REVIEWS, get(reviews))
        .route(&paths::erase_user("{id}"), post(erase_user))
        .route(&paths::resolve("{id}"), post(resolve_review))
}

/// The page for people (`assets/admin.html`): no data in it, so no credential to load it;
/// its script asks the routes below with the token the operator types. The policy lets it
/// talk to this origin only. The one thing the server fills in is where the provider's
/// dashboard shows a payment (Stripe's test or live mode), for the page's links.
async fn page(State(state): State<AppState>) -> impl axum::response::IntoResponse {
    const PAGE: &str = include_str!("../../assets/admin.html");
    const SLOT: &str = "<meta name=\"payonce-dashboard\" content=\"\">";
    let dashboard = state.ops.provider.dashboard();
    let page = PAGE.replace(
        SLOT,
        &format!("<meta name=\"payonce-dashboard\" content=\"{dashboard}\">"),
    );
    const POLICY: &str = "default-src 'none'; script-src 'unsafe-inline'; \
        style-src 'unsafe-inline'; connect-src 'self'; frame-ancestors 'none'";
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, POLICY),
            (header::CACHE_CONTROL, "no-store"),
        ],
        page,
    )
}

/// Journals the operator's read of `uri` (path and query), before the read: its commit comes
/// with or after every entry this instance queued before it (`Scope::flush` in
/// src/journal.rs), so the read sees the requests answered until now.
async fn journal_read(state: &AppState, id: Option<Extension<RequestId>>, uri: &Uri) {
    let route = uri.path_and_query().map_or(uri.path(), |p| p.as_str());
    let id = id.as_ref().map(|Extension(r)| r.0.as_str());
    crate::journal::operator_read(&state.ops.store, state.ops.clock.now_ms(), id, route).await;
}

async fn order_timeline(
    State(state): State<AppState>,
    _: Operator,
    rid: Option<Extension<RequestId>>,
    uri: Uri,
    PathId(id): PathId,
) -> AppResult<Json<Value>> {
    journal_read(&state, rid, &uri).await;
    let t = timeline::timeline(state.ops.store.pool(), &id).await?;
    t.map(Json)
        .ok_or_else(|| AppError::code(ErrorCode::OrderNotFound))
}

async fn order_evidence(
    State(state): State<AppState>,
    _: Operator,
    rid: Option<Extension<RequestId>>,
    uri: Uri,
    PathId(id): PathId,
) -> AppResult<Json<Value>> {
    journal_read(&state, rid, &uri).await;
    let e = timeline::evidence(state.ops.store.pool(), &id).await?;
    e.map(Json)
        .ok_or_else(|| AppError::code(ErrorCode::OrderNotFound))
}

/// `GET /admin/lookup?key=…` (or `provider_id`, `request_id`, `user`): exactly one.
async fn find(
    State(state): State<AppState>,
    _: Operator,
    rid: Option<Extension<RequestId>>,
    uri: Uri,
    RawQuery(query): RawQuery,
) -> AppResult<Json<Value>> {
    let (by, value) = lookup_query(query.as_deref().unwrap_or(""))?;
    journal_read(&state, rid, &uri).await;
    Ok(Json(
        timeline::lookup(state.ops.store.pool(), by, &value).await?,
    ))
}

/// The one look-up parameter of a query, or why the query is refused.
fn lookup_query(query: &str) -> AppResult<(By, String)> {
    let pairs: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let refuse = |why: String| AppError::detail(ErrorCode::InvalidRequest, why);
    let [(name, value)] = pairs.as_slice() else {
        return Err(refuse(format!(
            "give exactly one of {} as a query parameter",
            lookup::ALL.join(", ")
        )));
    };
    let by = match name.as_str() {
        lookup::KEY => By::Key,
        lookup::PROVIDER_ID => By::ProviderId,
        lookup::REQUEST_ID => By::RequestId,
        lookup::USER => By::User,
        other => {
            return Err(refuse(format!(
                "unknown look-up {other:?}; use one of {}",
                lookup::ALL.join(", ")
            )))
        }
    };
    if value.is_empty() || value.len() > MAX_VALUE_LEN || value.chars().any(char::is_control) {
        return Err(refuse(format!(
            "{name} must be 1..={MAX_VALUE_LEN} bytes without control characters"
        )));
    }
    Ok((by, value.clone()))
}

async fn reviews(
    State(state): State<AppState>,
    _: Operator,
    rid: Option<Extension<RequestId>>,
    uri: Uri,
) -> AppResult<Json<Value>> {
    journal_read(&state, rid, &uri).await;
    let now = state.ops.clock.now_ms();
    Ok(Json(timeline::reviews(state.ops.store.pool(), now).await?))
}

/// `POST /admin/users/{id}/erase`: the user's personal data erased (docs/deploy.md, "Erasing a
/// user"), the same statements and audit row as `payonce-server erase-user`; the answer and
/// the journal say what it changed. Erasing again changes nothing and answers zeros.
async fn erase_user(
    State(state): State<AppState>,
    _: Operator,
    rid: Option<Extension<RequestId>>,
    uri: Uri,
    axum::extract::Path(user): axum::extract::Path<String>,
) -> AppResult<Json<Value>> {
    if user.is_empty() || user.len() > MAX_VALUE_LEN || user.chars().any(char::is_control) {
        return Err(AppError::detail(
            ErrorCode::InvalidRequest,
            format!("the user id must be 1..={MAX_VALUE_LEN} bytes without control characters"),
        ));
    }
    let now = state.ops.clock.now_ms();
    let entry = payonce_rules::erase::entry(&user);
    let erased = crate::store::erase::erase_user(&state.ops.store, &user, &entry, now).await?;
    use payonce_protocol::admin::answer;
    let changed = json!({
        (answer::ORDER_ADDRESSES): erased.addresses,
        (answer::MAILS): erased.mails,
    });
    let id = rid.as_ref().map(|Extension(r)| r.0.as_str());
    crate::journal::operator_action(
        &state.ops.store,
        now,
        id,
        uri.path(),
        &user,
        changed.clone(),
    )
    .await;
    Ok(Json(
        json!({ (answer::USER): user, (answer::ERASED): changed }),
    ))
}

/// `POST /admin/reviews/{order_id}/resolve` with `{"note": …}`: the provider asked again and
/// the order's review flags settled from its answer (`src/ops/review.rs`); the note and the
/// outcome journaled. 409 `REVIEW_UNRESOLVED` when a flag stays.
async fn resolve_review(
    State(state): State<OpsState>,
    _: Operator,
    rid: Option<Extension<RequestId>>,
    uri: Uri,
    PathId(id): PathId,
    ApiJson(body): ApiJson<Value>,
) -> AppResult<Json<Value>> {
    let note = resolve_note(&body)?;
    let request_id = rid.as_ref().map(|Extension(r)| r.0.clone());
    // The provider calls the resolve makes are journaled as the operator's.
    let scope = Scope::immediate(
        actor::OPERATOR,
        request_id.as_deref(),
        state.store.clone(),
        state.clock.clone(),
    );
    let Some(r) = scoped(scope, review::resolve(&state, &id)).await? else {
        return Err(AppError::code(ErrorCode::OrderNotFound));
    };
    let done: Vec<Value> = r
        .done
        .iter()
        .map(|d| {
            json!({
                resolve::ATTEMPT_ID: d.attempt,
                resolve::OUTCOME: d.outcome,
                resolve::WHY: d.why,
            })
        })
        .collect();
    let detail = json!({
        resolve::NOTE: note,
        resolve::RESOLVED: done,
        resolve::UNRESOLVED: r.unresolved,
    });
    let now = state.clock.now_ms();
    let who = (&*id, r.user.as_str());
    let rid = request_id.as_deref();
    crate::journal::operator_resolve(&state.store, now, rid, uri.path(), who, detail).await;
    if let Some(why) = r.unresolved {
        return Err(AppError::detail(ErrorCode::ReviewUnresolved, why));
    }
    Ok(Json(
        json!({ resolve::ORDER_ID: &*id, resolve::RESOLVED: done }),
    ))
}

/// The resolve body's note: its one member, 1..=`NOTE_MAX` bytes of text.
fn resolve_note(body: &Value) -> AppResult<String> {
    let refuse = |why: String| AppError::detail(ErrorCode::InvalidRequest, why);
    let note = body
        .as_object()
        .filter(|o| o.len() == 1)
        .and_then(|o| o.get(resolve::NOTE))
        .and_then(Value::as_str);
    match note {
        Some(n) if !n.trim().is_empty() && n.len() <= resolve::NOTE_MAX => Ok(n.to_owned()),
        _ => Err(refuse(format!(
            "the body is one member, {:?}: a non-empty string of at most {} bytes",
            resolve::NOTE,
            resolve::NOTE_MAX
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lookup_takes_exactly_one_known_parameter() {
        assert_eq!(lookup_query("key=k1").unwrap().0, By::Key);
        assert_eq!(lookup_query("provider_id=pi_1").unwrap().0, By::ProviderId);
        for bad in ["", "key=a&user=b", "color=red", "key=", "user=%00x"] {
            let e = lookup_query(bad).unwrap_err().to_problem();
            assert_eq!(e.code, ErrorCode::InvalidRequest, "{bad}");
        }
    }
}
