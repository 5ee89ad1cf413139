//! The provider's HTTP API. Handlers validate input, call one store method, and map its
//! outcome to a response; every error is an RFC 9457 problem.

use crate::store::{ChargeOutcome, CompleteOutcome, EndRefundOutcome, RefundOutcome};
use crate::MockProvider;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use payonce_protocol::headers::{IDEMPOTENCY_KEY, IDEMPOTENT_REPLAYED, RETRY_AFTER};
use payonce_protocol::problem::PROBLEM_CONTENT_TYPE;
use payonce_protocol::provider::{
    methods, paths, Charge, ChargeRequest, ChargeStatus, CompleteRequest, Ledger, LedgerQuery,
    RedeliverQuery, Redelivered, RefundList,
};
use payonce_protocol::{ErrorCode, IdempotencyKey, Problem};
use serde::Serialize;
use tower_http::cors::{AllowOrigin, CorsLayer};

pub(crate) fn router(provider: MockProvider) -> Router {
    Router::new()
        .route(paths::CHARGES, post(create_charge))
        // A wildcard, not one segment: provider keys may contain `/` (the key alphabet
        // allows it), and a lookup that wrongly answered 404 would tell reconciliation
        // "never charged". Raw and percent-encoded slashes both work.
        .route(&paths::charge_by_key("{*provider_key}"), get(charge_by_key))
        .route(&paths::charge("{charge_id}"), get(charge_by_id))
        .route(
            &paths::refunds("{charge_id}"),
            post(create_refund).get(list_refunds),
        )
        .route(
            &paths::dev_dashboard_refund("{charge_id}"),
            post(dashboard_refund),
        )
        .route(
            &paths::dev_refund_end("{refund_id}", true),
            post(|p: State<MockProvider>, id: Path<String>| end_refund(p, id, true)),
        )
        .route(
            &paths::dev_refund_end("{refund_id}", false),
            post(|p: State<MockProvider>, id: Path<String>| end_refund(p, id, false)),
        )
        .route(&paths::charge_action("{charge_id}"), get(action_page))
        .route(
            &paths::charge_complete("{charge_id}"),
            post(complete_charge),
        )
        .route(&paths::charge_cancel("{charge_id}"), post(cancel_charge))
        .route(paths::LEDGER, get(ledger))
        .route(paths::DEV_REDELIVER_WEBHOOKS, post(redeliver))
        .route(paths::DEV_RESET, post(reset))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(local_cors())
        .with_state(provider)
}

/// The demo page (Vite on `http://localhost:*`) shows the ledger and drives the dev
/// controls from the browser. Only local origins: this is a dev tool, not a public API.
fn local_cors() -> CorsLayer {
    CorsLayer::new()
        .allow_origin(AllowOrigin::predicate(|origin: &HeaderValue, _| {
            is_local_origin(origin.as_bytes())
        }))
        .allow_methods([Method::GET, Method::POST])
        .allow_headers(
            std::iter::once(header::CONTENT_TYPE)
                .chain(header_name(IDEMPOTENCY_KEY))
                .collect::<Vec<_>>(),
        )
        .expose_headers(
            header_name(IDEMPOTENT_REPLAYED)
                .into_iter()
                .collect::<Vec<_>>(),
        )
}

/// The protocol spells header names in their usual mixed case; `from_bytes` lowercases.
fn header_name(name: &str) -> Option<HeaderName> {
    HeaderName::from_bytes(name.as_bytes()).ok()
}

fn is_local_origin(origin: &[u8]) -> bool {
    ["http://localhost", "http://127.0.0.1"].iter().any(|host| {
        origin.strip_prefix(host.as_bytes()).is_some_and(|rest| {
            rest.is_empty()
                || rest
                    .strip_prefix(b":")
                    .is_some_and(|port| !port.is_empty() && port.iter().all(u8::is_ascii_digit))
        })
    })
}

/// An error answer: a problem served as `application/problem+json` with its status.
#[derive(Debug)]
pub(crate) struct ApiError(Box<Problem>);

impl ApiError {
    fn new(code: ErrorCode) -> Self {
        Self(Box::new(Problem::new(code)))
    }
    fn detail(mut self, detail: impl Into<String>) -> Self {
        self.0.detail = Some(detail.into());
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.0.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(PROBLEM_CONTENT_TYPE),
        );
        if let Some(secs) = self.0.retry_after {
            headers.insert(RETRY_AFTER, HeaderValue::from(secs));
        }
        (status, headers, json_bytes(&self.0)).into_response()
    }
}

