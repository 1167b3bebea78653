//! A canary artifact is trusted for nothing it says about itself. Artifacts
//! crafted from an honest one (loop counts, replay plan, sizes, declared
//! budget, stored values and source binding changed, then resealed so the
//! digest holds) are refused by `canary inspect` and `canary verify` before
//! anything expands or runs, under an address-space limit; the tolerance of
//! `values.budget` is the tool's, not the artifact's; every check that needs
//! no replay runs before the campaign; printed sizes are the expansion's.
mod common;
use commcanary::canary::artifact::{Canary, Histogram, Values};
use commcanary::canary::fold::Node;
use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `commcanary ARGS` under a 2 GiB address-space limit: an expansion built
/// from what an artifact claims aborts instead of taking the machine.
fn cc_limited(args: &[&str]) -> Output {
    Command::new("bash")
        .arg("-c")
        .arg("ulimit -v 2000000; exec \"$0\" \"$@\"")
        .arg(bin())
        .args(args)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
        .output()
        .expect("bash runs")
}

/// A 2-rank synthetic trace of `events` collectives (seed `seed`) and its compiled canary.
fn honest(dir: &Path, events: u32, seed: u32) -> (PathBuf, PathBuf, Canary) {
    let t = dir.join(format!("syn{events}-{seed}.json"));
    let c = dir.join(format!("syn{events}-{seed}.canary.json"));
    ok(&cc(&["synth", "--events", &events.to_string(), "--seed", &seed.to_string(), "--ranks", "2", "-o", s(&t)]));
    ok(&cc(&["canary", "compile", s(&t), "-o", s(&c)]));
    let art: Canary = serde_json::from_slice(&std::fs::read(&c).unwrap()).unwrap();
    (t, c, art)
}

/// The artifact changed by `edit`, resealed (its digest holds) and written.
fn crafted(dir: &Path, name: &str, base: &Canary, edit: &dyn Fn(&mut Canary)) -> PathBuf {
    let mut c = base.clone();
    edit(&mut c);
    let c = c.seal().unwrap();
    let p = dir.join(format!("{name}.json"));
    let _ = std::fs::remove_file(&p);
    c.write(&p).unwrap();
    p
}

fn spec(dir: &Path, configs: &[(&str, &str)]) -> PathBuf {
    let mut text = String::from(
        "name = \"small\"\nbackend = \"cpu\"\nranks = 2\nrepetitions = 2\nseed = 7\nblind = false\n\n[launcher]\nkind \
            = \"mpirun\"\nargs = [\"--oversubscribe\"]\n\n[workload]\nphases = \"replay\"\ntokens = 1\nlayers = \
                1\niters = 1\n\n[analysis]\ntie_policy = \"interval\"\nmin_effect_pct = 2.0\ndelta_pct = \
                    5.0\nbootstrap_resamples = 200\nbootstrap_seed = 1\n",
    );
    for (name, alg) in configs {
        text.push_str(&format!(
            "\n[[configs]]\nname = \"{name}\"\nenv = {{ OMPI_MCA_coll_libnbc_iallreduce_algorithm = \"{alg}\" }}\n"
        ));
    }
    let p = dir.join("spec.toml");
    std::fs::write(&p, text).unwrap();
    p
}

fn verify_args<'a>(trace: &'a str, art: &'a str, spec: &'a str, out: &'a str, baselines: bool) -> Vec<&'a str> {
    let mut v =
        vec!["canary", "verify", trace, art, "--configs", spec, "--passes", "1", "--phases", "replay", "-o", out];
    if baselines {
        v.push("--baselines");
    }
    v
}

/// An edit of an artifact.
type Edit = dyn Fn(&mut Canary);

fn main_loop_index(c: &Canary) -> usize {
    c.main_loop.as_ref().expect("the synthetic trace folds to a main loop")[0] as usize
}

