#!/usr/bin/env bash
# How many lines a change adds to and removes from src/, at equal layout.
#
#   bash scripts/dev/diff-at-equal-layout.sh BASE
#
# A re-layout (a narrower max_width) moves thousands of lines without changing
# what the code does, so `git diff --shortstat BASE -- src` counts it with the
# change. This lays BASE's src/ out the way the tree is laid out now (today's
# rustfmt.toml; then comment lines and string literals past 120 columns wrapped
# at a space, as the 120-column re-layout did, and formatted once more), and
# prints both diff stats and both line counts. Needs rustfmt and python3.
set -euo pipefail
base=${1:?usage: diff-at-equal-layout.sh BASE}
cd "$(dirname "$0")/../.."
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
git archive "$base" src | tar -x -C "$w"
for pass in 1 2; do
  (cd "$w/src" && rustfmt --config-path "$OLDPWD/rustfmt.toml" lib.rs main.rs)
  echo "pass $pass: $(python3 scripts/dev/wrap120.py "$w/src")"
done
lines() { find "$1" -name '*.rs' -print0 | xargs -0 cat | wc -l; }
echo "src/ lines: $base as written $(git archive "$base" src | tar -xO | wc -l), $base at today's layout $(lines "$w/src"), now $(lines src)"
echo "lines past 120 columns left in $base at today's layout: $(find "$w/src" -name '*.rs' -print0 | xargs -0 awk 'length($0) > 120' | wc -l)"
echo "literal:         $(git diff --shortstat "$base" -- src)"
echo "at equal layout: $(git diff --no-index --shortstat "$w/src" src || true)"