impl From<crate::ProviderError> for ApiError {
    fn from(e: crate::ProviderError) -> Self {
        // The detail (a path, an OS error) is logged, never sent.
        tracing::error!(error = %e, "provider state could not be saved");
        Self(Box::new(
            Problem::new(ErrorCode::StoreUnavailable)
                .with_detail("the provider could not save its ledger; retry with the same key")
                .with_retry_after(1),
        ))
    }
}

fn json_bytes<T: Serialize>(value: &T) -> Vec<u8> {
    // Our own plain structs always serialize.
    serde_json::to_vec(value).unwrap_or_default()
}

fn json(status: StatusCode, value: &impl Serialize, replayed: bool) -> Response {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if replayed {
        headers.insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    }
    (status, headers, json_bytes(value)).into_response()
}

/// The provider key from `Idempotency-Key`, validated by the protocol's one rule.
fn idempotency_key(headers: &HeaderMap) -> Result<IdempotencyKey, ApiError> {
    let value = headers
        .get(IDEMPOTENCY_KEY)
        .ok_or_else(|| ApiError::new(ErrorCode::IdempotencyKeyMissing))?;
    let invalid = |reason: &str| {
        let mut problem = Problem::new(ErrorCode::IdempotencyKeyInvalid);
        problem.reason = Some(reason.to_owned());
        ApiError(Box::new(problem))
    };
    let text = value.to_str().map_err(|_| invalid("invalid_char"))?;
    IdempotencyKey::parse(text).map_err(|e| invalid(e.reason()))
}

/// Parses a JSON body, insisting on `application/json` (with optional parameters).
fn json_body<T: serde::de::DeserializeOwned>(
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"));
    if !is_json {
        return Err(ApiError::new(ErrorCode::UnsupportedMediaType));
    }
    let body = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(ErrorCode::PayloadTooLarge)
        } else {
            ApiError::new(ErrorCode::InvalidRequest).detail("the body could not be read")
        }
    })?;
    serde_json::from_slice(&body)
        .map_err(|e| ApiError::new(ErrorCode::InvalidRequest).detail(format!("invalid body: {e}")))
}

fn validate_charge(req: &ChargeRequest) -> Result<(), ApiError> {
    let bad = |detail: &str| Err(ApiError::new(ErrorCode::InvalidRequest).detail(detail));
    if req.amount <= 0 {
        return bad("amount must be a positive integer in minor units");
    }
    if req.currency.len() != 3 || !req.currency.bytes().all(|b| b.is_ascii_uppercase()) {
        return bad("currency must be a three-letter ISO 4217 code in upper case");
    }
    if req.order_id.is_empty() || req.order_id.len() > 255 {
        return bad("orderId must be 1 to 255 bytes");
    }
    if !methods::ALL.contains(&req.payment_method_id.as_str()) {
        return bad(&format!(
            "unknown paymentMethodId; use one of the test methods ({})",
            methods::ALL.join(", ")
        ));
    }
    Ok(())
}

fn charge_response(charge: &Charge, replayed: bool) -> Response {
    let status = match (charge.status, replayed) {
        (ChargeStatus::Declined, _) => StatusCode::PAYMENT_REQUIRED,
        // Recorded, but no outcome until the customer completes `nextActionUrl`.
        (ChargeStatus::RequiresAction, _) => StatusCode::ACCEPTED,
        (_, true) => StatusCode::OK,
        (_, false) => StatusCode::CREATED,
    };
    json(status, charge, replayed)
}

async fn create_charge(
    State(p): State<MockProvider>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let key = idempotency_key(&headers)?;
    let request: ChargeRequest = json_body(&headers, body)?;
    validate_charge(&request)?;
    let base = action_base(&headers);
    match p.inner.store.charge(key.as_str(), &request, &base)? {
        ChargeOutcome::Created { charge, event } => {
            if let Some(event) = event {
                p.send_webhook(event).await;
            }
            // The charge is already in the ledger: a caller that gives up before these
            // delays end has been charged without knowing it, which is the point.
            let delay = match request.payment_method_id.as_str() {
                methods::SLOW => p.inner.config.slow_delay,
                methods::TIMEOUT => p.inner.config.timeout_delay,
                _ => std::time::Duration::ZERO,
            };
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            Ok(charge_response(&charge, false))
        }
        ChargeOutcome::Replayed(charge) => Ok(charge_response(&charge, true)),
        ChargeOutcome::Transient => Err(ApiError(Box::new(
            Problem::new(ErrorCode::StoreUnavailable)
                .with_detail("transient provider failure (pm_card_transient): nothing was charged; retry with the same key")
                .with_retry_after(1),
        ))),
        ChargeOutcome::KeyReused => Err(ApiError::new(ErrorCode::KeyReusedWithDifferentDetails)
            .detail("this provider key was used for a different charge request")),
    }
}

