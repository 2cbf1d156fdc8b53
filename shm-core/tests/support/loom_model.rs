//! The loom settings every ring model runs under.

/// Runs `body` under loom with at most `PREEMPTIONS` forced preemptions per
/// execution (the bound loom's documentation recommends: bugs needing more
/// are rare, and it keeps the three-thread models to seconds).
/// `LOOM_MAX_PREEMPTIONS` in the environment still overrides it.
pub fn model(body: impl Fn() + Sync + Send + 'static) {
    const PREEMPTIONS: usize = 3;
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(PREEMPTIONS);
    }
    builder.check(body);
}
