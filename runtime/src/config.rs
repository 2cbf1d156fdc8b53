//! The runtime's configuration: a TOML file, every field optional.
//!
//! ```toml
//! workers = 4                 # CPU worker threads in all, split among the devices served
//! # workers_per_device = 4     # or: this many for each device served (overrides `workers`)
//! queue_depth = 1024          # slots per lane and priority (a power of two)
//! lanes = 16                  # lanes of the CPU segment and the CPU device's
//! gpu_lanes = 64              # lanes of a GPU's device segments
//! gpu_segment_size = 67108864 # bytes of pinned memory per device
//! cpu_segment_size = 16777216 # bytes of the host clients' segment
//! copy_space = 256            # copy space of the futures clients allocate
//! devices = "all"             # or a list of ordinals: [0, 2]
//! cpu_segment_name = "tandem-runtime"  # default: tandem-<pid>-<n>
//! max_clients = 8             # host clients attached at once
//! client_heap_bytes = 131072  # each client's heap in the CPU segment: its quota
//! client_device_queues = 2    # device segments each client may hold (its kernels' queues)
//! client_device_segment_size = 33554432  # bytes of each of those segments
//! # metrics = "9464"          # Prometheus metrics on 127.0.0.1:9464 (or "IP:PORT"); default: none
//! ```

use std::net::SocketAddr;
use std::path::Path;

use serde::Deserialize;
use tandem_hal::Backend;
use tandem_metrics::parse_metrics_address;

use crate::error::ConfigError;

/// Which devices the runtime opens.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub enum DeviceSelection {
    /// Every device the backend reports.
    #[default]
    All,
    /// These ordinals (none: CPU queues only).
    Only(Vec<usize>),
}

/// Runtime settings, with the defaults of [`Config::default`].
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Config {
    /// Worker threads polling the queues, in all: split among the devices
    /// served as evenly as possible (at least one each), every worker also
    /// polling a share of the CPU segment's lanes. Used when
    /// [`workers_per_device`](Self::workers_per_device) is `None`.
    pub workers: usize,
    /// Worker threads for each device served: the total then grows with the
    /// devices (`workers_per_device` x devices; without devices, this many).
    /// The workers of a device serve its lanes alone, on CPUs of its NUMA
    /// node. Overrides [`workers`](Self::workers); a file may set only one
    /// of the two.
    pub workers_per_device: Option<usize>,
    /// Slots per lane and priority; a power of two.
    pub queue_depth: u32,
    /// Lanes of the CPU segment's queue, and of the device segments of the
    /// CPU device (the host backend); a GPU's device segments take
    /// [`gpu_lanes`](Self::gpu_lanes). Kernel threads spread over them (a
    /// block per lane in the runtime's kernels), and each lane's producers
    /// claim their slots on one word of device memory, which many threads
    /// waiting for a full lane make a bottleneck: more lanes raise many
    /// threads' throughput and leave a lone thread's round trip as it is
    /// (docs/design/pcie.md, "Many lanes").
    pub lanes: u32,
    /// Lanes of the queue of each device segment whose backend is a GPU
    /// (not [`Backend::Host`]; see [`device_lanes`](Self::device_lanes)).
    /// More than `lanes` by default (docs/design/pcie.md, "Many lanes"): a
    /// GPU's thousands of threads then share each lane's ticket word with
    /// fewer others, while on the CPU device the same lanes only give its
    /// workers more empty lanes to sweep.
    pub gpu_lanes: u32,
    /// Bytes of each device's pinned segment.
    pub gpu_segment_size: usize,
    /// Bytes of the CPU segment host clients attach to.
    pub cpu_segment_size: usize,
    /// Copy space of futures allocated on the host.
    pub copy_space: u32,
    /// Devices to serve.
    pub devices: DeviceSelection,
    /// Name of the CPU segment (in `/dev/shm`); `None`: `tandem-<pid>-<n>`.
    pub cpu_segment_name: Option<String>,
    /// Host clients that may attach to the CPU segment at once; each gets a
    /// slot and its own heap there ([`ClientTable`](crate::ClientTable)).
    pub max_clients: u32,
    /// Bytes of each client's heap, a multiple of 4096: the most its futures
    /// and payloads may hold at once (its quota). The default holds about
    /// 250 futures of the default copy space.
    pub client_heap_bytes: usize,
    /// Device segments each host client may hold at once, for its own
    /// kernels to submit through ([`Client::device_queues`](crate::Client::device_queues)):
    /// its quota of device queues (0: none).
    pub client_device_queues: u32,
    /// Bytes of each of those segments: its kernels' futures and buffers
    /// come from it, so it bounds what one client's kernels hold at once.
    pub client_device_segment_size: usize,
    /// Where `tandem run` (and `tandem blob run`) serve Prometheus metrics, unless their
    /// `--metrics` names another place; `None` (the default): nowhere. The file's `metrics`
    /// key takes a port (on 127.0.0.1) or an `IP:PORT`.
    pub metrics: Option<SocketAddr>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            workers: 4,
            workers_per_device: None,
            queue_depth: 1024,
            lanes: 16,
            gpu_lanes: 64,
            gpu_segment_size: 64 << 20,
            cpu_segment_size: 16 << 20,
            copy_space: 256,
            devices: DeviceSelection::All,
            cpu_segment_name: None,
            max_clients: 8,
            client_heap_bytes: 128 << 10,
            client_device_queues: 2,
            client_device_segment_size: 32 << 20,
            metrics: None,
        }
    }
}