fn set_main_count(c: &mut Canary, n: u64) {
    let m = main_loop_index(c);
    if let Node::Loop { count, .. } = &mut c.body[m] {
        *count = n;
    }
}

/// Loop counts, nested counts, the replay plan and the sizes, each changed
/// to several sizes (up to overflow of their product): refused by inspect
/// and by verify (with and without baselines) before any expansion or job,
/// leaving no output directory.
#[test]
fn an_artifact_whose_counts_or_claims_contradict_its_body_is_refused_before_anything_expands() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let (trace, _, base) = honest(d, 200, 1);
    let sp = spec(d, &[("nbc-ring", "1"), ("nbc-binomial", "2")]);
    let src_iters = base.replay.source_iterations;
    let mut cases: Vec<(String, PathBuf, &str)> = Vec::new();
    for it in [src_iters + 1, 1 << 32, 1 << 60, u64::MAX] {
        cases.push((
            format!("iterations {it}"),
            crafted(d, &format!("it{it}"), &base, &|c| c.replay.iterations = it),
            "BAD_STRUCTURE",
        ));
    }
    for n in [1u64 << 40, 1 << 60, u64::MAX] {
        // the main loop's count alone, and with the replay plan made to agree (then only the expansion bound is left)
        cases.push((
            format!("main count {n}"),
            crafted(d, &format!("count{n}"), &base, &|c| set_main_count(c, n)),
            "BAD_STRUCTURE",
        ));
        cases.push((
            format!("main count {n}, plan agreeing"),
            crafted(d, &format!("countplan{n}"), &base, &|c| {
                set_main_count(c, n);
                c.replay.source_iterations = n;
                c.replay.iterations = n;
            }),
            "OVER_LIMIT",
        ));
    }
    for (a, b) in [(1u64 << 32, 1u64 << 32), (1 << 20, 1 << 20), (u64::MAX, 2)] {
        cases.push((
            format!("nested {a} x {b}"),
            crafted(d, &format!("nested{a}x{b}"), &base, &|c| {
                let inner = match &c.body[main_loop_index(c)] {
                    Node::Loop { body, .. } => body.clone(),
                    Node::Op(_) => unreachable!(),
                };
                c.body = vec![Node::Loop { count: a, body: vec![Node::Loop { count: b, body: inner }] }];
                c.main_loop = None;
                c.replay.iterations = 1;
                c.replay.source_iterations = 1;
            }),
            "OVER_LIMIT",
        ));
    }
    for cpp in [vec![1u64 << 62, 1 << 62], vec![1, 1], vec![base.replay.collectives_per_pass[0]], vec![0, u64::MAX]] {
        cases.push((
            format!("collectives_per_pass {cpp:?}"),
            crafted(d, &format!("cpp{}", cpp[0]), &base, &|c| c.replay.collectives_per_pass = cpp.clone()),
            "BAD_STRUCTURE",
        ));
    }
    let sizes: [(&str, &Edit); 4] = [
        ("replayed_events 1", &|c| c.sizes.replayed_events = 1),
        ("artifact_events 1", &|c| c.sizes.artifact_events = 1),
        ("source_events + 1", &|c| c.sizes.source_events += 1),
        ("both sizes 1", &|c| {
            c.sizes.replayed_events = 1;
            c.sizes.artifact_events = 1;
        }),
    ];
    for (i, (what, edit)) in sizes.iter().enumerate() {
        cases.push((what.to_string(), crafted(d, &format!("sizes{i}"), &base, *edit), "BAD_STRUCTURE"));
    }
    let n = base.slots.len() as u32;
    let shapes: [(&str, &Edit); 5] = [
        ("main_loop names no loop", &|c| c.main_loop = Some(vec![5])),
        ("main_loop two deep", &|c| c.main_loop = Some(vec![0, 0])),
        ("body names a missing slot", &move |c| c.body.push(Node::Op(n + 7))),
        ("slot names a missing identity", &|c| c.slots[0].ranks[1].identity = 1 << 30),
        ("slot misses a rank", &|c| {
            c.slots[0].ranks.pop();
        }),
    ];
    for (i, (what, edit)) in shapes.iter().enumerate() {
        cases.push((what.to_string(), crafted(d, &format!("shape{i}"), &base, *edit), "BAD_STRUCTURE"));
    }
    for (i, (what, p, code)) in cases.iter().enumerate() {
        let o = cc_limited(&["canary", "inspect", s(p)]);
        let err = assert_refused(&o, code);
        assert!(err.contains(s(p)), "{what}: names the artifact: {err}");
        let out = d.join(format!("v{i}"));
        let o = cc_limited(&verify_args(s(&trace), s(p), s(&sp), s(&out), i % 2 == 0));
        let err = assert_refused(&o, code);
        assert!(!err.contains("memory allocation"), "{what}: {err}");
        assert!(!out.exists(), "{what}: refused before anything was written or run");
    }
}

