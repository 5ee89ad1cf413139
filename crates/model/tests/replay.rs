//! A counterexample replayed against the real server over HTTP. The checker's shortest
//! trace for [`Flaw::BlindRecharge`]: a pay is claimed and its charge call is under way
//! when the lease expires; a retry takes the attempt over and (the flaw) charges again.
//! The same steps, first through the model with the real rules (the take-over asks the
//! provider: one charge), then against `target/debug/payonce-server --dev` on a fresh
//! SQLite file: the provider charges at once but answers too late (`pm_card_timeout`), the
//! lease runs out, the retry takes the attempt over, and the real server asks the provider
//! instead of charging: one charge in its ledger, the customer paid with it.

use payonce_model::check::{self, Search};
use payonce_model::model::{Action, Bounds, Inst, Model};
use payonce_model::Flaw;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

struct Proc(Child, String, String);
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn server_bin() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let bin = root.join("target/debug/payonce-server");
    if !bin.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let ok = Command::new(cargo)
            .args(["build", "-p", "payonce-server"])
            .current_dir(&root)
            .status()
            .expect("cargo build -p payonce-server");
        assert!(ok.success(), "building payonce-server failed");
    }
    bin
}

fn spawn(args: &[String]) -> Proc {
    let mut child = Command::new(server_bin())
        .args(args)
        .env_remove("DATABASE_URL")
        .env_remove("PAYONCE_PROVIDER_URL")
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn payonce-server");
    let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let (mut api, mut provider) = (None, None);
    for line in lines {
        let line = line.expect("stdout line");
        if let Some(u) = line.strip_prefix("payonce: api listening on ") {
            api = Some(u.to_owned());
        } else if let Some(u) = line.strip_prefix("payonce: provider listening on ") {
            provider = Some(u.to_owned());
        }
        if api.is_some() && provider.is_some() {
            break;
        }
    }
    Proc(
        child,
        api.expect("api line"),
        provider.expect("provider line"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_blind_recharge_trace_against_the_real_server_charges_once() {
    // 1. The checker's counterexample, and its shape.
    let model = Model {
        bounds: Bounds {
            provider_faults: 1,
            ticks: 1,
            ..Bounds::NONE
        },
        flaw: Some(Flaw::BlindRecharge),
    };
    let r = check::run(
        &model,
        Search {
            max_depth: 40,
            max_states: 300_000,
            liveness_every: 0,
            liveness_steps: 0,
        },
    );
    let (name, trace) = r.violation.expect("the flaw is caught");
    println!("{name}\n{}", check::render(&model, &trace));
    let tick = trace
        .iter()
        .position(|a| matches!(a, Action::Tick))
        .expect("the lease expires");
    let mut s = model.init();
    let mut took_over = None;
    for (n, a) in trace.iter().enumerate() {
        let before = s.clone();
        s = model.next(&s, a).expect("the trace replays");
        let was = |x: &payonce_model::model::State| {
            x.inst
                .iter()
                .filter(|i| matches!(i, Inst::Busy(_, w) if w.flow.next_step() == "TakeOver"))
                .count()
        };
        if was(&before) > was(&s) {
            took_over.get_or_insert(n);
        }
    }
    let took_over = took_over.expect("a take-over");
    assert!(tick < took_over, "the lease expired, then the take-over");
    // The same actions with the real rules: the take-over asks the provider, one charge.
    let real = Model {
        flaw: None,
        ..model
    };
    let mut s = real.init();
    for a in &trace {
        s = real
            .next(&s, a)
            .unwrap_or_else(|| panic!("{a:?} not enabled with the real rules"));
    }
    assert!(
        check::violations(&s).is_empty(),
        "{:?}",
        check::violations(&s)
    );
    assert_eq!(s.ledger.len(), 1, "the real take-over charged nothing new");

    // 2. The same steps against the real server.
    let dir = std::env::temp_dir().join(format!("payonce-model-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = format!("sqlite://{}", dir.join("payonce.db").display());
    let args = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = [
            "--addr",
            "127.0.0.1:0",
            "--database-url",
            &db,
            "--session-secret",
            "payonce-test-secret-0123456789",
            "--lease-ms",
            "1500",
            "--provider-timeout-ms",
            "1000",
            "--in-progress-wait-ms",
            "0",
            "--jobs-interval-ms",
            "0",
            "--dev",
            "--no-provider-webhooks",
            "--provider-addr",
            "127.0.0.1:0",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let key = uuid::Uuid::new_v4().to_string();

    // Click, deliver, decide, claim, drive: the provider charges at once and answers after
    // the server's provider timeout, so the server does not know (202, key kept).
    let server = spawn(&args(&[]));
    let api = server.1.clone();
    let token: String = http
        .post(format!("{api}/dev/sessions"))
        .json(&json!({ "userId": "u1" }))
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let order: Value = http
        .post(format!("{api}/orders"))
        .bearer_auth(&token)
        .json(&json!({ "items": [{ "sku": "tee-classic", "quantity": 1 }] }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = order["id"].as_str().unwrap().to_owned();
    let pay = || {
        http.post(format!("{api}/orders/{id}/pay"))
            .bearer_auth(&token)
            .header("Idempotency-Key", &key)
            .json(&json!({ "orderVersion": 1, "paymentMethodId": "pm_card_timeout" }))
            .send()
    };
    let first = pay().await.unwrap();
    assert_eq!(
        first.status().as_u16(),
        202,
        "outcome unknown: {}",
        first.text().await.unwrap()
    );

    // Tick: the lease is over. The retry with the same key takes the attempt over.
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    let mut paid = None;
    for _ in 0..50 {
        let r = pay().await.unwrap();
        let status = r.status().as_u16();
        let body: Value = r.json().await.unwrap();
        if status == 200 {
            paid = Some(body);
            break;
        }
        assert!(
            [202, 409].contains(&status),
            "never charged blindly: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let paid = paid.expect("the retry learns the outcome");
    let second = server;
    let ledger: Value = http
        .get(format!("{}/ledger?orderId={id}", second.2))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let charges = ledger["charges"].as_array().unwrap();
    assert_eq!(charges.len(), 1, "one charge: {ledger}");
    assert_eq!(
        paid["payment"]["chargeId"], charges[0]["id"],
        "paid with that charge"
    );
    drop(second);
    let _ = std::fs::remove_dir_all(&dir);
}