/// The file's schema: every field optional, unknown fields refused.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    workers: Option<usize>,
    workers_per_device: Option<usize>,
    queue_depth: Option<u32>,
    lanes: Option<u32>,
    gpu_lanes: Option<u32>,
    gpu_segment_size: Option<usize>,
    cpu_segment_size: Option<usize>,
    copy_space: Option<u32>,
    devices: Option<DevicesField>,
    cpu_segment_name: Option<String>,
    max_clients: Option<u32>,
    client_heap_bytes: Option<usize>,
    client_device_queues: Option<u32>,
    client_device_segment_size: Option<usize>,
    metrics: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum DevicesField {
    Word(String),
    List(Vec<usize>),
}

/// Largest configuration file read: a configuration is a few hundred
/// bytes, and a path named by mistake (`/dev/zero`, a disk image) must not
/// be read into memory whole.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The text of the configuration file at `path`, at most
/// [`MAX_CONFIG_BYTES`].
pub fn read_config_file(path: &Path) -> Result<String, ConfigError> {
    use std::io::Read;
    let io = |error| ConfigError::Io {
        path: path.display().to_string(),
        error,
    };
    let mut text = String::new();
    std::fs::File::open(path)
        .map_err(io)?
        .take(MAX_CONFIG_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(io)?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("longer than {MAX_CONFIG_BYTES} bytes: not a configuration file"),
        )));
    }
    Ok(text)
}

