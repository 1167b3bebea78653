//! Loop folding: a symbol sequence as a tree of loops (pure, no I/O).
//!
//! Consumes a sequence of symbols (one per collective, equal symbols = equal
//! operation identity on every rank). Produces a list of [`Node`]s whose
//! expansion is exactly the input: a block repeated `count` times becomes one
//! `Loop` over the block's own folded form, nested where the block itself
//! repeats; at most [`MAX_CANDIDATES`] block comparisons per symbol. Refuses
//! nothing. Method: docs/METHODS.md, "Loop folding".
use serde::{Deserialize, Serialize};

/// Candidate periods tried at one position.
pub const MAX_CANDIDATES: usize = 64;

/// Longest block searched for repetition (symbols).
pub(crate) const MAX_PERIOD: usize = 1 << 16;

/// One node of a folded sequence.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Node {
    /// One operation: an index into the artifact's slots.
    Op(u32),
    /// A block repeated `count` times.
    Loop {
        /// Repetitions.
        count: u64,
        /// The block.
        body: Vec<Node>,
    },
}

impl Node {
    /// Symbols this node expands to.
    pub fn len(&self) -> u64 {
        match self {
            Node::Op(_) => 1,
            Node::Loop { count, body } => count.saturating_mul(body.iter().map(Node::len).sum::<u64>()),
        }
    }
    /// Whether it expands to nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Leaves (operations) stored, counting each once however often it repeats.
    pub fn leaves(&self) -> u64 {
        match self {
            Node::Op(_) => 1,
            Node::Loop { body, .. } => body.iter().map(Node::leaves).sum(),
        }
    }
}

struct Hashes {
    pre: Vec<u64>,
    pow: Vec<u64>,
}

const BASE: u64 = 0x100000001b3;

impl Hashes {
    fn new(s: &[u64]) -> Self {
        let mut pre = Vec::with_capacity(s.len() + 1);
        let mut pow = Vec::with_capacity(s.len() + 1);
        pre.push(0u64);
        pow.push(1u64);
        for (i, &x) in s.iter().enumerate() {
            pre.push(pre[i].wrapping_mul(BASE).wrapping_add(x.wrapping_mul(0x9e3779b97f4a7c15).wrapping_add(1)));
            pow.push(pow[i].wrapping_mul(BASE));
        }
        Hashes { pre, pow }
    }
    fn of(&self, a: usize, b: usize) -> u64 {
        self.pre[b].wrapping_sub(self.pre[a].wrapping_mul(self.pow[b - a]))
    }
}

/// How often `s[i..i+p]` repeats back to back from `i` (at least 1).
fn repeats(s: &[u64], h: &Hashes, i: usize, p: usize) -> usize {
    let block = h.of(i, i + p);
    let mut n = 1;
    while i + (n + 1) * p <= s.len()
        && h.of(i + n * p, i + (n + 1) * p) == block
        && s[i + n * p..i + (n + 1) * p] == s[i..i + p]
    {
        n += 1;
    }
    n
}

/// Fold a symbol sequence into loops; leaves carry `leaf(position)` for
/// their first occurrence's position (the caller maps positions to slots).
pub fn fold(s: &[u64]) -> Vec<FoldNode> {
    let h = Hashes::new(s);
    // next occurrence of each position's symbol
    let mut next = vec![usize::MAX; s.len()];
    let mut last: std::collections::HashMap<u64, usize> = std::collections::HashMap::new();
    for i in (0..s.len()).rev() {
        if let Some(&j) = last.get(&s[i]) {
            next[i] = j;
        }
        last.insert(s[i], i);
    }
    fold_range(s, &h, &next, 0, s.len())
}

/// A folded node over positions of the input: a leaf names the position it stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FoldNode {
    /// The symbol at this position (and, inside a loop, at the same offset of every repetition).
    Leaf(usize),
    /// `count` repetitions of the block starting at `start`, of `period` symbols.
    Loop {
        /// First position of the first repetition.
        start: usize,
        /// Symbols per repetition.
        period: usize,
        /// Repetitions.
        count: usize,
        /// The first repetition, folded.
        body: Vec<FoldNode>,
    },
}

fn fold_range(s: &[u64], h: &Hashes, next: &[usize], from: usize, to: usize) -> Vec<FoldNode> {
    let mut out = Vec::new();
    let mut i = from;
    while i < to {
        let mut best: Option<(usize, usize)> = None; // (period, count)
        let mut j = next[i];
        let mut tried = 0;
        while j < to && tried < MAX_CANDIDATES {
            let p = j - i;
            if p > MAX_PERIOD || i + 2 * p > to {
                break;
            }
            let n = repeats(&s[..to], h, i, p);
            if n >= 2 && best.is_none_or(|(bp, bn)| p * n > bp * bn) {
                best = Some((p, n));
            }
            tried += 1;
            j = next[j];
        }
        match best {
            Some((p, n)) => {
                let body = fold_range(s, h, next, i, i + p);
                out.push(FoldNode::Loop { start: i, period: p, count: n, body });
                i += p * n;
            }
            None => {
                out.push(FoldNode::Leaf(i));
                i += 1;
            }
        }
    }
    out
}

/// Expand folded nodes back into positions of the first occurrences (for tests and checks).
pub fn expand_positions(nodes: &[FoldNode], out: &mut Vec<usize>) {
    for n in nodes {
        match n {
            FoldNode::Leaf(p) => out.push(*p),
            FoldNode::Loop { count, body, .. } => {
                for _ in 0..*count {
                    expand_positions(body, out);
                }
            }
        }
    }
}

/// Symbols a folded node covers.
pub fn covered(n: &FoldNode) -> usize {
    match n {
        FoldNode::Leaf(_) => 1,
        FoldNode::Loop { period, count, .. } => period * count,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn roundtrip(s: &[u64]) -> Vec<FoldNode> {
        let f = fold(s);
        let mut pos = Vec::new();
        expand_positions(&f, &mut pos);
        let back: Vec<u64> = pos.iter().map(|&p| s[p]).collect();
        assert_eq!(back, s, "folding must be lossless");
        f
    }

    #[test]
    fn a_token_of_layers_repeated_becomes_one_loop_with_a_nested_body() {
        // 256 tokens of 32 layers whose sizes cycle with period 3 (32 is not a multiple of 3)
        let s: Vec<u64> = (0..256 * 32).map(|i| (i % 32 % 3) as u64).collect();
        let f = roundtrip(&s);
        assert_eq!(f.len(), 1);
        match &f[0] {
            FoldNode::Loop { period, count, body, .. } => {
                assert_eq!((*period, *count), (32, 256));
                // 10 x (a b c), then a b
                assert_eq!(body.len(), 3, "{body:?}");
                assert!(matches!(body[0], FoldNode::Loop { period: 3, count: 10, .. }));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_prologue_and_an_epilogue_stay_outside_the_loop() {
        let mut s = vec![9u64, 8];
        for _ in 0..50 {
            s.extend([1, 2, 3]);
        }
        s.push(7);
        let f = roundtrip(&s);
        assert_eq!(f.len(), 4);
        assert!(matches!(f[2], FoldNode::Loop { period: 3, count: 50, .. }));
    }

    #[test]
    fn an_aperiodic_sequence_is_kept_whole() {
        let s: Vec<u64> = (0..100).collect();
        assert_eq!(roundtrip(&s).len(), 100);
    }

    proptest! {
        #[test]
        fn folding_is_lossless(s in proptest::collection::vec(0u64..4, 0..300)) {
            roundtrip(&s);
        }
    }
}
