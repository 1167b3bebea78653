//! The point-to-point operations one captured call stands for ([`MpiP2p`], the trace's `mpi.p2p`).
//! Consumes a decoded call with its rank's completions, datatypes and communicators; produces a send,
//! a receive, or both for a `Sendrecv`: peer and tag as posted, the matched source and tag, the post
//! and the completion (on rank 0's clock where fitted) with the call that completed it. Other calls
//! produce none; nothing is refused.
use super::collective::group_name;
use super::rank_capture::{CallRecord, RankCapture, NONE};
use super::MpiP2p;
use crate::core::clock::ClockModel;

/// The point-to-point operations of one call (none for other calls).
pub(super) fn p2p_of(r: &RankCapture, i: u64, c: &CallRecord, model: Option<&ClockModel>) -> Vec<MpiP2p> {
    let name = r.kind_name(c);
    let on_ref = |ns: u64| model.map_or(ns, |m| m.to_reference(ns).max(0.0).round() as u64);
    let group = r.comms.get(&c.comm).map(|(m, o)| group_name(m, *o));
    let dt = |id: u16| r.dtypes.get(&id).cloned().unwrap_or((-1, String::new()));
    let done = |req: u64| r.done.get(&req);
    let op = |direction: &str,
              peer: Option<i32>,
              tag: Option<i32>,
              elems: u64,
              dtype: u16,
              matched: Option<(i32, i32)>| {
        let (dtype_bytes, dtype) = dt(dtype);
        let nonblocking = c.request != 0;
        MpiP2p {
            call: i,
            name: name.to_string(),
            direction: direction.into(),
            group: group.clone(),
            peer: peer.unwrap_or(NONE),
            tag: tag.unwrap_or(NONE),
            matched,
            elems,
            dtype,
            dtype_bytes,
            request: nonblocking.then_some(c.request),
            post_ns: on_ref(c.t_issue_ns),
            complete_ns: if nonblocking { done(c.request).map(|d| on_ref(d.t_ns)) } else { Some(on_ref(c.t_done_ns)) },
            completed_by_call: if nonblocking { done(c.request).map(|d| d.call) } else { None },
        }
    };
    let both = |a: Option<i32>, b: Option<i32>| a.zip(b);
    match name {
        "Send" | "Ssend" | "Bsend" | "Rsend" | "Isend" | "Issend" | "Ibsend" | "Irsend" => {
            vec![op("send", c.peer, c.tag, c.count_send, c.dt_send, None)]
        }
        "Recv" => vec![op("recv", c.peer, c.tag, c.count_recv, c.dt_recv, both(c.peer2, c.tag2))],
        "Irecv" => {
            let m = done(c.request).and_then(|d| both(d.source, d.tag));
            vec![op("recv", c.peer, c.tag, c.count_recv, c.dt_recv, m)]
        }
        "Sendrecv" | "Sendrecv_replace" => {
            vec![
                op("send", c.peer, c.tag, c.count_send, c.dt_send, None),
                op("recv", c.peer2, c.tag2, c.count_recv, c.dt_recv, both(c.peer2, c.tag2)),
            ]
        }
        _ => Vec::new(),
    }
}
