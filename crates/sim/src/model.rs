//! The discrete-event model: clients, an outage, a server with (optional) capacity.
//!
//! Time is integer milliseconds; events at the same millisecond run in the order they were
//! scheduled (a sequence number breaks ties), so a run is a pure function of its seed.

use crate::strategy::{ClientRetry, Step, Strategy};
use payonce::core::classify::Reply;
use payonce::core::retry::{Next, PendingReason};
use payonce_protocol::{AttemptStatus, PayResponse, Payment};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// When the clients press Pay.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Arrival {
    /// Every client's first request leaves at t = 0, the moment the outage starts: the crowd
    /// that was checking out when the server went down, in lock step.
    Burst,
    /// First requests uniformly spread over `[0, ms)`.
    Spread(u64),
}

impl std::fmt::Display for Arrival {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Burst => write!(f, "all first requests at t = 0"),
            Self::Spread(ms) => write!(
                f,
                "first requests spread over [0, {} s)",
                *ms as f64 / 1000.0
            ),
        }
    }
}

/// Everything that defines a run apart from the strategy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Scenario {
    pub clients: usize,
    pub arrival: Arrival,
    /// The outage is `[0, outage_ms)`.
    pub outage_ms: u64,
    /// The client's per-request timeout (the SDK's default for every strategy).
    pub timeout_ms: u64,
    /// Requests per second the recovered server serves; 0 = unlimited.
    pub capacity_rps: u32,
    /// `Retry-After` (seconds) on a 503 when over capacity.
    pub retry_after_s: u64,
    /// Time to a 200 for a request the server takes.
    pub latency_ms: u64,
    /// Time to a 503 for a request it sheds.
    pub shed_latency_ms: u64,
}

/// What happened to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Fate {
    /// Sent during the outage: never answered, the client's timeout fired.
    Lost,
    /// Answered 200 succeeded.
    Served,
    /// Shed with 503 + Retry-After (over capacity).
    Shed,
}

/// How a client's pay call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    Paid,
    Pending(PendingReason),
}

/// The record of one run.
pub(crate) struct Run {
    pub strategy: Strategy,
    /// Every request: when it reached the server, and its fate.
    pub sends: Vec<(u64, Fate)>,
    /// Every pay call's end.
    pub ends: Vec<(u64, End)>,
    /// Every pay call's duration, from Pay to its final answer or `pending` (ms): what the
    /// customer waits.
    pub took: Vec<u64>,
}

struct Server {
    outage_ms: u64,
    capacity_rps: u32,
    /// Token bucket: refills at `capacity_rps`, holds at most 100 ms worth, so the server
    /// takes its capacity per second but not a whole second's worth in one instant.
    tokens: f64,
    last_ms: u64,
}

impl Server {
    fn receive(&mut self, now: u64) -> Fate {
        if now < self.outage_ms {
            return Fate::Lost;
        }
        if self.capacity_rps == 0 {
            return Fate::Served;
        }
        let rate = f64::from(self.capacity_rps) / 1000.0;
        let burst = (f64::from(self.capacity_rps) / 10.0).max(1.0);
        // The bucket starts full at recovery.
        let since = now.saturating_sub(self.last_ms.max(self.outage_ms));
        if self.last_ms < self.outage_ms {
            self.tokens = burst;
        } else {
            self.tokens = (self.tokens + since as f64 * rate).min(burst);
        }
        self.last_ms = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Fate::Served
        } else {
            Fate::Shed
        }
    }
}

fn paid_reply() -> Reply<PayResponse> {
    Reply::Http {
        status: 200,
        retry_after: None,
        ok: Some(PayResponse {
            status: AttemptStatus::Succeeded,
            order_id: "ord_sim".into(),
            payment: Some(Payment {
                id: "pay_sim".into(),
                order_id: "ord_sim".into(),
                amount: 1_000,
                currency: "EUR".into(),
                payment_method_id: "pm_sim".into(),
                charge_id: "ch_sim".into(),
                status: AttemptStatus::Succeeded,
            }),
        }),
        problem: None,
    }
}

/// A scheduled event: (time, tie-break sequence, client, `None` = the client sends |
/// `Some(fate)` = the answer to its request arrives).
type Event = (u64, u64, usize, Option<Fate>);

