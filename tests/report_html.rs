//! `report.html` rendered in headless Chromium (Debian's `chromium`, which
//! `scripts/setup.sh --tests` installs): the page of a committed campaign
//! report shows the short answer, every phase's ranking and the plots, fetches
//! nothing from the network, and renders to a screenshot.
use commcanary::report::{html, plots};
use std::path::Path;
use std::process::Command;

fn demo_page(dir: &Path) -> std::path::PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/reports/demo-loaded.report.json");
    let r: commcanary::analysis::Report = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    let plots = plots::all(&r).unwrap();
    for (name, svg) in &plots {
        std::fs::write(dir.join(name), svg).unwrap();
    }
    let html = html::page(&r, &plots, &html::evidence_links());
    let page = dir.join("report.html");
    std::fs::write(&page, html).unwrap();
    page
}

fn chromium() -> &'static str {
    let c = "/usr/bin/chromium";
    assert!(
        Path::new(c).exists(),
        "{c} is missing: `bash scripts/setup.sh --tests` installs Debian's chromium, which \
        this test renders the page in"
    );
    c
}

fn headless(profile: &Path) -> Vec<String> {
    [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!("--user-data-dir={}", profile.display())])
    .collect()
}

#[test]
fn the_page_is_self_contained() {
    let d = tempfile::tempdir().unwrap();
    let html = std::fs::read_to_string(demo_page(d.path())).unwrap();
    for fetch in ["src=\"http", "href=\"http", "src='http", "<link", "url(http", "@import", "<script src", "<iframe"] {
        assert!(!html.contains(fetch), "the page must fetch nothing: found {fetch:?}");
    }
    assert!(html.matches("<svg").count() >= 3, "the plots are inline");
    assert!(html.contains("<table class=\"sortable\" id=\"ranking-blocking\">"));
}

#[test]
fn chromium_shows_the_ranking_and_the_plots() {
    let d = tempfile::tempdir().unwrap();
    let page = demo_page(d.path());
    let url = format!("file://{}", page.display());
    let mut args = headless(&d.path().join("profile-dom"));
    args.extend(["--virtual-time-budget=2000".to_string(), "--dump-dom".to_string(), url.clone()]);
    let o = Command::new(chromium()).args(&args).output().unwrap();
    assert!(o.status.success(), "chromium --dump-dom: {}", String::from_utf8_lossy(&o.stderr));
    let dom = String::from_utf8_lossy(&o.stdout);
    // the short answer first, then the blocking phase's ranking with its rows, and the plots
    let answer = dom.find("id=\"answer\"").expect("the short answer");
    let blocking = dom.find("id=\"ranking-blocking\"").expect("the blocking ranking");
    assert!(answer < blocking, "the answer comes first");
    assert!(dom.contains("pick (blocking): nbc-binomial"), "the pick is shown");
    for label in ["nbc-binomial", "nbc-recursive-doubling", "nbc-ring", "nbc-ring-again", "nbc-ring-delayed"] {
        assert!(dom[blocking..].contains(&format!("<td>{label}</td>")), "{label} in the ranking table");
    }
    assert!(dom.contains("id=\"plot-ranks-slopegraph.svg\"") && dom.contains("<svg"), "the plots are in the page");
    // and it renders: a screenshot of the page
    let shot = d.path().join("page.png");
    let mut args = headless(&d.path().join("profile-shot"));
    args.extend([format!("--screenshot={}", shot.display()), "--window-size=1280,1600".into(), url]);
    let o = Command::new(chromium()).args(&args).output().unwrap();
    assert!(o.status.success(), "chromium --screenshot: {}", String::from_utf8_lossy(&o.stderr));
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG") && png.len() > 20_000, "a screenshot of {} bytes", png.len());
}
