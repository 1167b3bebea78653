//! The committed JSON Schemas match the types, and real output has every required field.
mod common;
use commcanary::cli::schema;
use common::*;

#[test]
fn committed_schemas_match_the_code() {
    for (name, file) in schema::SCHEMAS {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("results-schema").join(file);
        let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let generated = schema::schema_json(name).unwrap();
        assert!(
            committed == generated,
            "{file} is stale: regenerate with `commcanary schema {name} > results-schema/{file}`"
        );
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
    let run = run_rank(
        2,
        d.path(),
        &["--phases", "blocking,replay", "--tokens", "2", "--model", "synthetic", "--layers", "2"],
    );
    let check = |name: &str, doc: serde_json::Value| {
        let schema: serde_json::Value = serde_json::from_str(&schema::schema_json(name).unwrap()).unwrap();
        required_present(&schema, &doc, &schema["$defs"], name);
    };
    check(
        "shard",
        serde_json::from_str(&ok(&cc(&["inspect", run.join("rank-00000.shard").to_str().unwrap()]))).unwrap(),
    );
    check("run", serde_json::from_slice(&std::fs::read(run.join("run.json")).unwrap()).unwrap());
    check("join-summary", join_json(&run));
    let ev = d.path().join("ev.jsonl");
    ok(&cc(&["join", run.to_str().unwrap(), "--events-out", ev.to_str().unwrap()]));
    for l in std::fs::read_to_string(&ev).unwrap().lines() {
        check("joined-collective", serde_json::from_str(l).unwrap());
    }
}

/// Every property of the collective and compute records, and of the trace
/// itself, is in the field contract of `results-schema/comm-trace.md`; a real
/// import carries every required field.
#[test]
fn comm_trace_contract_documents_every_field() {
    let schema: serde_json::Value = serde_json::from_str(&schema::schema_json("comm-trace").unwrap()).unwrap();
    let doc_path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("results-schema/comm-trace.md");
    let doc = std::fs::read_to_string(&doc_path).unwrap();
    let props =
        |v: &serde_json::Value| -> Vec<String> { v["properties"].as_object().unwrap().keys().cloned().collect() };
    for f in props(&schema["$defs"]["TraceCollective"]) {
        assert!(doc.contains(&format!("| `{f}` |")), "comm-trace.md has no row for TraceCollective.{f}");
    }
    for f in props(&schema["$defs"]["ComputeOp"]) {
        assert!(doc.contains(&format!("| `compute_before[].{f}` |")), "comm-trace.md has no row for ComputeOp.{f}");
    }
    for f in props(&schema["$defs"]["DeviceSpan"]) {
        assert!(doc.contains(&format!("| `device.{f}` |")), "comm-trace.md has no row for DeviceSpan.{f}");
    }
    for f in props(&schema) {
        assert!(doc.contains(&format!("`{f}`")), "comm-trace.md never mentions {f}");
    }
    let d = tempfile::tempdir().unwrap();
    let fx = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/pytorch-2.11-tp2-h200");
    for kind in ["kineto", "et"] {
        let out = d.path().join(format!("{kind}.json"));
        let files: Vec<String> =
            (0..2).map(|r| fx.join(format!("{kind}.rank-{r}.json.gz")).display().to_string()).collect();
        ok(&cc(&["import", kind, &files[0], &files[1], "-o", out.to_str().unwrap()]));
        let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
        required_present(&schema, &doc, &schema["$defs"], "comm-trace");
        for r in doc["ranks"].as_array().unwrap() {
            for c in r["collectives"].as_array().unwrap() {
                required_present(&schema["$defs"]["TraceCollective"], c, &schema["$defs"], "collective");
            }
        }
    }
}
