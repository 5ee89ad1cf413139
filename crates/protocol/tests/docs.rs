//! The SDK's user-facing docs name what the SDK's code has, checked by reading the files:
//! every option, outcome, error code, warning and event of the SDK appears in its types
//! (the `.d.ts` source, `TS_TYPES` in `src/web/mod.rs`) and in the package's README
//! (`npm/README.md`), and `docs/integrate.md`'s Stripe snippet is `www/src/integrate.js`, the
//! file the browser end-to-end test runs. The code's lists are read where the SDK keeps them:
//! the members `create` accepts (`OPTION_FIELDS`, `RETRY_FIELDS`), the outcome enum and the
//! outcomes built beside it, `SdkError::code`, `Warning::code`, the events `Observer` emits.

use std::collections::BTreeSet;
use std::path::Path;

fn read(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `text` from `start` (included) up to the first `end` after it.
fn block<'a>(text: &'a str, start: &str, end: &str) -> &'a str {
    let from = text
        .find(start)
        .unwrap_or_else(|| panic!("{start:?} not found"));
    let rest = &text[from + start.len()..];
    &rest[..rest.find(end).unwrap_or(rest.len())]
}

/// Every identifier-like string literal right after `prefix` (whitespace allowed between).
fn literals_after(text: &str, prefix: &str) -> BTreeSet<String> {
    text.match_indices(prefix)
        .filter_map(|(at, _)| {
            let rest = text[at + prefix.len()..].trim_start().strip_prefix('"')?;
            let word = &rest[..rest.find('"')?];
            let ok =
                !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            ok.then(|| word.to_owned())
        })
        .collect()
}

/// The member names of a TypeScript interface body (two-space indented `name:` / `name?:`).
fn ts_members(body: &str) -> BTreeSet<String> {
    body.lines()
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| {
            let l = l.trim_start();
            let name: String = l
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect();
            let rest = &l[name.len()..];
            (!name.is_empty() && (rest.starts_with(':') || rest.starts_with("?:"))).then_some(name)
        })
        .collect()
}

/// The first names of the `(name, Kind)` tuples of a Rust `const NAME: [..] = [...];`.
fn fields(src: &str, konst: &str) -> BTreeSet<String> {
    literals_after(block(src, &format!("const {konst}"), "];"), "(")
}

/// Each first-column code span of the Markdown table rows in `text` (`| `name` | …`).
fn first_column(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(str::to_owned)
        .collect()
}

fn camel(variant: &str) -> String {
    let mut c = variant.chars();
    c.next()
        .map(|f| f.to_ascii_lowercase().to_string() + c.as_str())
        .unwrap_or_default()
}

/// The variants of `pub enum NAME { … }` in `src`, camelCased as serde renames them.
fn enum_variants(src: &str, name: &str) -> BTreeSet<String> {
    block(src, &format!("pub enum {name} {{"), "\n}")
        .lines()
        .filter(|l| l.starts_with("    ") && !l.starts_with("     "))
        .map(str::trim)
        .filter(|l| l.starts_with(|c: char| c.is_ascii_uppercase()))
        .map(|l| camel(l.trim_end_matches([',', '{', ' '])))
        .collect()
}

fn names(set: &BTreeSet<String>) -> Vec<&str> {
    set.iter().map(String::as_str).collect()
}

fn missing_in<'a>(want: &'a BTreeSet<String>, text: &str) -> Vec<&'a str> {
    want.iter()
        .map(String::as_str)
        .filter(|n| !text.contains(&format!("`{n}`")) && !text.contains(&format!("\"{n}\"")))
        .collect()
}

struct Sdk {
    /// `src/web/mod.rs` without its TypeScript text: the code.
    web: String,
    /// The `.d.ts` source (`TS_TYPES`).
    ts: String,
    readme: String,
}

fn sdk() -> Sdk {
    let file = read("src/web/mod.rs");
    let ts = block(&file, "const TS_TYPES: &'static str = r#\"", "\"#;").to_owned();
    Sdk {
        web: file.replace(&ts, ""),
        ts,
        readme: read("npm/README.md"),
    }
}

#[test]
fn every_option_is_in_the_types_and_the_readme_table() {
    let s = sdk();
    let code = fields(&s.web, "OPTION_FIELDS");
    let retry = fields(&s.web, "RETRY_FIELDS");
    assert!(
        code.contains("baseUrl") && retry.contains("budget"),
        "parsed {code:?} {retry:?}"
    );
    let ts = ts_members(block(&s.ts, "export interface ClientOptions {", "\n}"));
    assert_eq!(
        names(&ts),
        names(&code),
        "ClientOptions in the .d.ts vs what create reads"
    );
    let ts_retry = ts_members(block(&s.ts, "export interface RetryOptions {", "\n}"));
    assert_eq!(
        names(&ts_retry),
        names(&retry),
        "RetryOptions vs what create reads"
    );

    let table = first_column(block(&s.readme, "| option | default |", "\n\n"));
    let top: BTreeSet<String> = table
        .iter()
        .map(|n| n.split('.').next().unwrap_or(n).to_owned())
        .collect();
    assert_eq!(
        names(&top),
        names(&code),
        "npm/README.md's option table vs the code"
    );
    let sub: BTreeSet<String> = table
        .iter()
        .filter_map(|n| n.strip_prefix("retry."))
        .map(str::to_owned)
        .collect();
    assert_eq!(
        names(&sub),
        names(&retry),
        "npm/README.md's retry.* rows vs the code"
    );
}

