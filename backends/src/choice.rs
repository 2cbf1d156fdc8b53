//! A backend as a user names it, checked against the build.

use core::fmt;
use core::str::FromStr;

use tandem_hal::Backend;

/// Which backend to run on.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum BackendChoice {
    /// CUDA when built with it and a device answers, else HIP likewise,
    /// else the CPU device.
    #[default]
    Auto,
    /// This one, or an error.
    Only(Backend),
}

/// Every backend, in the order `auto` tries them (the CPU device last, as
/// it always answers).
const ALL: [Backend; 3] = [Backend::Cuda, Backend::Hip, Backend::Host];

impl BackendChoice {
    /// Whether this build has `backend` (its cargo feature was on).
    pub const fn is_built(backend: Backend) -> bool {
        match backend {
            Backend::Host => true,
            Backend::Cuda => cfg!(feature = "cuda"),
            Backend::Hip => cfg!(feature = "hip"),
        }
    }

    /// The names this build accepts, `auto` first: what an error or a
    /// `--help` lists.
    pub fn names() -> Vec<&'static str> {
        let mut names = vec!["auto", "host"];
        names.extend(
            [Backend::Cuda, Backend::Hip]
                .into_iter()
                .filter(|b| Self::is_built(*b))
                .map(name),
        );
        names
    }
}

/// A backend's name as users write it.
fn name(backend: Backend) -> &'static str {
    match backend {
        Backend::Host => "host",
        Backend::Cuda => "cuda",
        Backend::Hip => "hip",
    }
}

impl fmt::Display for BackendChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendChoice::Auto => f.write_str("auto"),
            BackendChoice::Only(backend) => f.write_str(name(*backend)),
        }
    }
}

/// A backend name that [`BackendChoice::from_str`] refused.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum BackendChoiceError {
    /// No backend has this name.
    Unknown(String),
    /// A backend this build left out (built without its feature).
    NotBuilt(Backend),
}

impl fmt::Display for BackendChoiceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = BackendChoice::names()
            .iter()
            .map(|name| format!("{name:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        match self {
            BackendChoiceError::Unknown(given) => {
                write!(f, "{given:?} names no backend; this build has {names}")
            }
            BackendChoiceError::NotBuilt(backend) => write!(
                f,
                "this build has no {0} backend (built without the {0} feature); it has {names}",
                name(*backend)
            ),
        }
    }
}

impl std::error::Error for BackendChoiceError {}

impl FromStr for BackendChoice {
    type Err = BackendChoiceError;

    /// `auto`, `host`, `cuda` or `hip`, in lower case as the CLI and the
    /// docs write them.
    fn from_str(given: &str) -> Result<Self, Self::Err> {
        if given == "auto" {
            return Ok(BackendChoice::Auto);
        }
        let backend = ALL
            .into_iter()
            .find(|b| name(*b) == given)
            .ok_or_else(|| BackendChoiceError::Unknown(given.to_owned()))?;
        if !Self::is_built(backend) {
            return Err(BackendChoiceError::NotBuilt(backend));
        }
        Ok(BackendChoice::Only(backend))
    }
}

/// The order `auto` tries the backends in.
pub(crate) fn auto_order() -> impl Iterator<Item = Backend> {
    ALL.into_iter().filter(|b| BackendChoice::is_built(*b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_to_their_choice() {
        for given in BackendChoice::names() {
            let choice: BackendChoice = given.parse().expect("a name this build lists");
            assert_eq!(choice.to_string(), given);
        }
        assert_eq!("auto".parse(), Ok(BackendChoice::Auto));
        assert_eq!("host".parse(), Ok(BackendChoice::Only(Backend::Host)));
    }

    #[test]
    fn an_unknown_name_is_refused_with_the_names_there_are() {
        for given in ["rocm", "CUDA", "", "host "] {
            let e = given.parse::<BackendChoice>().unwrap_err();
            assert_eq!(e, BackendChoiceError::Unknown(given.to_owned()));
            assert!(e.to_string().contains(r#""auto", "host""#), "{e}");
        }
    }

    #[test]
    fn a_backend_left_out_of_the_build_is_refused_by_name() {
        for backend in [Backend::Cuda, Backend::Hip] {
            let parsed = name(backend).parse::<BackendChoice>();
            if BackendChoice::is_built(backend) {
                assert_eq!(parsed, Ok(BackendChoice::Only(backend)));
            } else {
                let e = parsed.unwrap_err();
                assert_eq!(e, BackendChoiceError::NotBuilt(backend));
                assert!(e.to_string().contains("feature"), "{e}");
            }
        }
    }

    #[test]
    fn auto_tries_the_cpu_device_last() {
        assert_eq!(auto_order().last(), Some(Backend::Host));
    }
}
