//! The server's source layout: no file of `src/` imports one that imports it back, directly
//! or through others (the operations never call the HTTP edge, the store never calls its
//! callers, ...).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module path (`http::pay`) of every file under `dir`, with its code outside comments and
/// unit tests.
fn modules(dir: &Path, prefix: &str, out: &mut BTreeMap<String, String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            modules(&path, &format!("{prefix}{name}::"), out);
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let code: String = text
            .split("#[cfg(test)]")
            .next()
            .unwrap()
            .lines()
            .map(|l| l.split("//").next().unwrap())
            .collect::<Vec<_>>()
            .join("\n");
        let module = match name.as_str() {
            "lib" | "main" => String::new(),
            "mod" => prefix.trim_end_matches("::").to_owned(),
            _ => format!("{prefix}{name}"),
        };
        out.insert(module, code);
    }
}

/// Every file of `src/`: its module path and its code ([`modules`]).
fn sources() -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    modules(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        "",
        &mut files,
    );
    files
}

/// Every file's module path and the files it imports (`crate::…`, `super::…`).
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let files = sources();
    let resolve = |path: &str| -> Option<String> {
        let parts: Vec<&str> = path.split("::").collect();
        (1..=parts.len())
            .rev()
            .map(|i| parts[..i].join("::"))
            .find(|m| files.contains_key(m))
    };
    let mut deps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, code) in &files {
        let mut found = BTreeSet::new();
        // `crate::a::b` and `super::a::b` anywhere, and the members of `use crate::{a, b::c}`
        // and `use super::{a, b::c}`; `super::` is taken from the file's own module.
        let parent = module.rsplit_once("::").map_or("", |(p, _)| p);
        let parent = if module.is_empty() { "" } else { parent };
        let absolute = |base: &str, path: &str| {
            if base.is_empty() || path.is_empty() {
                format!("{base}{path}")
            } else {
                format!("{base}::{path}")
            }
        };
        for (prefix, base) in [("crate::", ""), ("super::", parent)] {
            for (i, _) in code.match_indices(prefix) {
                if code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':') {
                    continue; // `super::super::`, `$crate::`: not a path's first segment
                }
                let rest = &code[i + prefix.len()..];
                let end = rest
                    .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                    .unwrap_or(rest.len());
                let (path, tail) = rest.split_at(end);
                let path = path.trim_end_matches(':');
                if path.is_empty() && tail.starts_with('{') {
                    let group = &tail[1..tail.find('}').unwrap_or(tail.len())];
                    found.extend(group.split(',').filter_map(|p| {
                        let p = p.trim().split("::{").next().unwrap();
                        (!p.is_empty())
                            .then(|| resolve(&absolute(base, p)))
                            .flatten()
                    }));
                } else {
                    found.extend(resolve(&absolute(base, path)));
                }
            }
        }
        found.remove(module);
        found.remove("");
        deps.insert(module.clone(), found);
    }
    deps
}

#[test]
fn no_file_imports_one_that_imports_it_back_even_through_others() {
    let owned = imports();
    let deps: BTreeMap<&str, BTreeSet<String>> =
        owned.iter().map(|(m, d)| (m.as_str(), d.clone())).collect();
    // Depth-first: a file met again while still on the path closes a cycle.
    fn visit<'a>(
        m: &'a str,
        deps: &'a BTreeMap<&str, BTreeSet<String>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) {
        if let Some(i) = path.iter().position(|p| *p == m) {
            panic!("files importing each other: {:?}", &path[i..]);
        }
        if !done.insert(m) {
            return;
        }
        path.push(m);
        for d in deps.get(m).into_iter().flatten() {
            visit(d, deps, path, done);
        }
        path.pop();
    }
    let mut done = BTreeSet::new();
    for m in deps.keys() {
        visit(m, &deps, &mut Vec::new(), &mut done);
    }
    assert!(deps.len() > 20, "the walk found the source files: {deps:?}");
}

/// The layers (src/lib.rs, "Layout"): the infrastructure never calls an operation or the
/// edge, and the operations never call the edge.
#[test]
fn the_infrastructure_never_calls_the_operations_and_they_never_call_the_edge() {
    let under = |m: &str, layer: &str| m == layer || m.starts_with(&format!("{layer}::"));
    let infrastructure = [
        "store", "provider", "replay", "auth", "limits", "metrics", "clock",
    ];
    let mut wrong = Vec::new();
    for (module, deps) in imports() {
        let forbidden: &[&str] = if infrastructure.iter().any(|l| under(&module, l)) {
            &["ops", "http"]
        } else if under(&module, "ops") {
            &["http"]
        } else {
            &[]
        };
        for d in deps {
            if forbidden.iter().any(|l| under(&d, l)) {
                wrong.push(format!("{module} imports {d}"));
            }
        }
    }
    assert!(wrong.is_empty(), "imports against the layers: {wrong:#?}");
}