/// Values scaled (x1.5, x3, x100) in each stored field, with the honest
/// budget and with a declared budget of 1000% or more; an artifact of
/// another trace with the source's binding copied in: none is granted
/// anything by its own declared budget. A declared budget that is not the
/// tool's for the artifact's method is refused at read; values outside the
/// tool's budget fail values.budget, which runs before any replay, so the
/// canary is refused STATIC_CHECK and nothing runs.
#[test]
fn the_value_budget_is_the_tools_and_is_judged_before_any_replay() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let (trace, _, base) = honest(d, 200, 1);
    let (_, _, other) = honest(d, 200, 2);
    let sp = spec(d, &[("nbc-ring", "1"), ("nbc-binomial", "2")]);
    let scale = |c: &mut Canary, field: usize, num: u64, den: u64| {
        for slot in &mut c.slots {
            for r in &mut slot.ranks {
                let v = [&mut r.gap_ns, &mut r.compute_ns, &mut r.span_ns].into_iter().nth(field).unwrap();
                if let Values::Histogram(h) = v {
                    let mut merged: Vec<(u64, u64)> = Vec::new();
                    for &(v, k) in &h.buckets {
                        let v = v * num / den;
                        match merged.last_mut() {
                            Some(last) if last.0 == v => last.1 += k,
                            _ => merged.push((v, k)),
                        }
                    }
                    h.buckets = merged;
                }
            }
        }
    };
    let mut n = 0;
    for field in [0usize, 2] {
        for (num, den) in [(3u64, 2u64), (3, 1), (100, 1)] {
            for declared in [None, Some(10_000_000u64), Some(1_000_000_000)] {
                n += 1;
                let p = crafted(d, &format!("scaled{n}"), &base, &|c| {
                    scale(c, field, num, den);
                    if let Some(ppm) = declared {
                        c.budget.max_relative_error_ppm = ppm;
                    }
                });
                let out = d.join(format!("v-scaled{n}"));
                let o = cc_limited(&verify_args(s(&trace), s(&p), s(&sp), s(&out), false));
                let what = format!("field {field} x{num}/{den}, declared {declared:?}");
                match declared {
                    Some(_) => {
                        assert!(assert_refused(&o, "BAD_STRUCTURE").contains("max_relative_error_ppm"), "{what}")
                    }
                    None => assert!(assert_refused(&o, "STATIC_CHECK").contains("values.budget"), "{what}"),
                }
                assert!(!out.exists(), "{what}: nothing ran");
            }
        }
    }
    // another trace's canary with this trace's binding copied in
    for declared in [None, Some(1_000_000_000u64)] {
        let p = crafted(d, &format!("swapped{declared:?}"), &other, &|c| {
            c.source = base.source.clone();
            if let Some(ppm) = declared {
                c.budget.max_relative_error_ppm = ppm;
            }
        });
        let out = d.join(format!("v-swapped{declared:?}"));
        let o = cc_limited(&verify_args(s(&trace), s(&p), s(&sp), s(&out), false));
        let code = if declared.is_some() { "BAD_STRUCTURE" } else { "STATIC_CHECK" };
        assert_refused(&o, code);
        assert!(!out.exists(), "nothing ran");
    }
}

