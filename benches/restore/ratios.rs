//! The bench's goals as ratios against the references measured in the same run
//! (`references.rs`, `apf.rs`): printed, never asserted (the exit code is about correctness).

use std::collections::BTreeMap;

use super::apf::{Actor, Flows, Spent};
use super::references::{self, Measured, Reference, References};
use super::{Histogram, percentile, real};

/// What the run measured that the ratios need.
pub struct Run<'a> {
    pub t0: u128,
    pub pods: usize,
    pub concurrency: usize,
    /// The apply → the last hook's last instruction, seconds.
    pub makespan: f64,
    /// The last hook's last instruction (unix nanos).
    pub last_end: u128,
    /// When the bench's `kubectl get --watch` first saw each pod Running (unix nanos).
    pub running: &'a BTreeMap<String, u128>,
    /// When the controller logged "hook started" for a pod's first hook (unix nanos).
    pub first_start: &'a dyn Fn(&str) -> Option<u128>,
    pub apiserver_before: &'a str,
    pub apiserver_after: &'a str,
    /// The controller's `/metrics` after the restore.
    pub controller: &'a str,
    /// The chart's webhook entries.
    pub ours: &'a [String],
    pub actors: &'a [Actor],
    /// The FlowSchemas each actor is counted under.
    pub flows: &'a Flows,
}

/// One row of the summary: a goal, our figure, its reference's, their ratio.
struct Goal {
    what: String,
    ours: String,
    reference: String,
    ratio: f64,
    goal: f64,
}

fn ms(s: f64) -> String {
    format!("{:.0} ms", s * 1000.0)
}

fn quantiles(ms: &mut [f64]) -> Option<(f64, f64)> {
    ms.sort_by(f64::total_cmp);
    (!ms.is_empty()).then(|| (percentile(ms, 50.0), percentile(ms, 99.0)))
}

