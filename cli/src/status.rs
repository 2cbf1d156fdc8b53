//! `tandem status`: what a running runtime's status block says, as text or
//! JSON (the schema in docs/status.md).

use clap::Args;
use tandem_runtime::status::{read_status, single_live_runtime, StatusError, StatusSnapshot};

/// `tandem status`'s options.
#[derive(Args, Debug)]
pub(crate) struct StatusArgs {
    /// The runtime's CPU segment (in /dev/shm); default: the one live runtime.
    #[arg(long, value_name = "NAME")]
    segment: Option<String>,
    /// Prints the status as JSON (the schema in docs/status.md).
    #[arg(long)]
    json: bool,
}

/// `tandem status`: fails when the runtime is gone, after printing what it
/// last published, or when none is found (with `--json`, after printing
/// [`not_running`]'s object: a script reading stdout gets an answer).
pub(crate) fn status(args: StatusArgs) -> Result<(), String> {
    let found = match &args.segment {
        Some(name) => Ok(name.clone()),
        None => single_live_runtime(),
    }
    .and_then(|name| read_status(&name).map(|status| (name, status)));
    let (name, status) = match found {
        Ok(found) => found,
        Err(e) => {
            if args.json {
                println!("{:#}", not_running(args.segment.as_deref(), &e));
            }
            return Err(e.to_string());
        }
    };
    if args.json {
        let text = serde_json::to_string_pretty(&status).map_err(|e| e.to_string())?;
        println!("{text}");
    } else {
        print_status(&status);
    }
    if status.runtime.process == "gone" {
        return Err(format!(
            "the runtime of segment {name} (pid {}) is gone: killed or crashed; the figures \
             are the last it published. `tandem clean` removes its segment",
            status.runtime.pid
        ));
    }
    Ok(())
}

/// What `--json` prints when no runtime's status could be read: `running`
/// false, the reason in words, the segment named by `--segment` (else
/// null), and the segments that dead runtimes left (empty unless that is
/// why none was found).
fn not_running(segment: Option<&str>, e: &StatusError) -> serde_json::Value {
    let stale: &[String] = match e {
        StatusError::NoLiveRuntime { stale } => stale,
        _ => &[],
    };
    serde_json::json!({
        "running": false,
        "reason": e.to_string(),
        "segment": segment,
        "stale_segments": stale,
    })
}

fn print_status(s: &StatusSnapshot) {
    print_runtime(s);
    print_clients(s);
    println!();
    print_pools(s);
    println!();
    print_segments(s);
}

/// The runtime's lines: its segment, process, workers, queues and tasks.
fn print_runtime(s: &StatusSnapshot) {
    let r = &s.runtime;
    let c = &s.config;
    println!("segment   {}", s.segment);
    let gone = r.process == "gone";
    if gone {
        println!(
            "runtime   pid {} (gone; it last said {}), {} backend, up {:.1} s when it last wrote",
            r.pid, r.state, r.backend, r.uptime_s
        );
    } else {
        println!(
            "runtime   pid {} ({}, {}), {} backend, up {:.1} s",
            r.pid, r.process, r.state, r.backend, r.uptime_s
        );
    }
    let capped = if s.workers.running < c.workers {
        format!(" ({} configured, capped by the cores)", c.workers)
    } else {
        String::new()
    };
    if gone {
        println!(
            "workers   none running (it ran {}{capped})",
            s.workers.running
        );
    } else {
        println!(
            "workers   {} running{capped}, {} busy",
            s.workers.running, s.workers.busy
        );
    }
    println!(
        "queues    {} lanes ({} on a GPU's segments) x {} slots, copy space {} bytes",
        c.lanes, c.gpu_lanes, c.queue_depth, c.copy_space
    );
    let t = &s.tasks;
    println!(
        "tasks     {} completed, {} failed ({:.0} /s); {} bad pointers, {} double completions",
        t.completed, t.failed, t.per_second, t.bad_pointers, t.double_completions
    );
}

/// The clients attached, each with its heap and device queues.
fn print_clients(s: &StatusSnapshot) {
    match s.clients_attached {
        Some(n) => println!("clients   {n} attached"),
        None => println!("clients   unknown (not counted by this runtime)"),
    }
    // A heap whose largest request is well below its free bytes is
    // fragmented (its free memory lies between live blocks), not full.
    for c in &s.clients {
        println!(
            "  slot {} pid {} {}: {} futures; heap {} bytes, {} in use, {} free, \
             largest request {} bytes",
            c.slot,
            c.pid,
            c.state,
            c.futures,
            c.heap_bytes,
            c.in_use_bytes,
            c.free_bytes,
            c.largest_request
        );
        for q in &c.device_queues {
            println!(
                "    device {} queues {}: {} lanes, {} tasks (/dev/shm/{})",
                q.device, q.state, q.lanes, q.tasks, q.segment
            );
        }
    }
}

/// Each pool's counters, then those of tasks no pool claims.
fn print_pools(s: &StatusSnapshot) {
    println!(
        "{:>6}  {:<24} {:>12} {:>10}",
        "pool", "name", "completed", "failed"
    );
    for p in &s.pools {
        println!(
            "{:>6}  {:<24} {:>12} {:>10}",
            p.id, p.name, p.completed, p.failed
        );
    }
    if s.other.completed > 0 {
        println!(
            "{:>6}  {:<24} {:>12} {:>10}",
            "-", "(other)", s.other.completed, s.other.failed
        );
    }
}

/// The segments' table.
fn print_segments(s: &StatusSnapshot) {
    println!(
        "{:<8} {:>6} {:>6} {:>10} {:>6} {:>8} {:>8} {:>12} {:>8} {:>12}",
        "segment",
        "device",
        "NUMA",
        "MiB",
        "lanes",
        "queued",
        "workers",
        "tasks",
        "failed",
        "gpu served"
    );
    let or_dash = |v: Option<u32>| v.map_or("-".to_string(), |v| v.to_string());
    for seg in &s.segments {
        // The GPU services' tasks, both routes; a dash where none can run.
        let served = seg.device.map_or("-".to_string(), |_| {
            (seg.gpu_service.kernel_tasks + seg.gpu_service.host_tasks).to_string()
        });
        println!(
            "{:<8} {:>6} {:>6} {:>10} {:>6} {:>8} {:>8} {:>12} {:>8} {:>12}",
            seg.kind,
            or_dash(seg.device),
            or_dash(seg.numa_node),
            seg.bytes >> 20,
            seg.lanes,
            seg.queued,
            seg.workers,
            seg.tasks,
            seg.failed,
            served
        );
    }
    if (s.segments.len() as u32) < s.segments_total {
        println!(
            "(and {} more device segments)",
            s.segments_total - s.segments.len() as u32
        );
    }
}
