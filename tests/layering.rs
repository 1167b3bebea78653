//! The crate's layering rule: a file under `src/LAYER/` imports only from its
//! own layer and the layers before it (docs/ARCHITECTURE.md §2). The order is
//! declared here and in `src/lib.rs`'s docs; the test checks both agree, then
//! parses every `crate::` path outside `#[cfg(test)]` code. Also: no source
//! file cites a design document outside the repository.
use std::path::{Path, PathBuf};

/// Layers in dependency order.
const LAYERS: &[&str] = &["core", "evidence", "backend", "rank", "analysis", "campaign", "report", "canary", "validate", "cli"];

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a file without comments and without its `#[cfg(test)]` items
/// (tests may reach anywhere).
fn non_test_code(text: &str) -> String {
    let mut out = String::new();
    let mut skip_depth: Option<i64> = None;
    let mut depth: i64 = 0;
    let mut pending_cfg_test = false;
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let t = code.trim();
        if skip_depth.is_none() && t.starts_with("#[cfg(test)]") {
            pending_cfg_test = true;
            continue;
        }
        let opens = code.matches('{').count() as i64;
        let closes = code.matches('}').count() as i64;
        if pending_cfg_test && !t.is_empty() && !t.starts_with("#[") {
            pending_cfg_test = false;
            if opens > closes {
                skip_depth = Some(depth);
            }
            depth += opens - closes;
            continue;
        }
        if let Some(d) = skip_depth {
            depth += opens - closes;
            if depth <= d {
                skip_depth = None;
            }
            continue;
        }
        depth += opens - closes;
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// Top-level names a piece of code reaches through `crate::` (brace groups included).
fn crate_roots(code: &str) -> Vec<String> {
    let mut roots = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().last();
        rest = &rest[i + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue; // `$crate::` (macro-relative) or an identifier ending in `crate`
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if !name.is_empty() {
                    roots.push(name);
                }
            }
        } else {
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            roots.push(name);
        }
    }
    roots
}

#[test]
fn lib_docs_declare_the_same_order() {
    let lib = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/lib.rs")).unwrap();
    let line = lib.lines().find(|l| l.contains("Layers, in dependency order:")).expect("src/lib.rs declares the layer order");
    let declared: Vec<&str> = line.split(':').nth(1).unwrap().split('→').map(str::trim).collect();
    assert_eq!(declared, LAYERS, "src/lib.rs and tests/layering.rs must declare one order");
}

#[test]
fn no_file_imports_from_a_later_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rs_files(&src, &mut files);
    let mut faults = Vec::new();
    let mut checked = 0;
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        let Some(first) = rel.components().next().and_then(|c| c.as_os_str().to_str()) else { continue };
        if rel.components().count() < 2 {
            // lib.rs and main.rs: the crate root may name every layer
            continue;
        }
        let mine = LAYERS.iter().position(|l| *l == first).unwrap_or_else(|| panic!("{}: folder {first} is not a declared layer", rel.display()));
        checked += 1;
        let code = non_test_code(&std::fs::read_to_string(f).unwrap());
        for root in crate_roots(&code) {
            match LAYERS.iter().position(|l| *l == root) {
                Some(theirs) if theirs > mine => faults.push(format!("{} (layer {first}) imports crate::{root}", rel.display())),
                Some(_) => {}
                // crate-root macros (`crate::refuse!`) are defined in core
                None if root == "refuse" => {}
                None => faults.push(format!("{}: crate::{root} is not a layer", rel.display())),
            }
        }
    }
    assert!(checked > 30, "only {checked} files checked: is src/ laid out in layer folders?");
    assert!(faults.is_empty(), "imports against the layer order:\n{}", faults.join("\n"));
}

#[test]
fn the_checker_sees_imports_and_skips_tests() {
    let code = non_test_code("use crate::core::units;\nfn f() { crate::{cli::run, rank::x}; }\n#[cfg(test)]\nmod tests {\n    use crate::cli;\n}\nmacro_rules! m { () => { $crate::core::x } }\n");
    assert_eq!(crate_roots(&code), ["core", "cli", "rank"]);
}

#[test]
fn no_source_cites_a_document_outside_the_repository() {
    let mut files = Vec::new();
    for d in ["src", "tests", "benches", "examples", "scripts"] {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(d);
        if p.is_dir() {
            rs_files(&p, &mut files);
        }
    }
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        // the needles are built so that this file does not contain them
        for needle in [concat!("SPEC", ".md"), concat!("SPEC ", "§"), concat!("the ", "SPEC")] {
            assert!(!text.contains(needle), "{} cites {needle:?}: cite docs/ARCHITECTURE.md or the original source", f.display());
        }
    }
}