async fn charge_by_key(
    State(p): State<MockProvider>,
    Path(provider_key): Path<String>,
) -> Result<Response, ApiError> {
    match p.inner.store.charge_by_key(&provider_key) {
        Some(charge) => Ok(json(StatusCode::OK, &charge, false)),
        None => Err(ApiError::new(ErrorCode::PaymentNotFound)
            .detail("no charge was ever created with this provider key")),
    }
}

/// One charge by its id: what a PSP's dashboard shows of a payment (the operator page links
/// here, crates/server/assets/admin.html).
async fn charge_by_id(
    State(p): State<MockProvider>,
    Path(charge_id): Path<String>,
) -> Result<Response, ApiError> {
    match p.inner.store.charge_by_id(&charge_id) {
        Some(charge) => Ok(json(StatusCode::OK, &charge, false)),
        None => Err(ApiError::new(ErrorCode::PaymentNotFound).detail("no such charge")),
    }
}

async fn create_refund(
    State(p): State<MockProvider>,
    Path(charge_id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    // A full refund: the body is not read.
    let key = idempotency_key(&headers)?;
    let outcome = p.inner.store.refund(&charge_id, key.as_str())?;
    refund_response(&p, outcome).await
}

/// A refund made in the dashboard, not through the API (dev only): how a merchant's staff
/// refunds a charge by hand, which the merchant's server must learn of.
async fn dashboard_refund(
    State(p): State<MockProvider>,
    Path(charge_id): Path<String>,
) -> Result<Response, ApiError> {
    let outcome = p.inner.store.dashboard_refund(&charge_id)?;
    refund_response(&p, outcome).await
}

async fn refund_response(p: &MockProvider, outcome: RefundOutcome) -> Result<Response, ApiError> {
    match outcome {
        RefundOutcome::Created { refund, event } => {
            if let Some(event) = event {
                p.send_webhook(event).await;
            }
            Ok(json(StatusCode::CREATED, &refund, false))
        }
        RefundOutcome::Replayed(refund) => Ok(json(StatusCode::OK, &refund, true)),
        RefundOutcome::ChargeNotFound => {
            Err(ApiError::new(ErrorCode::PaymentNotFound).detail("no such charge"))
        }
        RefundOutcome::NotRefundable(status) => {
            let why = match status {
                ChargeStatus::Declined => "the charge was declined; nothing to refund",
                ChargeStatus::RequiresAction => {
                    "the charge awaits the customer's action; nothing to refund"
                }
                _ => "the charge is already refunded",
            };
            Err(ApiError::new(ErrorCode::RefundNotAllowed).detail(why))
        }
        RefundOutcome::Refused => Err(ApiError::new(ErrorCode::RefundNotAllowed)
            .detail("the issuer refuses refunds to this card (pm_card_refund_refused)")),
        RefundOutcome::KeyReused => Err(ApiError::new(ErrorCode::KeyReusedWithDifferentDetails)
            .detail("this refund key was used for another charge")),
    }
}

/// A pending refund ended by its bank (dev only): the refund as it ends, its event sent;
/// one that ended already is answered as it is (200, no event).
async fn end_refund(
    State(p): State<MockProvider>,
    Path(refund_id): Path<String>,
    succeeded: bool,
) -> Result<Response, ApiError> {
    match p.inner.store.end_refund(&refund_id, succeeded)? {
        EndRefundOutcome::Ended { refund, event } => {
            p.send_webhook(event).await;
            Ok(json(StatusCode::OK, &refund, false))
        }
        EndRefundOutcome::NotPending(refund) => Ok(json(StatusCode::OK, &refund, true)),
        EndRefundOutcome::NotFound => {
            Err(ApiError::new(ErrorCode::PaymentNotFound).detail("no such refund"))
        }
    }
}

async fn list_refunds(
    State(p): State<MockProvider>,
    Path(charge_id): Path<String>,
) -> Result<Response, ApiError> {
    match p.inner.store.refunds_of(&charge_id) {
        Some(refunds) => Ok(json(StatusCode::OK, &RefundList { refunds }, false)),
        None => Err(ApiError::new(ErrorCode::PaymentNotFound).detail("no such charge")),
    }
}

/// The provider's origin as this caller reached it, where the action page of a new charge
/// is served. The merchant server calls the provider at the URL the customer's browser can
/// open too (both on this machine), like a PSP's public `next_action` URL.
fn action_base(headers: &HeaderMap) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .filter(|h| {
            !h.is_empty()
                && h.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b))
        })
        .unwrap_or("127.0.0.1");
    format!("http://{host}")
}

