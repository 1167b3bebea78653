//! A newcomer's first hour (issue 29, items 1, 6, 8, 9): outputs land where
//! `-o` says even in a fresh checkout, with the mode the umask gives; every
//! output flag is spelled `-o/--out`; help cannot go stale; user-facing names
//! in output; a campaign that cannot run here is refused before any cell.
mod common;
use commcanary::backend::cuda;
use commcanary::cli::schema;
use common::{assert_refused, cc, ok};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/pytorch-2.11-tp2-h200");

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// Item 1 and 9: `import kineto … -o out/tp2.comm.json` with no `out/`
/// (the README's first GPU command failed so); the file's mode is the
/// umask's, as the directory's is.
#[test]
fn import_creates_missing_directories_and_its_file_follows_the_umask() {
    let t = tempfile::tempdir().unwrap();
    let dest = t.path().join("out/deeper/tp2.comm.json");
    let o = cc(&[
        "import",
        "kineto",
        &format!("{FIXTURE}/kineto.rank-0.json.gz"),
        &format!("{FIXTURE}/kineto.rank-1.json.gz"),
        "-o",
        dest.to_str().unwrap(),
    ]);
    ok(&o);
    assert!(dest.is_file());
    let (dir_mode, file_mode) = (mode(&t.path().join("out/deeper")), mode(&dest));
    assert_eq!(
        file_mode,
        dir_mode & 0o666,
        "file {file_mode:o} against directory {dir_mode:o}: files follow the umask as directories do"
    );
    // Item 8: the printed counts use the trace's own dtype names, not Rust's.
    let err = String::from_utf8_lossy(&o.stderr).into_owned() + &String::from_utf8_lossy(&o.stdout);
    assert!(err.contains("32768 bf16 on \"1\""), "{err}");
    assert!(!err.contains("Bf16") && !err.contains("F32"), "{err}");
}

/// Item 8: one spelling per output flag. Every option that names where
/// output goes (`--out`, `--output`) is `-o/--out`; the old `--output`
/// still parses (a hidden alias), so scripts keep working.
#[test]
fn every_output_flag_is_spelled_o_out() {
    fn walk(cmd: &clap::Command, path: &str, bad: &mut Vec<String>, seen: &mut usize) {
        for a in cmd.get_arguments() {
            let id = a.get_id().as_str();
            if id == "out" || id == "output" {
                *seen += 1;
                if a.get_short() != Some('o') || a.get_long() != Some("out") {
                    bad.push(format!("{path}: {id} is -{:?}/--{:?}", a.get_short(), a.get_long()));
                }
            }
        }
        for s in cmd.get_subcommands() {
            walk(s, &format!("{path} {}", s.get_name()), bad, seen);
        }
    }
    let (mut bad, mut seen) = (Vec::new(), 0);
    walk(&<commcanary::cli::Cli as clap::CommandFactory>::command(), "commcanary", &mut bad, &mut seen);
    assert!(seen >= 12, "only {seen} output options found");
    assert!(bad.is_empty(), "output flags not spelled -o/--out:\n{}", bad.join("\n"));
    use clap::Parser;
    for argv in [
        &["commcanary", "import", "kineto", "a.json", "--output", "x.json"][..],
        &["commcanary", "campaign", "plan", "s.toml", "--output", "d"],
        &["commcanary", "rank", "-o", "d"],
        &["commcanary", "replay-trace", "t.json", "-o", "d"],
    ] {
        commcanary::cli::Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    }
}

