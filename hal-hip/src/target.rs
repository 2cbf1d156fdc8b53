//! AMDGPU target ids and the choice of a code object for a device.
//!
//! A device reports its target id as `gcnArchName`, a processor followed by
//! the modes it runs in: `gfx90a:sramecc+:xnack-`. A code object is built for
//! a processor and, optionally, for one setting of some of those features;
//! a feature it leaves out works in either mode. The ROCm loader refuses a
//! code object whose processor differs, or that asks for a setting the device
//! is not in, so the choice is made here, where the error can name what was
//! available, instead of as an opaque `hipModuleLoadData` failure.

/// The processor part of a target id: `gfx90a` for `gfx90a:sramecc+:xnack-`.
pub fn processor_of(target_id: &str) -> &str {
    target_id
        .split_once(':')
        .map_or(target_id, |(processor, _)| processor)
}

/// The setting (`+` is true) that `target_id` gives `feature`, if any.
/// Malformed features (no trailing `+`/`-`) give `None`.
fn feature_setting(target_id: &str, feature: &str) -> Option<bool> {
    target_id
        .split(':')
        .skip(1)
        .find_map(|f| match f.strip_prefix(feature)? {
            "+" => Some(true),
            "-" => Some(false),
            _ => None,
        })
}

/// The features `target_id` pins, as `(name, setting)`; `None` if one of them
/// is malformed (a code object with such a target is never chosen).
fn pinned_features(target_id: &str) -> Option<Vec<(&str, bool)>> {
    target_id
        .split(':')
        .skip(1)
        .map(|f| {
            if let Some(name) = f.strip_suffix('+') {
                Some((name, true))
            } else {
                f.strip_suffix('-').map(|name| (name, false))
            }
        })
        .collect()
}

/// Whether a code object built for `object_target` loads on a device whose
/// target id is `device_target`: same processor, and every feature the object
/// pins set the same way on the device. Returns how many features it pins
/// (more is a closer fit), or `None` if it does not load.
fn fit(device_target: &str, object_target: &str) -> Option<usize> {
    if processor_of(object_target) != processor_of(device_target) {
        return None;
    }
    let pinned = pinned_features(object_target)?;
    pinned
        .iter()
        .all(|&(name, on)| feature_setting(device_target, name) == Some(on))
        .then_some(pinned.len())
}

/// Picks, from `(target id, code object)` pairs, the code object for a device
/// with target id `device_target`: the compatible one that pins the most
/// features (the first listed among equals). The error names the device's
/// target and every available one.
pub fn select_code_object<'a>(
    device_target: &str,
    objects: &[(&str, &'a [u8])],
) -> Result<&'a [u8], String> {
    let mut best: Option<(usize, &'a [u8])> = None;
    for &(target, object) in objects {
        if let Some(score) = fit(device_target, target) {
            if best.is_none_or(|(best_score, _)| score > best_score) {
                best = Some((score, object));
            }
        }
    }
    best.map(|(_, object)| object).ok_or_else(|| {
        let available: Vec<&str> = objects.iter().map(|&(target, _)| target).collect();
        format!(
            "no HIP code object for device target {device_target} (available: {})",
            if available.is_empty() {
                "none".to_string()
            } else {
                available.join(", ")
            }
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MI200: &str = "gfx90a:sramecc+:xnack-";

    #[test]
    fn processor_is_the_part_before_the_first_colon() {
        assert_eq!(processor_of(MI200), "gfx90a");
        assert_eq!(processor_of("gfx1030"), "gfx1030");
        assert_eq!(processor_of(""), "");
    }

    #[test]
    fn feature_settings_are_read_from_the_target_id() {
        assert_eq!(feature_setting(MI200, "sramecc"), Some(true));
        assert_eq!(feature_setting(MI200, "xnack"), Some(false));
        assert_eq!(feature_setting(MI200, "tgsplit"), None);
        assert_eq!(feature_setting("gfx90a", "xnack"), None);
    }

    #[test]
    fn a_generic_object_for_the_processor_is_chosen() {
        let objects: &[(&str, &[u8])] = &[("gfx908", b"908"), ("gfx90a", b"90a")];
        assert_eq!(select_code_object(MI200, objects), Ok(&b"90a"[..]));
    }

    #[test]
    fn the_closest_fit_wins_over_a_generic_object() {
        let objects: &[(&str, &[u8])] = &[
            ("gfx90a", b"generic"),
            ("gfx90a:xnack-", b"xnack-off"),
            ("gfx90a:xnack+", b"xnack-on"),
        ];
        assert_eq!(select_code_object(MI200, objects), Ok(&b"xnack-off"[..]));
        assert_eq!(
            select_code_object("gfx90a:sramecc+:xnack+", objects),
            Ok(&b"xnack-on"[..])
        );
    }

    #[test]
    fn a_pinned_feature_the_device_lacks_does_not_load() {
        let objects: &[(&str, &[u8])] = &[("gfx90a:xnack+", b"on")];
        let err = select_code_object(MI200, objects).unwrap_err();
        assert!(err.contains(MI200), "{err}");
        assert!(err.contains("gfx90a:xnack+"), "{err}");
        // A device that does not report the feature at all cannot run code
        // that pins it either.
        assert!(select_code_object("gfx90a", objects).is_err());
    }

    #[test]
    fn malformed_targets_are_never_chosen() {
        let objects: &[(&str, &[u8])] = &[("gfx90a:xnack", b"bad")];
        assert!(select_code_object(MI200, objects).is_err());
    }

    #[test]
    fn another_processor_is_refused_naming_what_exists() {
        let objects: &[(&str, &[u8])] = &[("gfx1030", b"rdna2"), ("gfx908", b"mi100")];
        let err = select_code_object(MI200, objects).unwrap_err();
        assert_eq!(
            err,
            "no HIP code object for device target gfx90a:sramecc+:xnack- \
             (available: gfx1030, gfx908)"
        );
        // Sharing a prefix is not the same processor.
        let objects: &[(&str, &[u8])] = &[("gfx90", b"x")];
        assert!(select_code_object(MI200, objects).is_err());
    }

    #[test]
    fn no_objects_at_all() {
        let err = select_code_object(MI200, &[]).unwrap_err();
        assert!(err.ends_with("(available: none)"), "{err}");
    }
}
