//! `campaign analyze` on the README's CPU demo campaign (issue #6 acceptance 4):
//! report.json with every section, SVG plots that a real SVG engine parses and
//! renders, a seeded re-run that reproduces the bytes, and a report that is
//! never replaced.
mod common;
use common::*;

/// Parse with usvg and render with resvg; return the share of painted pixels.
fn painted_share(svg: &str) -> f64 {
    let tree = resvg::usvg::Tree::from_str(svg, &resvg::usvg::Options::default()).expect("a valid SVG");
    let size = tree.size().to_int_size();
    let mut pm = resvg::tiny_skia::Pixmap::new(size.width(), size.height()).unwrap();
    resvg::render(&tree, resvg::tiny_skia::Transform::default(), &mut pm.as_mut());
    let painted = pm
        .pixels()
        .iter()
        .filter(|p| p.alpha() > 0 && !(p.red() == 255 && p.green() == 255 && p.blue() == 255))
        .count();
    painted as f64 / pm.pixels().len() as f64
}

#[test]
fn the_demo_campaign_report_and_its_plots() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("demo");
    let ds = d.to_str().unwrap();
    let spec = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/cpu-demo.toml");
    ok(&cc(&["campaign", "plan", spec, "-o", ds]));
    ok(&cc_root(&["campaign", "exec", ds]));
    ok(&cc(&["campaign", "select", ds]));
    ok(&cc(&["campaign", "verify", ds]));
    let text = ok(&cc(&["campaign", "analyze", ds]));
    // the short answer by default (at most 15 lines and the line naming what was written), the whole text with -v
    assert!(
        text.lines().count() <= 16
            && text.contains("P(best)")
            && text.contains("canary ")
            && text.contains("controls: a-a: "),
        "{text}"
    );
    let whole = ok(&cc(&["campaign", "analyze", "-v", ds]));
    assert!(whole.contains("P(best)") && whole.contains("canary ") && whole.contains("control a-a"), "{whole}");
    let rep = d.join("report");
    let bytes = std::fs::read(rep.join("report.json")).unwrap();
    let r: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(r["format_version"], 7);
    // not a trace campaign: no trace claim, and the element type the all-reduces ran in
    assert!(r["context"].get("trace").is_none(), "{}", r["context"]);
    assert!(
        r["context"]["not_represented"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x == "collectives other than all-reduce (float32 sum)"),
        "{}",
        r["context"]
    );
    assert!(r["producer"].as_str().unwrap().starts_with("commcanary "));
    // one job per configuration and round: the spec's repetitions
    let rounds = toml::from_str::<toml::Value>(&std::fs::read_to_string(spec).unwrap()).unwrap()["repetitions"]
        .as_integer()
        .unwrap();
    let phases = r["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 6, "all six phases");
    for p in phases {
        let rows = p["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 5);
        assert_eq!(p["pairs"].as_array().unwrap().len(), 10, "n(n-1)/2 pairs");
        assert_eq!(p["pairs_p99"].as_array().unwrap().len(), 10, "the same on the p99");
        // simultaneous: the 10 intervals of a family hold together at 95%, each at 1 - 0.05/10
        assert_eq!(p["family_pairs"], 10);
        assert!((p["pair_coverage"].as_f64().unwrap() - 0.995).abs() < 1e-12, "{}", p["pair_coverage"]);
        for key in ["p_best", "p_worst"] {
            let sum: f64 = rows.iter().map(|x| x[key].as_f64().unwrap()).sum();
            assert!((sum - 1.0).abs() < 1e-9, "{key} sums to {sum}");
        }
        assert!(
            rows.iter().all(|x| x["jobs"] == rounds && x["median_us"].as_f64().unwrap() > 0.0),
            "one job per round ({rounds}): {rows:?}"
        );
        // one decision rule: a decided relation lies beyond the minimum effect (2%) on its own interval
        for pr in p["pairs"].as_array().unwrap().iter().chain(p["pairs_p99"].as_array().unwrap()) {
            let (lo, hi) = (pr["ci_low_pct"].as_f64().unwrap(), pr["ci_high_pct"].as_f64().unwrap());
            let want = if hi < -2.0 {
                "a_faster"
            } else if lo > 2.0 {
                "b_faster"
            } else {
                "not_distinguished"
            };
            assert_eq!(pr["relation"], want, "{pr}");
        }
    }
    assert_eq!(r["proxy_vs_blocking"].as_array().unwrap().len(), 5);
    let kinds: Vec<&str> = r["controls"].as_array().unwrap().iter().map(|c| c["kind"].as_str().unwrap()).collect();
    for k in ["a-a", "known-bad", "injected-skew"] {
        assert!(kinds.contains(&k), "control {k} reported: {kinds:?}");
    }
    assert_eq!(kinds.iter().filter(|k| **k == "a-a").count(), 6, "A/A judged in every phase");
    // the six A/A controls are one family at 95%: each at 1 - 0.05/6, or at the phase's pair level (99.5%) when higher
    assert_eq!(r["aa_family"]["controls"], 6, "{}", r["aa_family"]);
    assert!((r["aa_family"]["level"].as_f64().unwrap() - (1.0 - 0.05 / 6.0)).abs() < 1e-12, "{}", r["aa_family"]);
    assert!(whole.contains("A/A family: the 6 A/A controls"), "{whole}");
    for c in r["controls"].as_array().unwrap().iter().filter(|c| c["kind"] == "a-a") {
        // an A/A may be inconclusive on a loaded machine, never decided
        assert_ne!(c["outcome"], "misbehaved", "{c}");
        assert!((c["level"].as_f64().unwrap() - 0.995).abs() < 1e-12, "{c}");
        assert!(c["observed"].as_str().unwrap().contains("one of 6 A/A controls judged together at 95%"), "{c}");
    }
    for c in r["controls"].as_array().unwrap() {
        // every control says the level it was judged at; the skew detector reads no interval
        assert_eq!(c["level"].is_null(), c["kind"] == "injected-skew", "{c}");
    }
    let claim = r["canary"]["statement"].as_str().unwrap();
    for needle in [
        "Under manifest",
        "candidate nbc-ring vs baseline nbc-binomial",
        "Student-t interval",
        "Controls:",
        "Dimensions not represented:",
    ] {
        assert!(claim.contains(needle), "{needle:?} in {claim}");
    }
    assert!(
        r["warnings"].as_array().unwrap().iter().any(|w| w.as_str().unwrap().starts_with("multiple comparisons")),
        "120 intervals warrant the warning"
    );
    // every plot parses and renders to a picture, and names what it shows
    let plots: Vec<String> = r["plots"].as_array().unwrap().iter().map(|p| p.as_str().unwrap().to_string()).collect();
    assert_eq!(
        plots.len(),
        2 + 1 + 1 + 6 + 6,
        "slopegraph, P(best), proxy-vs-truth, clock offsets, one distribution and one ECDF per phase (no GPU timeline \
            on CPU): {plots:?}"
    );
    for p in &plots {
        let svg = std::fs::read_to_string(rep.join(p)).unwrap();
        let share = painted_share(&svg);
        assert!(share > 0.01, "{p}: only {share} of the pixels painted");
    }
    let slope = std::fs::read_to_string(rep.join("ranks-slopegraph.svg")).unwrap();
    assert!(
        slope.matches("<text").count() >= 6
            && ["isolated", "overlap", "nbc-ring-delayed"].iter().all(|w| slope.contains(w)),
        "axis and line labels in the slopegraph"
    );
    // seeded: a re-run reproduces the bytes; a changed report is never replaced
    ok(&cc(&["campaign", "analyze", ds]));
    assert_eq!(std::fs::read(rep.join("report.json")).unwrap(), bytes);
    std::fs::write(rep.join("report.json"), b"{}").unwrap();
    let o = cc(&["campaign", "analyze", ds]);
    assert!(assert_refused(&o, "ALREADY_EXISTS").contains("never replaced"));
    assert_eq!(std::fs::read(rep.join("report.json")).unwrap(), b"{}");
    // power from the campaign's own noise, and a campaign replicates itself
    let power = ok(&cc(&["campaign", "power", ds]));
    assert!(
        power.contains("to resolve δ = 2% with 80% power you need") && power.contains("residual job noise"),
        "{power}"
    );
    assert!(
        power.contains("in the pair table and the known-bad controls (10 pairs, each interval at 99.500%"),
        "{power}"
    );
    let repl = ok(&cc(&["campaign", "replicate", ds, ds]));
    assert!(repl.contains(" 0 contradicted, 0 not confirmed") && !repl.contains("FLAG"), "{repl}");
    // --report-dir writes elsewhere
    let other = t.path().join("rep2");
    ok(&cc(&["campaign", "analyze", ds, "--report-dir", other.to_str().unwrap()]));
    assert_eq!(std::fs::read(other.join("report.json")).unwrap(), bytes);
}