/// The outcomes `pay` resolves: the final ones (`Final`) and the ones built beside them.
fn pay_outcomes(s: &Sdk) -> BTreeSet<String> {
    let mut all = enum_variants(&read("src/core/classify.rs"), "Final");
    all.extend(literals_after(&s.web, "(\"kind\", &"));
    all.extend(literals_after(&s.web, "kind:"));
    all
}

#[test]
fn every_outcome_is_in_the_types_and_both_readmes() {
    let s = sdk();
    let code = pay_outcomes(&s);
    assert!(
        code.contains("paid") && code.contains("busy"),
        "parsed {code:?}"
    );
    let ts = literals_after(block(&s.ts, "export type PayOutcome =", "export "), "kind:");
    assert_eq!(
        names(&ts),
        names(&code),
        "PayOutcome in the .d.ts vs the code"
    );
    let table = block(&s.readme, "| `pay` resolves |", "\n\n");
    let rows = literals_after(table, "| `{ kind:");
    assert_eq!(
        names(&rows),
        names(&code),
        "npm/README.md's outcome table vs the code"
    );
    let root = read("README.md");
    let used = block(&root, "## Using the SDK", "\n## ");
    let cases = literals_after(used, "case ");
    assert_eq!(
        names(&cases),
        names(&code),
        "README.md's switch vs the code"
    );
}

#[test]
fn every_error_and_warning_code_is_in_the_types_and_the_readme() {
    let s = sdk();
    let error_rs = read("src/core/error.rs");
    let mut errors = literals_after(block(&error_rs, "pub fn code(&self)", "\n    }"), "=>");
    errors.insert("KEY_REUSED_WITH_DIFFERENT_DETAILS".into()); // `SdkError::KeyReused`
    errors.insert("NETWORK_OR_CORS".into()); // `SdkError::NetworkOrCors`: the warning's code
    errors.extend(literals_after(&read("js/index.js"), "PayonceError("));
    assert!(
        errors.contains("NOT_INITIALIZED") && errors.len() > 5,
        "parsed {errors:?}"
    );
    let ts = literals_after(block(&s.ts, "export type PayonceErrorCode =", ";\n"), "|");
    assert_eq!(names(&ts), names(&errors), "PayonceErrorCode vs the code");
    let readme = missing_in(&errors, &s.readme);
    assert!(
        readme.is_empty(),
        "error codes missing from npm/README.md: {readme:?}"
    );

    let warnings = literals_after(block(&error_rs, "pub fn code(self)", "\n    }"), "=>");
    assert!(warnings.contains("NETWORK_OR_CORS"), "parsed {warnings:?}");
    let ts = literals_after(block(&s.ts, "export type PayonceWarningCode =", ";\n"), "|");
    assert_eq!(
        names(&ts),
        names(&warnings),
        "PayonceWarningCode vs the code"
    );
    let readme = missing_in(&warnings, &s.readme);
    assert!(
        readme.is_empty(),
        "warnings missing from npm/README.md: {readme:?}"
    );
}

#[test]
fn every_event_is_in_the_types_and_the_readme() {
    let s = sdk();
    let mut code = BTreeSet::new();
    for prefix in ["about(", "event(", "tab(", "(\"type\", &"] {
        code.extend(literals_after(&s.web, prefix));
    }
    assert!(
        code.contains("tabAdopt") && code.contains("warning"),
        "parsed {code:?}"
    );
    let ts = literals_after(block(&s.ts, "export type PayonceEvent =", "\n);"), "type:");
    assert_eq!(
        names(&ts),
        names(&code),
        "PayonceEvent in the .d.ts vs the events emitted"
    );
    let readme = missing_in(&code, &s.readme);
    assert!(
        readme.is_empty(),
        "events missing from npm/README.md: {readme:?}"
    );
}

/// `docs/integrate.md` shows `www/src/integrate.js` verbatim: the code a reader copies is the
/// code `www/e2e/stripe-integrate.test.mjs` runs in Chromium against localstripe.
#[test]
fn the_integration_guide_shows_the_file_the_browser_test_runs() {
    let doc = read("docs/integrate.md");
    let marker = "<!-- www/src/integrate.js -->\n```js\n";
    let shown = block(&doc, marker, "```\n");
    assert_eq!(
        shown,
        read("www/src/integrate.js"),
        "docs/integrate.md's Stripe snippet differs from www/src/integrate.js"
    );
    let e2e = read("www/e2e/stripe-integrate.test.mjs");
    for f in ["paymentMethodFromCard", "payWithStripe"] {
        assert!(
            e2e.contains(&format!("it.{f}(")),
            "the e2e test does not run {f}"
        );
    }
    assert!(read("www/src/main.js").contains("import * as integrate from \"./integrate.js\""));
}