/// Runs one strategy through the scenario. Deterministic for a given seed.
pub(crate) fn run(scenario: &Scenario, strategy: Strategy, seed: u64) -> Run {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut queue: BinaryHeap<Reverse<Event>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut push = |q: &mut BinaryHeap<_>, at: u64, client: usize, answer: Option<Fate>| {
        q.push(Reverse((at, seq, client, answer)));
        seq += 1;
    };

    let mut clients: Vec<ClientRetry> = Vec::with_capacity(scenario.clients);
    let mut started: Vec<u64> = Vec::with_capacity(scenario.clients);
    for i in 0..scenario.clients {
        let at = match scenario.arrival {
            Arrival::Burst => 0,
            Arrival::Spread(ms) => rng.gen_range(0..ms.max(1)),
        };
        clients.push(ClientRetry::new(strategy, at));
        started.push(at);
        push(&mut queue, at, i, None);
    }
    let mut server = Server {
        outage_ms: scenario.outage_ms,
        capacity_rps: scenario.capacity_rps,
        tokens: 0.0,
        last_ms: 0,
    };
    let shed_reply = Reply::<PayResponse>::Http {
        status: 503,
        retry_after: Some(scenario.retry_after_s.to_string()),
        ok: None,
        problem: None,
    };
    let lost_reply = Reply::<PayResponse>::NoAnswer { timed_out: true };
    let paid = paid_reply();

    let mut out = Run {
        strategy,
        sends: Vec::new(),
        ends: Vec::new(),
        took: Vec::new(),
    };
    while let Some(Reverse((now, _, c, answer))) = queue.pop() {
        match answer {
            None => {
                let fate = server.receive(now);
                out.sends.push((now, fate));
                let at = now
                    + match fate {
                        Fate::Lost => scenario.timeout_ms,
                        Fate::Served => scenario.latency_ms,
                        Fate::Shed => scenario.shed_latency_ms,
                    };
                push(&mut queue, at, c, Some(fate));
            }
            Some(fate) => {
                let reply = match fate {
                    Fate::Lost => &lost_reply,
                    Fate::Served => &paid,
                    Fate::Shed => &shed_reply,
                };
                // The SDK's own reading of the answer, for every strategy (the SDK's pay
                // flow classifies it itself).
                match clients[c].answer(reply, now, &mut rng) {
                    Step::Paid => {
                        out.ends.push((now, End::Paid));
                        out.took.push(now - started[c]);
                    }
                    Step::Then(Next::Wait { ms }) => push(&mut queue, now + ms, c, None),
                    Step::Then(Next::GiveUp(reason)) => {
                        out.ends.push((now, End::Pending(reason)));
                        out.took.push(now - started[c]);
                    }
                }
            }
        }
    }
    out
}

/// The figures the issue asks for, over the recovery window.
#[derive(Debug, Clone)]
pub(crate) struct Figures {
    pub requests: usize,
    pub retries_per_intent: f64,
    /// Highest 1 s bucket (aligned to recovery) at or after recovery, in req/s.
    pub peak_rps: f64,
    /// Requests sent in `[recovery, drain]` over its length, in req/s.
    pub mean_rps: f64,
    pub peak_to_mean: f64,
    /// Peak over the mean from the first request after recovery to the drain: the storm's own
    /// shape, without the idle time the request timeout leaves after recovery.
    pub busy_peak_to_mean: f64,
    /// From recovery to the last pay call's end, in s.
    pub drain_s: f64,
    /// First request the recovered server received, s after recovery.
    pub first_after_s: f64,
    pub shed: usize,
    pub paid: usize,
    pub given_up: usize,
    /// Median and 99th percentile (nearest rank) of the time from Pay to the call's end, paid
    /// or `pending`, in s: the price the customer pays for a policy.
    pub p50_s: f64,
    pub p99_s: f64,
}

/// Nearest-rank percentile `q` (0–1] of `v`, in s; 0 for no values.
fn percentile_s(v: &[u64], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_unstable();
    if v.is_empty() {
        return 0.0;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1] as f64 / 1000.0
}

/// Summarises a run. `intents` = number of clients.
pub(crate) fn figures(run: &Run, scenario: &Scenario) -> Figures {
    let rec = scenario.outage_ms;
    let intents = run.ends.len().max(1);
    let requests = run.sends.len();
    let end = run.ends.iter().map(|e| e.0).max().unwrap_or(rec).max(rec);
    let after: Vec<u64> = run
        .sends
        .iter()
        .filter(|s| s.0 >= rec)
        .map(|s| s.0)
        .collect();
    let mut buckets = vec![0usize; ((end - rec) / 1000 + 1) as usize];
    for t in &after {
        buckets[((t - rec) / 1000) as usize] += 1;
    }
    let peak = buckets.iter().copied().max().unwrap_or(0) as f64;
    let window_s = ((end - rec) as f64 / 1000.0).max(1.0);
    let mean = after.len() as f64 / window_s;
    let first = after.first().copied().unwrap_or(end);
    let busy_mean = after.len() as f64 / ((end - first) as f64 / 1000.0).max(1.0);
    Figures {
        requests,
        retries_per_intent: (requests - run.ends.len().min(requests)) as f64 / intents as f64,
        peak_rps: peak,
        mean_rps: mean,
        peak_to_mean: if mean > 0.0 { peak / mean } else { 0.0 },
        busy_peak_to_mean: if busy_mean > 0.0 {
            peak / busy_mean
        } else {
            0.0
        },
        drain_s: (end - rec) as f64 / 1000.0,
        first_after_s: (first - rec) as f64 / 1000.0,
        shed: run.sends.iter().filter(|s| s.1 == Fate::Shed).count(),
        paid: run.ends.iter().filter(|e| e.1 == End::Paid).count(),
        given_up: run
            .ends
            .iter()
            .filter(|e| matches!(e.1, End::Pending(_)))
            .count(),
        p50_s: percentile_s(&run.took, 0.50),
        p99_s: percentile_s(&run.took, 0.99),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank_in_seconds() {
        let took: Vec<u64> = (1..=100).map(|i| i * 1_000).collect();
        assert_eq!(percentile_s(&took, 0.50), 50.0);
        assert_eq!(percentile_s(&took, 0.99), 99.0);
        assert_eq!(percentile_s(&[7_000], 0.99), 7.0);
        assert_eq!(percentile_s(&[], 0.5), 0.0);
    }
}