/// Item 8: `validate` takes `rank`'s sweep flags, and both give up on a hung
/// collective after the same default time.
#[test]
fn validate_takes_ranks_sweep_flags_and_the_same_timeout_default() {
    use clap::Parser;
    let argv =
        ["commcanary", "validate", "--record-reference", "-b", "8", "-e", "1MiB", "-f", "4", "-n", "5", "-w", "1"];
    match commcanary::cli::Cli::try_parse_from(argv).unwrap().command {
        commcanary::cli::Command::Validate(a) => {
            assert_eq!(
                (a.min_bytes.as_deref(), a.max_bytes.as_deref(), a.step_factor, a.iters, a.warmup_iters),
                (Some("8"), Some("1MiB"), Some(4), Some(5), Some(1))
            );
        }
        other => panic!("{other:?}"),
    }
    let cmd = <commcanary::cli::Cli as clap::CommandFactory>::command();
    let default = |sub: &str| -> String {
        let s = cmd.find_subcommand(sub).unwrap();
        let a = s.get_arguments().find(|a| a.get_long() == Some("collective-timeout-s")).unwrap();
        a.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect()
    };
    assert_eq!(default("rank"), default("validate"));
    // nccl-tests' -c
    commcanary::cli::Cli::try_parse_from(["commcanary", "rank", "-c", "1"]).unwrap();
}

/// Item 8: help that cannot go stale: the top level names every campaign
/// verb, and `schema --help` every schema.
#[test]
fn help_names_every_campaign_verb_and_every_schema() {
    let top = ok(&cc(&["--help"]));
    let line = top.lines().find(|l| l.trim_start().starts_with("campaign ")).expect("a campaign line in --help");
    let cmd = <commcanary::cli::Cli as clap::CommandFactory>::command();
    let campaign = cmd.find_subcommand("campaign").unwrap();
    let verbs: Vec<&str> = campaign.get_subcommands().map(|s| s.get_name()).collect();
    assert!(verbs.len() >= 11, "{verbs:?}");
    for v in &verbs {
        let listed = line.split(|c: char| c == ',' || c == ':' || c.is_whitespace()).any(|w| w == *v);
        assert!(listed, "`commcanary --help` does not name campaign verb {v}: {line}");
    }
    let schema = ok(&cc(&["schema", "--help"]));
    for (name, _) in schema::SCHEMAS {
        assert!(schema.contains(name), "`schema --help` does not name {name}:\n{schema}");
    }
}

/// Item 6: a `cuda` campaign launched by mpirun on a host without a usable GPU
/// is refused before any cell runs: `run` before it plans, `exec` before it
/// launches a job (it launched all 20 cells, each refused the same way).
#[test]
fn a_campaign_that_cannot_run_here_is_refused_before_any_cell() {
    if cuda::unavailable_reason().is_none() {
        eprintln!("skipped: a GPU is usable here, so a cuda campaign can run (the refusal needs a host without one)");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let spec = t.path().join("cuda.toml");
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/gpu-controls.toml")).unwrap();
    std::fs::write(&spec, text).unwrap();
    let dir = t.path().join("c");
    let o = cc(&["campaign", "run", spec.to_str().unwrap(), "-o", dir.to_str().unwrap()]);
    let text = assert_refused(&o, "BAD_ARGUMENT");
    assert!(text.contains("backend cuda cannot run on this host") && text.contains("no cell was launched"), "{text}");
    assert!(!dir.exists(), "nothing is planned for a campaign that cannot run here");
    // plan alone freezes the manifest (it may be executed on another host); exec here refuses
    ok(&cc(&["campaign", "plan", spec.to_str().unwrap(), "-o", dir.to_str().unwrap()]));
    let o = cc(&["campaign", "exec", dir.to_str().unwrap()]);
    assert_refused(&o, "BAD_ARGUMENT");
    let attempts = std::fs::read_to_string(dir.join("attempts.jsonl")).unwrap_or_default();
    assert!(attempts.trim().is_empty(), "no attempt was made:\n{attempts}");
}

/// Item 7: `rank --phases isolated -b … -e … -f 4 -c 1` ends with an
/// nccl-tests-like table: units in the header, count/type/redop/root
/// columns, every size checked (the CPU path checked only the first size,
/// `#wrong n/a` for the rest), and the "Avg bus bandwidth" footer.
#[test]
fn rank_isolated_ends_with_an_nccl_tests_table_every_size_checked() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("runs");
    let o = common::mpirun(
        2,
        &[
            "rank",
            "--backend",
            "cpu",
            "--phases",
            "isolated",
            "-b",
            "8",
            "-e",
            "2KiB",
            "-f",
            "4",
            "-n",
            "5",
            "-w",
            "1",
            "-c",
            "1",
            "-o",
            out.to_str().unwrap(),
        ],
    );
    let stdout = ok(&o);
    let header =
        stdout.lines().find(|l| l.contains("size(B)")).unwrap_or_else(|| panic!("no per-size table:\n{stdout}"));
    for col in ["count(elts)", "type", "redop", "root", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong"] {
        assert!(header.contains(col), "{col} missing from {header}");
    }
    let rows: Vec<&str> =
        stdout.lines().skip_while(|l| !l.contains("size(B)")).skip(1).take_while(|l| !l.starts_with('#')).collect();
    let sizes: Vec<&str> = rows.iter().map(|r| r.split_whitespace().next().unwrap()).collect();
    assert_eq!(sizes, ["8", "32", "128", "512", "2048"], "{stdout}");
    for r in &rows {
        let w: Vec<&str> = r.split_whitespace().collect();
        assert_eq!((w[3], w[4]), ("sum", "-1"), "{r}");
        assert_eq!(w[9], "0", "every size is checked and right: {r}");
    }
    assert!(stdout.contains("# Avg bus bandwidth    : "), "{stdout}");
    let run = std::fs::read_dir(&out).unwrap().next().unwrap().unwrap().path();
    let j = common::join_json(&run);
    for r in j["isolated_sizes"].as_array().unwrap() {
        assert_eq!(r["wrong_elements"], 0, "{r}");
        assert_eq!(r["count"].as_u64().unwrap() * 2, r["bytes"].as_u64().unwrap(), "bf16 elements: {r}");
        assert_eq!(r["dtype"], "bf16");
    }
}

