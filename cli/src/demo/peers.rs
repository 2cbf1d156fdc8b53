//! The demo's peer phase, with two devices or more: each device's kernels send to the next
//! device's service over a peer route.

use serde::Serialize;
use tandem_hal::GpuApi;
use tandem_runtime::kernels::{EchoLaunch, RuntimeKernels, ECHO_NO_PEER_ACCESS};
use tandem_runtime::PeerAccess;

use super::figures::LaunchReport;
use super::{services, Demo};

/// A kernel on one device sending to another device's service.
#[derive(Serialize)]
pub(super) struct PeerReport {
    from: usize,
    to: usize,
    /// "direct", or "unreachable" (every thread told so, nothing sent).
    access: &'static str,
    launch: LaunchReport,
}

impl PeerReport {
    /// The launch, when its route was reachable: an unreachable one sent nothing.
    pub(super) fn sent(&self) -> Option<&LaunchReport> {
        (self.access == "direct").then_some(&self.launch)
    }
}

/// Runs the phase, the services still running; one report per pair of devices.
pub(super) fn run<'r, A: GpuApi>(
    demo: &Demo<'r, A>,
    kernels: &mut [RuntimeKernels<'r, A>],
) -> Result<Vec<PeerReport>, String> {
    let devices = demo.devices.len();
    let launch = services::launch(demo);
    if devices > 1 {
        demo.say("kernels sending to the next device's service over a peer route:".into());
    }
    let mut peers = Vec::new();
    for from in 0..devices {
        let to = (from + 1) % devices;
        if to == from {
            continue;
        }
        peers.push(to_peer(demo, kernels, from, to, &launch)?);
    }
    Ok(peers)
}

/// Device `from`'s kernels sending `launch` to device `to`'s service.
fn to_peer<'r, A: GpuApi>(
    demo: &Demo<'r, A>,
    kernels: &mut [RuntimeKernels<'r, A>],
    from: usize,
    to: usize,
    launch: &EchoLaunch,
) -> Result<PeerReport, String> {
    let route = demo
        .runtime
        .peer_route(from, to)
        .map_err(|e| e.to_string())?;
    let (senders, servers) = pair_mut(kernels, from, to);
    let outcome = senders
        .echo_via_peer(servers, &route, launch)
        .map_err(|e| e.to_string())?;
    let report = LaunchReport::of(launch, &outcome);
    let access = match route.access {
        PeerAccess::Direct => "direct",
        PeerAccess::Unreachable => "unreachable",
    };
    if route.access == PeerAccess::Direct {
        demo.say(format!(
            "  device {} -> device {}'s service (peer access):\n    \
             {} tasks in {:.3} s ({:.2} M tasks/s), {} threads failed, {} wrong answers",
            route.from,
            route.to,
            report.tasks,
            report.seconds,
            report.tasks_per_second / 1e6,
            report.failed_threads,
            report.wrong_answers
        ));
    } else {
        let told = outcome
            .status
            .iter()
            .filter(|&&s| s == ECHO_NO_PEER_ACCESS)
            .count();
        demo.say(format!(
            "  device {} -> device {}: no peer access; {told} of {} threads told so, none sent",
            route.from,
            route.to,
            outcome.status.len()
        ));
    }
    Ok(PeerReport {
        from: route.from,
        to: route.to,
        access,
        launch: report,
    })
}

/// Two distinct elements of `items`, both mutably.
fn pair_mut<T>(items: &mut [T], a: usize, b: usize) -> (&mut T, &mut T) {
    assert_ne!(a, b, "two distinct elements");
    if a < b {
        let (low, high) = items.split_at_mut(b);
        (&mut low[a], &mut high[0])
    } else {
        let (low, high) = items.split_at_mut(a);
        (&mut high[0], &mut low[b])
    }
}