impl Config {
    /// Parses TOML text; fields left out keep their defaults.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let file: ConfigFile =
            toml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        let d = Config::default();
        let devices = match file.devices {
            None => d.devices,
            Some(DevicesField::Word(w)) if w == "all" => DeviceSelection::All,
            Some(DevicesField::Word(w)) => {
                return Err(ConfigError::Invalid {
                    field: "devices",
                    why: format!("{w:?} is neither \"all\" nor a list of ordinals"),
                })
            }
            Some(DevicesField::List(list)) => DeviceSelection::Only(list),
        };
        if file.workers.is_some() && file.workers_per_device.is_some() {
            return Err(ConfigError::Invalid {
                field: "workers_per_device",
                why: "set either `workers` (in all) or `workers_per_device`, not both".into(),
            });
        }
        let metrics = match file.metrics.as_deref().map(parse_metrics_address) {
            Some(Err(e)) => {
                return Err(ConfigError::Invalid {
                    field: "metrics",
                    why: e.to_string(),
                })
            }
            Some(Ok(addr)) => Some(addr),
            None => None,
        };
        let config = Config {
            workers: file.workers.unwrap_or(d.workers),
            workers_per_device: file.workers_per_device,
            queue_depth: file.queue_depth.unwrap_or(d.queue_depth),
            lanes: file.lanes.unwrap_or(d.lanes),
            gpu_lanes: file.gpu_lanes.unwrap_or(d.gpu_lanes),
            gpu_segment_size: file.gpu_segment_size.unwrap_or(d.gpu_segment_size),
            cpu_segment_size: file.cpu_segment_size.unwrap_or(d.cpu_segment_size),
            copy_space: file.copy_space.unwrap_or(d.copy_space),
            devices,
            cpu_segment_name: file.cpu_segment_name,
            max_clients: file.max_clients.unwrap_or(d.max_clients),
            client_heap_bytes: file.client_heap_bytes.unwrap_or(d.client_heap_bytes),
            client_device_queues: file.client_device_queues.unwrap_or(d.client_device_queues),
            client_device_segment_size: file
                .client_device_segment_size
                .unwrap_or(d.client_device_segment_size),
            metrics,
        };
        config.validate()?;
        Ok(config)
    }

    /// Reads and parses a TOML file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        Self::from_toml(&read_config_file(path)?)
    }

    /// Checks every value's range (what [`crate::Runtime::start`] relies on).
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_workers_and_queues()?;
        self.validate_clients()?;
        self.validate_segment_sizes()
    }

    /// Checks the workers, the queues and the devices.
    fn validate_workers_and_queues(&self) -> Result<(), ConfigError> {
        if self.workers == 0 || self.workers > 1024 {
            return invalid("workers", format!("{} is not in 1..=1024", self.workers));
        }
        if let Some(n) = self.workers_per_device.filter(|&n| n == 0 || n > 1024) {
            return invalid("workers_per_device", format!("{n} is not in 1..=1024"));
        }
        if !self.queue_depth.is_power_of_two() || self.queue_depth > 1 << 20 {
            return invalid(
                "queue_depth",
                format!("{} is not a power of two up to 2^20", self.queue_depth),
            );
        }
        for (field, lanes) in [("lanes", self.lanes), ("gpu_lanes", self.gpu_lanes)] {
            if lanes == 0 || lanes > 1024 {
                return invalid(field, format!("{lanes} is not in 1..=1024"));
            }
        }
        if self.copy_space < crate::task::MIN_COPY_SPACE || self.copy_space > 1 << 20 {
            return invalid(
                "copy_space",
                format!(
                    "{} is not in {}..=2^20",
                    self.copy_space,
                    crate::task::MIN_COPY_SPACE
                ),
            );
        }
        // Each ordinal opens one device and its segment: a repeated one would
        // map the same device twice, its workers and lanes counted twice.
        if let DeviceSelection::Only(list) = &self.devices {
            let repeated = (1..list.len()).find(|&i| list[..i].contains(&list[i]));
            if let Some(i) = repeated {
                return invalid(
                    "devices",
                    format!("device {} is listed more than once", list[i]),
                );
            }
        }
        Ok(())
    }

    /// Checks the client slots, their heaps and their device queues.
    fn validate_clients(&self) -> Result<(), ConfigError> {
        if self.max_clients == 0 || self.max_clients > 1024 {
            return invalid(
                "max_clients",
                format!("{} is not in 1..=1024", self.max_clients),
            );
        }
        let heap = self.client_heap_bytes;
        if heap % crate::client_table::CLIENT_HEAP_ALIGN != 0
            || !(16 << 10..=1 << 30).contains(&heap)
        {
            return invalid(
                "client_heap_bytes",
                format!("{heap} is not a multiple of 4096 in 16 KiB..=1 GiB"),
            );
        }
        // One future of the configured copy space must fit a client's heap
        // (behind the allocator's header page), or every client submit fails.
        let future = tandem_shm_core::FutureShm::required_bytes(self.copy_space) as u64;
        let block = tandem_shm_core::SizeClassAllocator::class_for(future, 16)
            .map_or(u64::MAX, tandem_shm_core::block_size);
        if block > (heap - crate::client_table::CLIENT_HEAP_ALIGN) as u64 {
            return invalid(
                "client_heap_bytes",
                format!(
                    "{heap} bytes cannot hold a future of copy_space {} ({block}-byte block)",
                    self.copy_space
                ),
            );
        }
        if self.client_device_queues > 64 {
            return invalid(
                "client_device_queues",
                format!("{} is not in 0..=64", self.client_device_queues),
            );
        }
        Ok(())
    }

    /// Checks that each segment holds its lanes (and the CPU segment its
    /// clients' heaps) and stays under 1 TiB.
    fn validate_segment_sizes(&self) -> Result<(), ConfigError> {
        let heap = self.client_heap_bytes;
        let clients =
            crate::client_table::region_bytes(self.max_clients, self.client_device_queues, heap);
        // The backend is not known here (the same configuration may start
        // either), so device segments must hold the larger lane count.
        let device_lanes = self.lanes.max(self.gpu_lanes);
        // Client device segments are checked only where clients may have some.
        let client_devices = (self.client_device_queues > 0).then_some((
            "client_device_segment_size",
            self.client_device_segment_size,
            device_lanes,
            0,
        ));
        for (field, size, lanes, clients) in [
            ("gpu_segment_size", self.gpu_segment_size, device_lanes, 0),
            (
                "cpu_segment_size",
                self.cpu_segment_size,
                self.lanes,
                clients,
            ),
        ]
        .into_iter()
        .chain(client_devices)
        {
            if size > 1 << 40 {
                return invalid(field, format!("{size} bytes is more than 1 TiB"));
            }
            let needed =
                crate::segment::SegmentGeometry::min_bytes(lanes, self.queue_depth, clients);
            if size < needed {
                let with_clients = if clients == 0 {
                    String::new()
                } else {
                    format!(", {} client heaps of {heap} bytes", self.max_clients)
                };
                return invalid(
                    field,
                    format!(
                        "{size} bytes cannot hold {lanes} lanes of depth {}{with_clients} and a heap ({needed} needed)",
                        self.queue_depth
                    ),
                );
            }
        }
        Ok(())
    }

    /// Worker threads asked for a runtime serving `devices` devices (before
    /// the cap to the cores): [`workers_per_device`](Self::workers_per_device)
    /// times the devices (at least once), else [`workers`](Self::workers).
    pub fn workers_for(&self, devices: usize) -> usize {
        self.workers_per_device
            .map_or(self.workers, |n| n.saturating_mul(devices.max(1)))
    }

    /// Lanes of a device segment on `backend`: [`gpu_lanes`](Self::gpu_lanes)
    /// on a GPU, [`lanes`](Self::lanes) on the CPU device, whose workers
    /// sweep every lane and find more of them empty (docs/design/pcie.md,
    /// "Many lanes").
    pub fn device_lanes(&self, backend: Backend) -> u32 {
        if backend == Backend::Host {
            self.lanes
        } else {
            self.gpu_lanes
        }
    }
}

