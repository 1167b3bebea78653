//! What a phase runs, in order: a [`Schedule`] of [`Step`]s, pure data.
//!
//! Produced by the isolated sweep ([`crate::rank::sweep::schedule`]), the model workload per phase
//! ([`Schedule::model`]) and a source trace per rank and pacing ([`crate::evidence::trace`]); consumed
//! by the phase runner's one driver, which decides per phase what a [`Step::Gap`] becomes (paced,
//! filled, run beside the call, spun on the host). Each call carries how it is recorded (kind, group,
//! bytes, position) and what the backend runs: a world call, or a [`Prepared`] collective of a trace
//! on its own group. Refuses nothing: its producers refuse what the phases cannot run.
use crate::core::collective::{CollectiveKind, TraceDtype};
use crate::core::workload::{self, Dtype, Phase, ReduceOp, WorkloadSpec};
use crate::evidence::commtrace::p2p::P2pPlan;
use crate::evidence::commtrace::{CommTrace, TraceCollective};
use crate::evidence::shard::{GapTimeline, ProcessGroup, TraceOrigin};
use std::sync::Arc;

/// A phase's steps, what the backend prepares for them, and their source.
#[derive(Clone, Debug, Default)]
pub struct Schedule {
    /// A trace's provenance and the timeline its gaps were measured on (the
    /// trace phases'); `None` for the isolated sweep and the model workload.
    pub source: Option<(TraceOrigin, GapTimeline)>,
    /// What [`Target::Prepared`] calls and [`Step::P2p`] steps run on.
    pub prepared: Option<Prepared>,
    /// In order.
    pub steps: Vec<Step>,
}

/// What the backend prepares before a schedule's first prepared call: every
/// group's communicator (of the trace) and the buffers of every collective,
/// and the point-to-point program.
#[derive(Clone, Debug)]
pub struct Prepared {
    /// The trace whose groups the calls run on (an isolated sweep's: synthetic).
    pub trace: Arc<CommTrace>,
    /// This rank's prepared collectives, one pass ([`Target::Prepared`]'s index).
    pub colls: Vec<TraceCollective>,
    /// Their groups as a shard names them (ids from 1), for the shard header.
    pub groups: Vec<ProcessGroup>,
    /// This rank's point-to-point program, where the trace has one.
    pub p2p: Option<P2pPlan>,
}

/// One step of a [`Schedule`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Step {
    /// A token (a model token, a trace's pass) begins.
    Token {
        /// Index.
        token: u32,
        /// A warm-up token.
        warmup: bool,
    },
    /// The open token ends: at the last call's completion (a trace pass) or
    /// at the host's clock (a model token).
    TokenEnd,
    /// A model step's matrix products (shape indices) with `layer`'s weights.
    Compute {
        /// GEMM shape indices.
        gemms: &'static [usize],
        /// Layer.
        layer: u32,
    },
    /// The recorded gap before the next call, and the compute the source ran
    /// in it where it recorded it (at most the gap after the first call).
    Gap {
        /// Gap, ns.
        ns: u64,
        /// Recorded compute, ns.
        compute_ns: Option<u64>,
    },
    /// A collective call.
    Call(CallStep),
    /// Wait for the outstanding [`Issue::Async`] call, check and record it.
    Wait,
    /// Complete prepared collective `index`, posted earlier ([`Issue::Post`]), where the source
    /// completed it (its wait, or the pass's end where it never saw one); check and record it.
    Complete {
        /// Index into [`Prepared::colls`].
        index: usize,
    },
    /// Step `index` of the prepared point-to-point program.
    P2p {
        /// Index into [`P2pPlan::steps`].
        index: usize,
        /// Recorded gap before it (paced by replay only).
        gap_ns: u64,
        /// Operations it starts.
        started: u32,
    },
    /// A new size of the isolated sweep: its checks count again.
    Size,
    /// Before a size's timed back-to-back iterations: synchronize, then meet the other ranks.
    Settle,
    /// `n` timed calls captured into one CUDA graph and launched once.
    Graph {
        /// Calls.
        n: u32,
        /// The call, `n` times.
        call: CallStep,
    },
    /// Close a back-to-back run, then check its last call if `check`.
    EndBackToBack {
        /// Check the last call.
        check: bool,
    },
}

/// A collective call: what runs, how it is timed, and how it is recorded.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CallStep {
    /// What the backend runs.
    pub target: Target,
    /// How it is issued and timed.
    pub issue: Issue,
    /// Recorded kind.
    pub kind: CollectiveKind,
    /// Recorded group (0: the world).
    pub group: u32,
    /// Recorded bytes (one member's input).
    pub bytes: u64,
    /// Recorded element type.
    pub dtype: TraceDtype,
    /// Root (broadcast, reduce) as a world rank.
    pub root: Option<u32>,
    /// Peer (send, receive) as a world rank.
    pub peer: Option<u32>,
    /// Token (model token or trace pass).
    pub token: Option<u32>,
    /// Layer (a trace's position in its pass).
    pub layer: Option<u32>,
    /// Iteration (the isolated sweep).
    pub iter: Option<u32>,
    /// A warm-up call.
    pub warmup: bool,
}