/// Prints the references' figures and the summary table of ratios.
pub fn print(run: &Run, refs: &References, measured: &Measured) {
    let mut goals = Vec::new();
    println!("REFERENCES measured in this run (benches/restore/references.rs, apf.rs):");
    println!("| measure | value |");
    println!("|---|---|");

    // 1. The makespan against an ideal scheduler fed the same pods at the same times.
    // The earliest sight of each pod Running, by the bench's watch or the reactor's: when an
    // ideal scheduler could first have known.
    let up: BTreeMap<&String, u128> = run
        .running
        .iter()
        .map(|(pod, at)| {
            let reactor = measured.reactions.seen.get(pod).copied().unwrap_or(*at);
            (pod, (*at).min(reactor))
        })
        .collect();
    // The round trips taken while the restore ran: what its execs met.
    let mut rtts = measured.rtts_between(run.t0, run.last_end);
    match quantiles(&mut rtts) {
        Some((rtt, p99)) => {
            let ups: Vec<u128> = up.values().copied().collect();
            let fair = references::fair_makespan(&ups, run.t0, run.concurrency, &HOOK_SECONDS, rtt);
            println!(
                "| exec probe: `true` into {}/probe through the API server, every 2 s, during the restore | {} round trips: p50 {}, p99 {}, max {}; {} failed{} |",
                references::NAMESPACE,
                rtts.len(),
                ms(rtt),
                ms(p99),
                ms(rtts.last().copied().unwrap_or(f64::NAN)),
                measured.probe_errors.len(),
                measured
                    .probe_errors
                    .first()
                    .map_or(String::new(), |e| format!(" (first: {e})")),
            );
            println!(
                "| fair bound: an ideal scheduler with {} slots, each pod's hooks (0 s, 1 s, in order) from its Running time, each hook its duration + the probe's p50 round trip | {fair:.1} s; makespan/fair bound {:.2} |",
                run.concurrency,
                run.makespan / fair
            );
            goals.push(Goal {
                what: "makespan / fair bound (ideal scheduler, same Running times, probe's exec round trip)".into(),
                ours: format!("{:.1} s", run.makespan),
                reference: format!("{fair:.1} s"),
                ratio: run.makespan / fair,
                goal: 1.10,
            });
        }
        None => println!(
            "| exec probe | no round trip measured: {:?} |",
            measured.probe_errors
        ),
    }

    // 2. Running → first hook start against the reactor's Running → write acknowledged, both
    // from the earliest sight of the pod Running.
    let r = &measured.reactions;
    let mut ours: Vec<f64> = up
        .iter()
        .filter_map(|(pod, at)| Some(super::secs_between(*at, (run.first_start)(pod)?)))
        .collect();
    let mut reference: Vec<f64> = up
        .iter()
        .filter_map(|(pod, at)| Some(super::secs_between(*at, *r.acked.get(*pod)?)))
        .collect();
    let mut own: Vec<f64> = r
        .seen
        .iter()
        .filter_map(|(pod, seen)| Some(super::secs_between(*seen, *r.acked.get(pod)?)))
        .collect();
    println!(
        "| reactor: pods seen Running / writes acknowledged / errors | {} / {} / {}{} |",
        r.seen.len(),
        r.acked.len(),
        r.errors.len(),
        r.errors
            .first()
            .map_or(String::new(), |e| format!(" (first: {e})"))
    );
    if let Some((p50, p99)) = quantiles(&mut own) {
        println!(
            "| reactor: its own sight of Running -> its write acknowledged | p50 {}, p99 {} |",
            ms(p50),
            ms(p99)
        );
    }
    if let (Some((o50, o99)), Some((r50, r99))) = (quantiles(&mut ours), quantiles(&mut reference))
    {
        println!(
            "| Running (earliest sight: the bench's watch or the reactor's) -> first hook start (\"hook started\"), {} pods | p50 {}, p99 {} |",
            ours.len(),
            ms(o50),
            ms(o99)
        );
        println!(
            "| Running (the same) -> the reactor's write acknowledged, {} pods | p50 {}, p99 {} |",
            reference.len(),
            ms(r50),
            ms(r99)
        );
        for (q, o, r, goal) in [("p50", o50, r50, 1.5), ("p99", o99, r99, 2.0)] {
            goals.push(Goal {
                what: format!(
                    "Running -> first hook start {q} / reactor's Running -> write acknowledged {q}"
                ),
                ours: ms(o),
                reference: ms(r),
                ratio: o / r,
                goal,
            });
        }
    }
    // The controller exposes no per-hook slot wait: Little's law on its queue gauge.
    let slots = &measured.slots;
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let slot_wait = slots.waited.0 / run.pods as f64;
    println!(
        "| means: Running -> first hook start / its exec slot wait / the rest / the reactor's Running -> write acknowledged | {} / {} / {} / {} |",
        ms(mean(&ours)),
        ms(slot_wait),
        ms(mean(&ours) - slot_wait),
        ms(mean(&reference)),
    );
    let delay_count = real::metric(
        run.controller,
        "restore_hooks_exec_start_delay_seconds_count",
    );
    let delay_sum = real::metric(run.controller, "restore_hooks_exec_start_delay_seconds_sum");
    println!(
        "| exec slot wait, mean (Little's law: `restore_hooks_exec_slot_waiting` sampled every 1 s, {} samples ({} scrapes failed), integrated, / {} hooks of each turn) | first hooks {}, later hooks {}; then exec slot -> exec start (the two writes) mean {} |",
        slots.samples,
        slots.errors,
        run.pods,
        ms(slot_wait),
        ms(slots.waited.1 / run.pods as f64),
        ms(delay_sum / delay_count.max(1.0)),
    );

    // 3. Admission against the reference webhooks, as the API server records every call.
    let ours = references::admission(run.apiserver_before, run.apiserver_after, run.ours);
    println!(
        "| admission: ours ({}), {} calls | {} |",
        run.ours.join(", "),
        ours.count,
        ours.summary()
    );
    let mut noops: Vec<(Reference, Histogram)> = Vec::new();
    for reference in Reference::ALL {
        let h = refs.admission(run.apiserver_before, run.apiserver_after, reference);
        println!(
            "| admission: {}, {} calls ({} answered) | {} |",
            reference.describe(),
            h.count,
            measured.calls.get(&reference).copied().unwrap_or(0),
            h.summary()
        );
        if reference != Reference::Patch {
            noops.push((reference, h));
        }
    }
    // Against the faster no-op (the less favourable ratio).
    let floor = noops
        .iter()
        .filter_map(|(r, h)| Some((*r, h.quantile(0.99)?)))
        .min_by(|a, b| a.1.total_cmp(&b.1));
    if let (Some(o99), Some((reference, n99))) = (ours.quantile(0.99), floor) {
        goals.push(Goal {
            what: format!(
                "admission p99 (API server's histogram) / {}",
                reference.describe()
            ),
            ours: format!("{:.1} ms", o99 * 1000.0),
            reference: format!("{:.1} ms", n99 * 1000.0),
            ratio: o99 / n99,
            goal: 1.2,
        });
    }

    // 4. The API server's time on the chart's requests against the pods' lifecycle's.
    let spent = Spent::between(run.apiserver_before, run.apiserver_after, run.flows);
    for (schema, (seconds, requests)) in &spent.per_schema {
        if *requests > 0.0 {
            let (actor, level) = spent.owner(schema);
            println!(
                "| API server execution (`apiserver_flowcontrol_request_execution_seconds`), {actor}: FlowSchema {schema} (priority level {level}) | {seconds:.2} s, {requests:.0} requests |",
            );
        }
    }
    if let [chart, lifecycle, ..] = run.actors {
        let (c, cn) = spent.of(chart);
        let (l, ln) = spent.of(lifecycle);
        goals.push(Goal {
            what: format!(
                "API server execution seconds: the chart's ServiceAccounts / the pods' lifecycle ({})",
                lifecycle.groups.join(", ")
            ),
            ours: format!("{c:.1} s ({cn:.0} requests)"),
            reference: format!("{l:.1} s ({ln:.0} requests)"),
            ratio: c / l,
            goal: 0.5,
        });
    }
    println!();

    println!("RATIOS against references measured in this run (reported, never asserted):");
    println!("| goal | ours | reference | ratio | goal | |");
    println!("|---|---|---|---|---|---|");
    for g in &goals {
        println!(
            "| {} | {} | {} | {:.2} | <= {:.2} | {} |",
            g.what,
            g.ours,
            g.reference,
            g.ratio,
            g.goal,
            if g.ratio <= g.goal { "met" } else { "NOT met" }
        );
    }
    println!();
}

/// The bench's hooks' own durations, in plan order (`fast`, `slow`).
const HOOK_SECONDS: [f64; 2] = [0.0, 1.0];