/// Item 12: `join` pointed at an `--out` root names the runs it holds
/// instead of calling the run incomplete.
#[test]
fn join_on_an_out_root_lists_its_runs() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("runs");
    let run = common::run_rank(2, &out, &["--phases", "isolated", "-b", "1KiB", "-e", "4KiB", "-n", "2", "-w", "0"]);
    let o = cc(&["join", out.to_str().unwrap()]);
    let text = assert_refused(&o, "NO_SUCH_INPUT");
    assert!(text.contains("is not a run but holds 1 run(s)") && text.contains(run.to_str().unwrap()), "{text}");
}

/// Item 11: `replay-trace` prints every rank's summary (rank 1's gaps were
/// unseen), with a per-kind time p50/p99; output goes to `-o`.
#[test]
fn replay_trace_prints_every_ranks_summary_with_per_kind_times() {
    let t = tempfile::tempdir().unwrap();
    let trace = t.path().join("tp2.comm.json");
    ok(&cc(&[
        "import",
        "kineto",
        &format!("{FIXTURE}/kineto.rank-0.json.gz"),
        &format!("{FIXTURE}/kineto.rank-1.json.gz"),
        "-o",
        trace.to_str().unwrap(),
    ]));
    let out = t.path().join("replay");
    let o = common::mpirun(
        2,
        &["replay-trace", trace.to_str().unwrap(), "-o", out.to_str().unwrap(), "--check", "--pace", "none"],
    );
    let stdout = ok(&o);
    for rank in 0..2 {
        let kind = if rank == 0 { "send" } else { "recv" };
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(&format!("rank {rank}: 32 x all_reduce bf16 on \"1\", 32 checked; time p50 "))),
            "rank {rank}:\n{stdout}"
        );
        assert!(
            stdout.lines().any(|l| l.starts_with(&format!("rank {rank}: 1 x {kind} bf16"))),
            "rank {rank}:\n{stdout}"
        );
        assert!(out.join(format!("replay-trace.rank-{rank}.json")).is_file());
    }
}
