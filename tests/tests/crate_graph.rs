//! The crate graph, read from `cargo metadata`, against the layering that
//! ARCHITECTURE.md states (issue 22): `cohort-core` depends on no crate of
//! the workspace and on no I/O crate; the role crates (coordinator,
//! worker, judge proxy) depend on no other role; and no crate depends on a
//! role except those allowed below. A new edge that breaks the layering
//! fails here, naming it; an allowed edge that is gone fails too, so the
//! list shrinks as the redesign lands and never lies.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

const ROLES: [&str; 3] = ["cohort-coordinator", "cohort-worker", "cohort-judge-proxy"];

/// The edges into a role crate that are allowed, each with why.
const ALLOWED_INTO_ROLES: [(&str, &str, &str); 6] = [
    ("cohort-serve", "cohort-coordinator", "the serve crate composes the roles"),
    ("cohort-serve", "cohort-worker", "the serve crate composes the roles"),
    ("cohort-serve", "cohort-judge-proxy", "the serve crate composes the roles"),
    ("cohort-cli", "cohort-coordinator", "the binary composes the roles"),
    ("cohort-cli", "cohort-worker", "the binary composes the roles"),
    ("cohort-cli", "cohort-judge-proxy", "the binary composes the roles"),
];

/// Crates that do I/O: never a dependency of `cohort-core`.
const IO_CRATES: [&str; 9] =
    ["tokio", "reqwest", "redis", "rusqlite", "tonic", "hyper", "axum", "object_store", "tracing"];

/// Every workspace package's normal (not dev, not build) dependencies.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let meta: Value = serde_json::from_slice(&out.stdout).unwrap();
    meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null())
                .map(|d| d["name"].as_str().unwrap().to_owned())
                .collect();
            (p["name"].as_str().unwrap().to_owned(), deps)
        })
        .collect()
}

/// See the module doc.
#[test]
fn the_crate_graph_keeps_its_layers() {
    let graph = graph();
    let workspace: BTreeSet<&str> = graph.keys().map(String::as_str).collect();
    assert!(workspace.contains("cohort-core") && workspace.contains("cohort-ledger"), "{workspace:?}");
    let mut problems = Vec::new();

    let core = &graph["cohort-core"];
    for dep in core {
        if workspace.contains(dep.as_str()) || IO_CRATES.contains(&dep.as_str()) {
            problems.push(format!("cohort-core depends on {dep}: core is pure and depends on no crate of ours"));
        }
    }
    let mut seen_allowed = BTreeSet::new();
    for (krate, deps) in &graph {
        for dep in deps.iter().filter(|d| ROLES.contains(&d.as_str())) {
            match ALLOWED_INTO_ROLES.iter().find(|(from, to, _)| from == krate && to == dep) {
                Some(edge) => {
                    seen_allowed.insert(*edge);
                }
                None if ROLES.contains(&krate.as_str()) => {
                    problems.push(format!("{krate} depends on {dep}: a role speaks to another over gRPC only"))
                }
                None => problems.push(format!(
                    "{krate} depends on the role crate {dep}: only the serve crate and the binary compose roles (move what it needs \
                     into a crate below the roles, or add the edge to ALLOWED_INTO_ROLES with why)"
                )),
            }
        }
    }
    for edge in ALLOWED_INTO_ROLES {
        if !seen_allowed.contains(&edge) {
            problems
                .push(format!("{} no longer depends on {}: remove the edge from ALLOWED_INTO_ROLES", edge.0, edge.1));
        }
    }
    // The result side reads the ledger, the records and the artifact
    // store, on core: nothing else of ours.
    let report_may = ["cohort-core", "cohort-ledger", "cohort-records", "cohort-artifacts"];
    for dep in graph["cohort-report"].iter().filter(|d| workspace.contains(d.as_str())) {
        if !report_may.contains(&dep.as_str()) {
            problems.push(format!("cohort-report depends on {dep}: the result side reads only {report_may:?}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
