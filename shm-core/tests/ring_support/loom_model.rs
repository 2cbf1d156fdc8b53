//! The loom settings every ring model runs under.

/// Runs `body` under loom with at most `PREEMPTIONS` forced preemptions per
/// execution (loom's recommended bound: bugs needing more are rare, and
/// without a bound three threads with retry loops explode combinatorially).
/// `LOOM_MAX_PREEMPTIONS` in the environment still overrides it.
pub fn model(body: impl Fn() + Sync + Send + 'static) {
    const PREEMPTIONS: usize = 3;
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(PREEMPTIONS);
    }
    builder.check(body);
}