/// A [`Config::validate`] failure: `field`'s value, and why it is refused.
fn invalid(field: &'static str, why: String) -> Result<(), ConfigError> {
    Err(ConfigError::Invalid { field, why })
}

impl Config {
    /// The configuration as TOML that [`from_toml`](Self::from_toml) reads
    /// back to an equal value.
    pub fn to_toml(&self) -> String {
        let workers = match self.workers_per_device {
            Some(n) => format!("workers_per_device = {n}"),
            None => format!("workers = {}", self.workers),
        };
        let mut text = format!(
            "{workers}\nqueue_depth = {}\nlanes = {}\ngpu_lanes = {}\ngpu_segment_size = {}\n\
             cpu_segment_size = {}\ncopy_space = {}\nmax_clients = {}\nclient_heap_bytes = {}\n\
             client_device_queues = {}\nclient_device_segment_size = {}\n",
            self.queue_depth,
            self.lanes,
            self.gpu_lanes,
            self.gpu_segment_size,
            self.cpu_segment_size,
            self.copy_space,
            self.max_clients,
            self.client_heap_bytes,
            self.client_device_queues,
            self.client_device_segment_size
        );
        match &self.devices {
            DeviceSelection::All => text.push_str("devices = \"all\"\n"),
            DeviceSelection::Only(list) => {
                let items: Vec<String> = list.iter().map(|o| o.to_string()).collect();
                text.push_str(&format!("devices = [{}]\n", items.join(", ")));
            }
        }
        if let Some(name) = &self.cpu_segment_name {
            // Debug quoting escapes like a TOML basic string for the
            // characters a segment name may hold.
            text.push_str(&format!("cpu_segment_name = {name:?}\n"));
        }
        if let Some(addr) = self.metrics {
            text.push_str(&format!("metrics = \"{addr}\"\n"));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endless_file_is_not_a_configuration() {
        let e = Config::from_file(Path::new("/dev/zero")).unwrap_err();
        assert!(e.to_string().contains("not a configuration file"), "{e}");
    }

    #[test]
    fn device_segments_take_their_backends_lanes() {
        let d = Config::default();
        assert_eq!((d.lanes, d.gpu_lanes), (16, 64));
        assert_eq!(d.device_lanes(Backend::Host), d.lanes);
        assert_eq!(d.device_lanes(Backend::Cuda), d.gpu_lanes);
        assert_eq!(d.device_lanes(Backend::Hip), d.gpu_lanes);
        let c = Config {
            lanes: 3,
            gpu_lanes: 5,
            ..d
        };
        assert_eq!(
            (c.device_lanes(Backend::Host), c.device_lanes(Backend::Cuda)),
            (3, 5)
        );
    }

    #[test]
    fn metrics_takes_a_port_or_an_address_and_round_trips() {
        assert_eq!(Config::default().metrics, None);
        let port = Config::from_toml("metrics = \"9464\"").expect("a port");
        assert_eq!(port.metrics, Some("127.0.0.1:9464".parse().unwrap()));
        let any = Config::from_toml("metrics = \"0.0.0.0:9464\"").expect("an address");
        assert_eq!(any.metrics, Some("0.0.0.0:9464".parse().unwrap()));
        assert_eq!(Config::from_toml(&any.to_toml()).expect("round trip"), any);
        let e = Config::from_toml("metrics = \"localhost\"").unwrap_err();
        assert!(e.to_string().contains("`metrics`"), "{e}");
    }

    #[test]
    fn gpu_lanes_round_trips_and_is_validated() {
        assert_eq!(Config::from_toml("").expect("empty").gpu_lanes, 64);
        let c = Config::from_toml("gpu_lanes = 8\nlanes = 4").expect("parse");
        assert_eq!((c.lanes, c.gpu_lanes), (4, 8));
        assert!(c.to_toml().contains("gpu_lanes = 8\n"));
        assert_eq!(Config::from_toml(&c.to_toml()).expect("round trip"), c);
        for bad in ["gpu_lanes = 0", "gpu_lanes = 1025", "gpu_lanes = -1"] {
            assert!(Config::from_toml(bad).is_err(), "{bad} accepted");
        }
        let field = |text: &str| match Config::from_toml(text) {
            Err(ConfigError::Invalid { field, .. }) => field,
            other => panic!("{text}: {other:?}"),
        };
        assert_eq!(field("gpu_lanes = 0"), "gpu_lanes");
        // The device segment must hold the larger of the two lane counts,
        // whichever backend starts: the smallest size that holds 16 lanes
        // is too small for 64 GPU lanes, and enough when they are 16 too.
        let depth = Config::default().queue_depth;
        let fits_16 = crate::segment::SegmentGeometry::min_bytes(16, depth, 0);
        let text = format!("gpu_segment_size = {fits_16}");
        assert_eq!(field(&text), "gpu_segment_size");
        let c = Config::from_toml(&format!("{text}\ngpu_lanes = 16")).expect("16 GPU lanes fit");
        assert_eq!(c.gpu_segment_size, fits_16);
        let c = Config::from_toml(&format!("{text}\ngpu_lanes = 4")).expect("lanes decide");
        assert_eq!(c.gpu_lanes, 4);
        let big = Config {
            lanes: 64,
            gpu_lanes: 4,
            gpu_segment_size: fits_16,
            ..Config::default()
        };
        assert!(matches!(
            big.validate(),
            Err(ConfigError::Invalid {
                field: "gpu_segment_size",
                ..
            })
        ));
    }

    #[test]
    fn a_device_listed_twice_is_refused_naming_it() {
        for (text, ordinal) in [("devices = [0, 0]", 0), ("devices = [1, 2, 3, 2]", 2)] {
            match Config::from_toml(text) {
                Err(ConfigError::Invalid {
                    field: "devices",
                    why,
                }) => assert!(why.contains(&format!("device {ordinal} ")), "{text}: {why}"),
                other => panic!("{text}: {other:?}"),
            }
        }
        let c = Config::from_toml("devices = [2, 0]").expect("distinct devices");
        assert_eq!(c.devices, DeviceSelection::Only(vec![2, 0]));
        let repeated = Config {
            devices: DeviceSelection::Only(vec![0, 0]),
            ..Config::default()
        };
        assert!(repeated
            .validate()
            .is_err_and(|e| e.to_string().contains("`devices`")));
    }

    #[test]
    fn workers_are_counted_in_all_or_per_device() {
        let d = Config::default();
        assert_eq!(
            (d.workers_for(0), d.workers_for(1), d.workers_for(4)),
            (4, 4, 4)
        );
        let c = Config::from_toml("workers_per_device = 3").expect("parse");
        assert_eq!(c.workers_per_device, Some(3));
        assert_eq!(
            (c.workers_for(0), c.workers_for(1), c.workers_for(4)),
            (3, 3, 12)
        );
        assert!(c.to_toml().contains("workers_per_device = 3\n"));
        assert!(!c.to_toml().contains("workers = "));
        assert_eq!(Config::from_toml(&c.to_toml()).expect("round trip"), c);
        for bad in [
            "workers_per_device = 0",
            "workers_per_device = 1025",
            "workers = 2\nworkers_per_device = 2",
        ] {
            assert!(
                matches!(
                    Config::from_toml(bad),
                    Err(ConfigError::Invalid {
                        field: "workers_per_device",
                        ..
                    })
                ),
                "{bad} accepted"
            );
        }
    }
}
