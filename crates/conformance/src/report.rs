//! Verdicts, one line per rule, as text or JSON.

use serde::Serialize;

/// The verdict on one rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Verdict {
    /// The backend did what `docs/protocol.md` says.
    Pass,
    /// It did not; `evidence` shows the requests and answers.
    Fail,
    /// The rule could not be checked (`detail` says why); not a failure.
    NotChecked,
}

impl Verdict {
    fn label(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::NotChecked => "NOT CHECKED",
        }
    }
}

/// One rule's result.
#[derive(Debug, Clone, Serialize)]
pub struct RuleResult {
    /// Stable rule id, e.g. `key.final`.
    pub id: &'static str,
    /// The families of rules it belongs to (a wrong backend breaks one family).
    pub families: &'static [&'static str],
    /// What the rule checks, with its section of `docs/protocol.md`.
    pub title: &'static str,
    /// The verdict.
    pub verdict: Verdict,
    /// Why it failed or was not checked; notes on a pass.
    pub detail: String,
    /// Requests and answers (for a failure; a pass keeps the last few too).
    pub evidence: Vec<String>,
}

/// Everything one run found.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The backend's base URL (and its other instances).
    pub target: Vec<String>,
    /// One result per rule, in the order of [`crate::rules::RULES`].
    pub results: Vec<RuleResult>,
    /// Wall time of the run, ms.
    pub duration_ms: u128,
}

impl Report {
    /// True when any rule failed.
    pub fn failed(&self) -> bool {
        self.results.iter().any(|r| r.verdict == Verdict::Fail)
    }

    /// The result of one rule.
    pub fn get(&self, id: &str) -> Option<&RuleResult> {
        self.results.iter().find(|r| r.id == id)
    }

    /// Ids of the rules with this verdict.
    pub fn ids(&self, verdict: Verdict) -> Vec<&'static str> {
        self.results
            .iter()
            .filter(|r| r.verdict == verdict)
            .map(|r| r.id)
            .collect()
    }

    /// One line per rule; a failure's evidence indented below it; a summary line.
    pub fn render_text(&self) -> String {
        let mut out = format!("payonce-conformance against {}\n", self.target.join(", "));
        let width = self.results.iter().map(|r| r.id.len()).max().unwrap_or(0);
        for r in &self.results {
            out.push_str(&format!(
                "{:<11} {:<width$}  {}",
                r.verdict.label(),
                r.id,
                r.title
            ));
            if !r.detail.is_empty() {
                out.push_str(&format!(" — {}", r.detail));
            }
            out.push('\n');
            if r.verdict == Verdict::Fail {
                for e in &r.evidence {
                    out.push_str(&format!("      {e}\n"));
                }
            }
        }
        let count = |v| self.results.iter().filter(|r| r.verdict == v).count();
        out.push_str(&format!(
            "rules: {} passed, {} failed, {} not checked ({} ms)\n",
            count(Verdict::Pass),
            count(Verdict::Fail),
            count(Verdict::NotChecked),
            self.duration_ms
        ));
        out
    }
}