/// `GET /charges/{id}/action[?returnUrl=]`: the customer's challenge page, one button per
/// outcome, posting the form to `POST /charges/{id}/complete`.
async fn action_page(
    State(p): State<MockProvider>,
    Path(charge_id): Path<String>,
    query: Result<Query<ActionPageQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(bad_query)?;
    let return_url = local_return_url(query.return_url.as_deref())?;
    let Some(charge) = p.inner.store.charge_by_id(&charge_id) else {
        return Err(ApiError::new(ErrorCode::PaymentNotFound).detail("no such charge"));
    };
    if charge.payment_method_id != methods::THREE_DS {
        return Err(ApiError::new(ErrorCode::InvalidRequest)
            .detail("this charge does not require any action"));
    }
    let action = html_escape(&paths::charge_complete(&charge.id));
    let hidden = return_url
        .map(|u| {
            format!(
                r#"<input type="hidden" name="returnUrl" value="{}">"#,
                html_escape(u)
            )
        })
        .unwrap_or_default();
    let amount = format!(
        "{}.{:02} {}",
        charge.amount / 100,
        charge.amount % 100,
        html_escape(&charge.currency)
    );
    let body = if charge.status == ChargeStatus::RequiresAction {
        format!(
            r#"<p>Confirm the payment of <strong id="amount">{amount}</strong> for order <code>{order}</code>.</p>
<form method="post" action="{action}">{hidden}
<button type="submit" name="outcome" value="succeeded" id="confirm">Confirm payment</button>
<button type="submit" name="outcome" value="declined" id="fail">Fail authentication</button>
</form>"#,
            order = html_escape(&charge.order_id),
        )
    } else {
        format!(
            r#"<p id="done">This payment is already {}.</p>"#,
            status_word(charge.status)
        )
    };
    Ok(html(StatusCode::OK, &body))
}

/// `POST /charges/{id}/complete`: JSON [`CompleteRequest`] (answers the charge) or the
/// action page's form (answers a page, or `303` to its `returnUrl`). The first completion
/// decides; a repeat answers the charge as it is with `Idempotent-Replayed: true`.
async fn complete_charge(
    State(p): State<MockProvider>,
    Path(charge_id): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let is_form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| {
            m.trim()
                .eq_ignore_ascii_case("application/x-www-form-urlencoded")
        });
    let request: CompleteRequest = if is_form {
        let body = body.map_err(|_| {
            ApiError::new(ErrorCode::InvalidRequest).detail("the body could not be read")
        })?;
        serde_urlencoded::from_bytes(&body).map_err(|e| {
            ApiError::new(ErrorCode::InvalidRequest).detail(format!("invalid form: {e}"))
        })?
    } else {
        json_body(&headers, body)?
    };
    let return_url = local_return_url(request.return_url.as_deref())?;
    let (charge, replayed) = match p.inner.store.complete(&charge_id, request.outcome)? {
        CompleteOutcome::Completed { charge, event } => {
            p.send_webhook(event).await;
            (charge, false)
        }
        CompleteOutcome::AlreadyCompleted(charge) => (charge, true),
        CompleteOutcome::ChargeNotFound => {
            return Err(ApiError::new(ErrorCode::PaymentNotFound).detail("no such charge"))
        }
        CompleteOutcome::NoActionRequired => {
            return Err(ApiError::new(ErrorCode::InvalidRequest)
                .detail("this charge does not require any action"))
        }
    };
    if !is_form {
        return Ok(json(StatusCode::OK, &charge, replayed));
    }
    if let Some(url) = return_url {
        let mut headers = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_str(url) {
            headers.insert(header::LOCATION, v);
        }
        return Ok((StatusCode::SEE_OTHER, headers).into_response());
    }
    // Opened as a popup by the shop's page: it closes itself; the text is for a tab.
    let body = format!(
        r#"<p id="done">Payment {}. You can close this window and return to the shop.</p>
<script>window.close()</script>"#,
        status_word(charge.status)
    );
    Ok(html(StatusCode::OK, &body))
}