/// Every write the server makes is a plan the store executes (`src/store/tx.rs`,
/// `src/store/pay.rs`): no file outside `store/` opens a write transaction of its own
/// (`Store::write`, a `.write(…)` call with arguments; a lock's `.write()` takes none).
///
/// `Store::write` is private to `store/` as well (`pub(in crate::store)`), so the compiler
/// refuses a call outside it; this test also catches a write through another name.
#[test]
fn no_file_outside_the_store_opens_a_write_transaction() {
    let files = sources();
    let mut wrong = Vec::new();
    for (module, code) in &files {
        if module == "store" || module.starts_with("store::") {
            continue;
        }
        let calls = code.matches("Store::write").count()
            + code
                .match_indices(".write(")
                .filter(|(i, m)| !code[i + m.len()..].trim_start().starts_with(')'))
                .count();
        if calls > 0 {
            wrong.push(format!("{module}: {calls} write transaction(s)"));
        }
    }
    assert!(
        files.len() > 20,
        "the walk found the source files: {files:?}"
    );
    assert!(
        wrong.is_empty(),
        "writes outside src/store/ (make each a plan the store executes): {wrong:#?}"
    );
}

/// The operations take the part of the state they read (`OpsState`, `Ledgers`, `Replays`,
/// each by `FromRef`, `src/state.rs`), never the whole application state: what an operation
/// can touch is in its signature, and the edge's own parts (the auth keys, the metrics'
/// gauges) stay out of reach.
#[test]
fn no_operation_takes_the_whole_state() {
    let files = sources();
    let ops: Vec<_> = files
        .iter()
        .filter(|(m, _)| *m == "ops" || m.starts_with("ops::"))
        .collect();
    assert!(ops.len() > 5, "the walk found the operations: {ops:?}");
    let wrong: Vec<_> = ops
        .iter()
        .filter(|(_, code)| code.contains("AppState"))
        .map(|(m, _)| m.as_str())
        .collect();
    assert!(
        wrong.is_empty(),
        "operations that take the whole AppState (take a sub-state): {wrong:?}"
    );
}

/// Every module's floor, lowest first; a module imports only from its own floor and those
/// below it (src/lib.rs, "Layout"). Sub-modules stand on their folder's floor unless they
/// are named on one of their own (`config::flags`: the closest name wins).
const FLOORS: &[&[&str]] = &[
    &[
        "clock", "ids", "secret", "faults", "error", "reply", "openapi",
    ],
    &[
        "store", "journal", "provider", "mailer", "replay", "auth", "limits", "metrics",
    ],
    &["catalog"],
    // The configuration in three steps: the flags, the start-up refusals, the settings.
    &["config::flags", "config::dev", "config::dev_off"],
    &["config::checks"],
    &["config", "config::build"],
    &["state"],
    &["ops"],
    &["http"],
    &["dev", "dev_off", "listen"],
    &["server", "", "main"],
];

/// Imports that climb a floor, each `(from, to)` as the test reports it: none. An import
/// that would climb one moves the item it needs down to the floor that owns it (the fault
/// hooks to `faults`, the CORS and dev flags to `config`), or takes a sub-state by
/// `FromRef` (`auth::AuthState`, `replay::Replays`) instead of the whole state.
const CLIMBS: &[(&str, &str)] = &[];

#[test]
fn every_module_has_a_floor_and_no_import_climbs_one() {
    // The longest name with a floor that is `m` or one of its folders.
    let floor = |m: &str| {
        let mut name = m;
        loop {
            if let Some(at) = FLOORS.iter().position(|f| f.contains(&name)) {
                return Some(at);
            }
            name = name.rsplit_once("::")?.0;
        }
    };
    let mut unplaced = Vec::new();
    let mut climbs = BTreeSet::new();
    for (module, deps) in imports() {
        let Some(at) = floor(&module) else {
            unplaced.push(module);
            continue;
        };
        for d in deps {
            if floor(&d).is_some_and(|to| to > at) {
                climbs.insert((module.clone(), d));
            }
        }
    }
    assert!(unplaced.is_empty(), "modules without a floor: {unplaced:?}");
    let known: BTreeSet<(String, String)> = CLIMBS
        .iter()
        .map(|&(a, b)| (a.to_owned(), b.to_owned()))
        .collect();
    let new: Vec<_> = climbs.difference(&known).collect();
    let gone: Vec<_> = known.difference(&climbs).collect();
    assert!(new.is_empty(), "imports that climb a floor: {new:#?}");
    assert!(
        gone.is_empty(),
        "listed climbs that no longer occur (remove them): {gone:#?}"
    );
}