/// What a [`CallStep`] runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Target {
    /// The kind on the world, a sum, of `bytes` in nccl-tests' size convention.
    World {
        /// Size, bytes.
        bytes: u64,
        /// Element type.
        dtype: Dtype,
    },
    /// Prepared collective `index` ([`Prepared::colls`]) reducing with `op`.
    Prepared {
        /// Index.
        index: usize,
        /// Reduction.
        op: ReduceOp,
    },
}

/// How a [`CallStep`] is issued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Issue {
    /// Started; a later [`Step::Wait`] completes it.
    Async,
    /// Right behind the previous call, no wait (nccl-tests' timed loop).
    BackToBack,
    /// Complete on the host when the call returns.
    HostWait,
    /// Posted, as the source posted it nonblocking (`MPI_I…`): a prepared collective that its
    /// [`Step::Complete`] completes later, with other calls in between.
    Post,
}

impl Schedule {
    /// The model workload's blocking or async phase: per token (warm-ups
    /// first), per step its GEMMs and one world all-reduce. Blocking runs a
    /// step's GEMMs, then its all-reduce, and waits; async runs the first
    /// step's GEMMs, then per step issues the all-reduce, runs the next
    /// step's GEMMs and waits.
    pub fn model(spec: &WorkloadSpec, phase: Phase) -> Schedule {
        let per_token = spec.collectives_per_token();
        let w = spec.warmup_tokens;
        let mut steps = Vec::with_capacity(((w + spec.tokens) as u64 * (3 * per_token + 3)) as usize);
        let mut index = 0u64;
        let compute = |s: workload::Step| Step::Compute { gemms: s.gemms, layer: s.layer };
        for token in 0..w + spec.tokens {
            let warmup = token < w;
            steps.push(Step::Token { token, warmup });
            if phase == Phase::Async {
                steps.push(compute(spec.step(index)));
            }
            for j in 0..per_token {
                let s = spec.step(index);
                index += 1;
                if phase != Phase::Async {
                    steps.push(compute(s));
                }
                let call = CallStep::world_all_reduce(s.bytes, spec.dtype, Some(token), Some(s.layer), warmup);
                steps.push(Step::Call(call));
                if phase == Phase::Async && j + 1 < per_token {
                    steps.push(compute(spec.step(index)));
                }
                steps.push(Step::Wait);
            }
            steps.push(Step::TokenEnd);
        }
        Schedule { source: None, prepared: None, steps }
    }

    /// The calls, in order.
    pub fn calls(&self) -> impl Iterator<Item = &CallStep> {
        self.steps.iter().filter_map(|s| match s {
            Step::Call(c) | Step::Graph { call: c, .. } => Some(c),
            _ => None,
        })
    }

    /// The largest world call, bytes (0 without one).
    pub fn world_max_bytes(&self) -> u64 {
        self.calls()
            .filter_map(|c| if let Target::World { bytes, .. } = c.target { Some(bytes) } else { None })
            .max()
            .unwrap_or(0)
    }
}

impl CallStep {
    /// A world all-reduce of `bytes` started and later waited for, recorded on group 0.
    pub fn world_all_reduce(bytes: u64, dtype: Dtype, token: Option<u32>, layer: Option<u32>, warmup: bool) -> Self {
        CallStep {
            target: Target::World { bytes, dtype },
            issue: Issue::Async,
            kind: CollectiveKind::AllReduce,
            group: 0,
            bytes,
            dtype: dtype.into(),
            root: None,
            peer: None,
            token,
            layer,
            iter: None,
            warmup,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::workload::GemmShape;

    fn spec() -> WorkloadSpec {
        let mut s = WorkloadSpec::isolated_only(64, 1, GemmShape { m: 4, n: 4, k: 4 });
        (s.sizes_bytes, s.tokens, s.warmup_tokens, s.layers) = (vec![64, 128], 2, 1, 2);
        s
    }

    fn text(s: &Schedule) -> String {
        let t: Vec<String> = s
            .steps
            .iter()
            .map(|s| match s {
                Step::Token { token, warmup } => format!("T{token}{}", if *warmup { "w" } else { "" }),
                Step::TokenEnd => "E".into(),
                Step::Compute { layer, .. } => format!("G{layer}"),
                Step::Call(c) => format!("C{}", c.bytes),
                Step::Wait => "W".into(),
                other => format!("{other:?}"),
            })
            .collect();
        t.join(" ")
    }

    /// Today's order: blocking waits for each step's all-reduce before the
    /// next step's GEMMs; async runs the next step's GEMMs between issue and
    /// wait; sizes cycle per step, layers per token.
    #[test]
    fn the_model_workload_keeps_its_order_and_sizes() {
        let b = Schedule::model(&spec(), Phase::Blocking);
        assert_eq!(text(&b), "T0w G0 C64 W G1 C128 W E T1 G0 C64 W G1 C128 W E T2 G0 C64 W G1 C128 W E");
        let a = Schedule::model(&spec(), Phase::Async);
        assert_eq!(text(&a), "T0w G0 C64 G1 W C128 W E T1 G0 C64 G1 W C128 W E T2 G0 C64 G1 W C128 W E");
        assert_eq!(b.world_max_bytes(), 128);
        assert!(b.calls().all(|c| c.group == 0 && c.issue == Issue::Async && c.iter.is_none()));
        assert_eq!(b.calls().filter(|c| c.warmup).count(), 2);
    }
}