/// Fabricated gaps (59 s, 1 s, 50 ms where the source's are ~0.2 ms) make
/// values.budget fail before any replay: refused at once, nothing written.
#[test]
fn an_artifact_failing_a_static_check_is_not_replayed() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let (trace, _, base) = honest(d, 200, 1);
    let sp = spec(d, &[("nbc-ring", "1"), ("nbc-binomial", "2")]);
    for gap in [59_000_000_000u64, 1_000_000_000, 50_000_000] {
        let p = crafted(d, &format!("gaps{gap}"), &base, &|c| {
            for slot in &mut c.slots {
                let occ = slot.occurrences;
                for r in &mut slot.ranks {
                    r.gap_ns = Values::Histogram(Histogram { buckets: vec![(gap, occ)] });
                }
            }
        });
        let out = d.join(format!("v-gaps{gap}"));
        let o = cc_limited(&verify_args(s(&trace), s(&p), s(&sp), s(&out), false));
        let err = assert_refused(&o, "STATIC_CHECK");
        assert!(err.contains("values.budget") && err.contains("nothing was run"), "{err}");
        assert!(!out.exists(), "gap {gap}: nothing written");
    }
}

/// An honest canary verified for real: every size printed is the
/// expansion's (the per-rank collectives of the replay trace it wrote).
#[test]
fn printed_sizes_are_the_expansions() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let (trace, art, base) = honest(d, 200, 1);
    let sp = spec(d, &[("nbc-ring", "1"), ("nbc-binomial", "2")]);
    let out = d.join("v");
    // -v: the whole text, with each candidate's size line
    let mut args = verify_args(s(&trace), s(&art), s(&sp), s(&out), false);
    args.push("-v");
    let text = ok(&cc_root(&args));
    let replay: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("inputs/canary.json")).unwrap()).unwrap();
    let replayed: usize =
        replay["ranks"].as_array().unwrap().iter().map(|r| r["collectives"].as_array().unwrap().len()).sum();
    let stored = base.slots.len() * 2;
    let line = text.lines().skip_while(|l| !l.starts_with("canary [")).nth(1).unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.contains(&format!("size: {stored} events stored (source/artifact {:.1}x)", 400.0 / stored as f64)),
        "{line}"
    );
    assert!(
        line.contains(&format!("{replayed} collectives per pass (source/candidate {:.1}x)", 400.0 / replayed as f64)),
        "{line}"
    );
    let o = ok(&cc(&["canary", "inspect", s(&art)]));
    assert!(
        o.contains(&format!("= {stored} events stored")) && o.contains(&format!(": {replayed} collectives per pass")),
        "{o}"
    );
}

/// Options that make an invalid campaign (unknown or empty phases) are
/// refused before the first file is written: nothing blocks the retry.
#[test]
fn options_that_make_an_invalid_campaign_leave_nothing_behind() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let (trace, art, _) = honest(d, 60, 1);
    let sp = spec(d, &[("nbc-ring", "1"), ("nbc-binomial", "2")]);
    for (i, phases) in ["bogus", "", "replay,nonsense"].iter().enumerate() {
        let out = d.join(format!("v{i}"));
        let o = cc_root(&[
            "canary",
            "verify",
            s(&trace),
            s(&art),
            "--configs",
            s(&sp),
            "--passes",
            "1",
            "--phases",
            phases,
            "-o",
            s(&out),
        ]);
        assert!(!o.status.success(), "--phases {phases:?} refused");
        assert!(String::from_utf8_lossy(&o.stderr).contains("refused["), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(!out.exists(), "--phases {phases:?}: nothing written");
    }
}