/// `POST /charges/{id}/cancel`: the merchant cancels a charge that still requires action;
/// answers the charge as it is afterwards (`canceled`, or how the customer ended it first).
/// Cancelling again changes nothing, so it needs no idempotency key.
async fn cancel_charge(
    State(p): State<MockProvider>,
    Path(charge_id): Path<String>,
) -> Result<Response, ApiError> {
    match p.inner.store.cancel(&charge_id)? {
        Some(charge) => Ok(json(StatusCode::OK, &charge, false)),
        None => Err(ApiError::new(ErrorCode::PaymentNotFound).detail("no such charge")),
    }
}

/// `GET /charges/{id}/action` query.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ActionPageQuery {
    #[serde(default)]
    return_url: Option<String>,
}

/// A return URL must be on a local `http` origin (this is a dev tool: no open redirect).
fn local_return_url(url: Option<&str>) -> Result<Option<&str>, ApiError> {
    let Some(url) = url else { return Ok(None) };
    let origin_ok = reqwest::Url::parse(url).is_ok_and(|u| {
        let origin = u.origin().ascii_serialization();
        u.scheme() == "http" && is_local_origin(origin.as_bytes())
    });
    if origin_ok {
        Ok(Some(url))
    } else {
        Err(ApiError::new(ErrorCode::InvalidRequest)
            .detail("returnUrl must be an http URL on localhost or 127.0.0.1"))
    }
}

fn status_word(status: ChargeStatus) -> &'static str {
    match status {
        ChargeStatus::Succeeded => "confirmed",
        ChargeStatus::Declined => "declined",
        ChargeStatus::Refunded => "refunded",
        ChargeStatus::Canceled => "cancelled by the shop",
        ChargeStatus::RequiresAction => "waiting for confirmation",
    }
}

fn html_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn html(status: StatusCode, body: &str) -> Response {
    let page = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Mock provider: confirm payment</title></head><body><h1>Mock bank: 3-D Secure</h1>{body}</body></html>"
    );
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        page,
    )
        .into_response()
}

fn bad_query(e: QueryRejection) -> ApiError {
    ApiError::new(ErrorCode::InvalidRequest).detail(format!("invalid query: {}", e.body_text()))
}

async fn ledger(
    State(p): State<MockProvider>,
    query: Result<Query<LedgerQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(bad_query)?;
    let mut charges = p.inner.store.ledger(query.order_id.as_deref());
    if let Some(since) = query.since {
        charges.retain(|c| c.created_at >= since);
    }
    if let Some(after) = &query.starting_after {
        let at = charges.iter().position(|c| &c.id == after);
        // An id it does not hold ends the list, so a pager cannot loop.
        charges.drain(..at.map_or(charges.len(), |i| i + 1));
    }
    let has_more = query.limit.is_some_and(|n| charges.len() > n);
    if let Some(n) = query.limit {
        charges.truncate(n);
    }
    Ok(json(StatusCode::OK, &Ledger { charges, has_more }, false))
}

async fn redeliver(
    State(p): State<MockProvider>,
    query: Result<Query<RedeliverQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(bad_query)?;
    let Some(webhooks) = &p.inner.webhooks else {
        return Err(ApiError::new(ErrorCode::InvalidRequest)
            .detail("this provider has no webhook URL configured"));
    };
    let events = p.inner.store.events_for_order(&query.order_id);
    let redelivered = events.len();
    for event in events {
        webhooks.enqueue(event);
    }
    Ok(json(
        StatusCode::ACCEPTED,
        &Redelivered { redelivered },
        false,
    ))
}

async fn reset(State(p): State<MockProvider>) -> Result<Response, ApiError> {
    p.inner.store.reset()?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn not_found() -> ApiError {
    ApiError::new(ErrorCode::NotFound)
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(ErrorCode::MethodNotAllowed)
}

impl MockProvider {
    /// Hands a new event to delivery: at once (awaited) with early-delivery chaos, else to
    /// the background.
    async fn send_webhook(&self, event: payonce_protocol::provider::WebhookEvent) {
        let Some(webhooks) = &self.inner.webhooks else {
            return;
        };
        if webhooks.before_response() {
            webhooks.deliver_before_response(event).await;
        } else {
            webhooks.enqueue(event);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_local_origin;

    #[test]
    fn only_local_http_origins_are_allowed() {
        for ok in [
            "http://localhost",
            "http://localhost:5173",
            "http://127.0.0.1:8080",
        ] {
            assert!(is_local_origin(ok.as_bytes()), "{ok}");
        }
        for bad in [
            "http://localhost.evil.example",
            "http://localhost:",
            "http://localhost:80x",
            "https://example.com",
            "http://127.0.0.10:80",
            "null",
        ] {
            assert!(!is_local_origin(bad.as_bytes()), "{bad}");
        }
    }
}
