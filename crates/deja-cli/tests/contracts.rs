//! The JSON deja writes matches the schemas in `contracts/`. The checker covers the keywords the
//! schemas use: `type` (with unions), `required`, `properties`, `additionalProperties` (as a
//! schema), `items`, `enum`, `const` and `pattern` (as `^[0-9a-f]{N}$`).

use crate::common::*;
use serde_json::Value;

fn type_ok(t: &str, v: &Value) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        _ => false,
    }
}

fn check(schema: &Value, v: &Value, path: &str, errors: &mut Vec<String>) {
    if let Some(t) = schema.get("type") {
        let ok = match t {
            Value::String(t) => type_ok(t, v),
            Value::Array(ts) => ts.iter().any(|t| type_ok(t.as_str().unwrap_or(""), v)),
            _ => true,
        };
        if !ok {
            errors.push(format!("{path}: expected type {t}, got {v}"));
            return;
        }
    }
    if let Some(c) = schema.get("const") {
        if c != v {
            errors.push(format!("{path}: expected {c}, got {v}"));
        }
    }
    if let Some(Value::Array(options)) = schema.get("enum") {
        if !options.contains(v) {
            errors.push(format!("{path}: {v} not in {options:?}"));
        }
    }
    if let (Some(Value::String(p)), Some(s)) = (schema.get("pattern"), v.as_str()) {
        let n: usize = p.trim_start_matches("^[0-9a-f]{").trim_end_matches("}$").parse().expect("supported pattern");
        if s.len() != n || !s.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()) {
            errors.push(format!("{path}: {s:?} does not match {p}"));
        }
    }
    if let Value::Object(map) = v {
        if let Some(Value::Array(req)) = schema.get("required") {
            for r in req {
                if !map.contains_key(r.as_str().unwrap_or("")) {
                    errors.push(format!("{path}: missing {r}"));
                }
            }
        }
        for (k, child) in map {
            if let Some(s) = schema.get("properties").and_then(|p| p.get(k)) {
                check(s, child, &format!("{path}.{k}"), errors);
            } else if let Some(s) = schema.get("additionalProperties").filter(|s| s.is_object()) {
                check(s, child, &format!("{path}.{k}"), errors);
            }
        }
    }
    if let (Value::Array(items), Some(s)) = (v, schema.get("items")) {
        for (i, item) in items.iter().enumerate() {
            check(s, item, &format!("{path}[{i}]"), errors);
        }
    }
}

fn schema(name: &str) -> Value {
    let text = std::fs::read_to_string(root().join("contracts").join(name)).expect("schema file");
    serde_json::from_str(&text).expect("schema is JSON")
}

#[test]
fn run_report_matches_its_schema() {
    let s = schema("run-report.schema.json");
    let mut errors = Vec::new();
    let (_, ok) = run_json(&[&guest("hello").to_string_lossy()]);
    check(&s, &ok, "$", &mut errors);
    let (_, crashed) = run_json(&[&guest("privileged").to_string_lossy(), "--", "null"]);
    check(&s, &crashed, "$", &mut errors);
    let (_, audited) = run_json(&["--audit", "2", &guest("hello").to_string_lossy()]);
    check(&s, &audited, "$", &mut errors);
    assert!(audited["audit"]["result"] == "identical");
    assert!(errors.is_empty(), "{errors:#?}");
}

#[test]
fn the_checker_rejects_a_broken_report() {
    let s = schema("run-report.schema.json");
    let (_, mut v) = run_json(&[&guest("hello").to_string_lossy()]);
    v["digest"] = Value::String("xyz".into());
    v.as_object_mut().unwrap().remove("syscalls");
    let mut errors = Vec::new();
    check(&s, &v, "$", &mut errors);
    assert_eq!(errors.len(), 2, "{errors:#?}");
}

#[test]
fn assertion_reports_and_coverage_match_their_schemas() {
    let assertion = schema("assertion-report.schema.json");
    let coverage = schema("coverage-summary.schema.json");
    let run = schema("run-report.schema.json");
    let cov = cov_guest("bank").to_string_lossy().into_owned();
    let mut errors = Vec::new();
    for args in [vec![cov.as_str(), "--", "12"], vec![cov.as_str(), "--", "--overdraft-bug", "12"]] {
        let (_, v) = run_json(&args);
        check(&run, &v, "$", &mut errors);
        let items = v["assertions"].as_array().expect("assertions");
        assert!(!items.is_empty());
        for (i, a) in items.iter().enumerate() {
            check(&assertion, a, &format!("$.assertions[{i}]"), &mut errors);
        }
        check(&coverage, &v["coverage"], "$.coverage", &mut errors);
    }
    assert!(errors.is_empty(), "{errors:#?}");
    // The checker bites on a broken entry.
    let (_, mut v) = run_json(&[&cov, "--", "3"]);
    v["assertions"][0]["status"] = Value::String("fine".into());
    let mut errors = Vec::new();
    check(&assertion, &v["assertions"][0], "$", &mut errors);
    assert_eq!(errors.len(), 1, "{errors:?}");
}

#[test]
fn cluster_reports_match_their_schema() {
    let s = schema("cluster-report.schema.json");
    guests();
    let mut errors = Vec::new();
    for file in ["echo.toml", "restart.toml", "register-buggy.toml"] {
        let path = root().join("examples/clusters").join(file);
        let (_, r) = run_json(&["--seed", "4", &path.to_string_lossy()]);
        check(&s, &r, file, &mut errors);
    }
    assert!(errors.is_empty(), "{errors:#?}");
    let (_, mut r) = run_json(&[&root().join("examples/clusters/echo.toml").to_string_lossy()]);
    r["outcome"]["kind"] = Value::String("finished".into());
    r.as_object_mut().unwrap().remove("digest");
    let mut errors = Vec::new();
    check(&s, &r, "$", &mut errors);
    assert_eq!(errors.len(), 2, "{errors:#?}");
}
