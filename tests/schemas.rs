//! The committed JSON Schemas match the types, and real output has every required field.
mod common;
use common::*;

#[test]
fn committed_schemas_match_the_code() {
    for (name, file) in commcanary::schema::SCHEMAS {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("results-schema").join(file);
        let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let generated = commcanary::schema::schema_json(name).unwrap();
        assert!(committed == generated, "{file} is stale: regenerate with `commcanary schema {name} > results-schema/{file}`");
    }
}

/// Every property a schema marks required is present in a real document.
fn required_present(schema: &serde_json::Value, doc: &serde_json::Value, defs: &serde_json::Value, path: &str) {
    let schema = match schema.get("$ref").and_then(|r| r.as_str()) {
        Some(r) => &defs[r.trim_start_matches("#/$defs/")],
        None => schema,
    };
    if let (Some(req), Some(obj)) = (schema.get("required").and_then(|r| r.as_array()), doc.as_object()) {
        for k in req {
            let k = k.as_str().unwrap();
            assert!(obj.contains_key(k), "{path}: required field {k} missing");
            if let Some(sub) = schema["properties"].get(k) {
                required_present(sub, &obj[k], defs, &format!("{path}.{k}"));
            }
        }
    }
}

#[test]
fn real_outputs_carry_every_required_field() {
    let d = tempfile::tempdir().unwrap();
    let run = run_rank(2, d.path(), &["--phases", "blocking,replay", "--tokens", "2", "--model", "synthetic", "--layers", "2"]);
    let check = |name: &str, doc: serde_json::Value| {
        let schema: serde_json::Value = serde_json::from_str(&commcanary::schema::schema_json(name).unwrap()).unwrap();
        required_present(&schema, &doc, &schema["$defs"], name);
    };
    check("shard", serde_json::from_str(&ok(&cc(&["inspect", run.join("rank-00000.shard").to_str().unwrap()]))).unwrap());
    check("run", serde_json::from_slice(&std::fs::read(run.join("run.json")).unwrap()).unwrap());
    check("join-summary", join_json(&run));
    let ev = d.path().join("ev.jsonl");
    ok(&cc(&["join", run.to_str().unwrap(), "--events-out", ev.to_str().unwrap()]));
    for l in std::fs::read_to_string(&ev).unwrap().lines() {
        check("joined-collective", serde_json::from_str(l).unwrap());
    }
}
