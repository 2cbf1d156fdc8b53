//! Reading the libtest summary line (`test result: ok. 3 passed; 0 failed; ...`), and pytest's
//! (`==== 3 passed, 1 skipped in 0.52s ====`), so that each leg can say how many tests it ran,
//! not only whether its commands exited with 0.

/// One `test result:` line: the verdict of one test harness (a unit, integration or doc test
/// binary).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TestResultLine {
    /// Tests that passed.
    pub passed: u64,
    /// Tests that failed.
    pub failed: u64,
    /// Tests marked `#[ignore]`.
    pub ignored: u64,
}

impl TestResultLine {
    /// Parses a libtest or pytest summary line; `None` if `line` is not one.
    pub fn parse(line: &str) -> Option<Self> {
        Self::parse_libtest(line).or_else(|| Self::parse_pytest(line))
    }

    /// Pytest's last line: `N label` items joined by `, `, then ` in 0.52s` (and, past a
    /// minute, the time again in parentheses), between rules of `=`. Skipped tests count as
    /// ignored, errors as failures.
    fn parse_pytest(line: &str) -> Option<Self> {
        let body = line.trim().trim_matches('=').trim();
        let (counts, time) = body.rsplit_once(" in ")?;
        if !time.split(' ').next()?.ends_with('s') {
            return None;
        }
        let (mut passed, mut failed, mut ignored) = (0, 0, 0);
        for item in counts.split(", ") {
            let (number, label) = item.split_once(' ')?;
            let number = number.parse::<u64>().ok()?;
            match label {
                "passed" | "xpassed" => passed += number,
                "failed" | "error" | "errors" => failed += number,
                "skipped" | "xfailed" | "deselected" => ignored += number,
                "warning" | "warnings" => {}
                _ => return None,
            }
        }
        Some(Self {
            passed,
            failed,
            ignored,
        })
    }

    fn parse_libtest(line: &str) -> Option<Self> {
        let rest = line.trim().strip_prefix("test result: ")?;
        let (verdict, counts) = rest.split_once(". ")?;
        // The verdict is implied by the counts; it is checked only to recognise the line.
        if verdict != "ok" && verdict != "FAILED" {
            return None;
        }
        let (mut passed, mut failed, mut ignored) = (None, None, None);
        for item in counts.split("; ") {
            // Items are `N label`; the last one, `finished in 0.01s`, is not a count.
            let Some((number, label)) = item.split_once(' ') else {
                continue;
            };
            let Ok(number) = number.parse::<u64>() else {
                continue;
            };
            match label {
                "passed" => passed = Some(number),
                "failed" => failed = Some(number),
                "ignored" => ignored = Some(number),
                _ => {}
            }
        }
        Some(Self {
            passed: passed?,
            failed: failed?,
            ignored: ignored.unwrap_or(0),
        })
    }
}

/// The sum of every harness summary one command printed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TestTally {
    /// Harnesses that printed a summary.
    pub harnesses: u64,
    /// Tests that passed, over all harnesses.
    pub passed: u64,
    /// Tests that failed, over all harnesses.
    pub failed: u64,
    /// Ignored tests, over all harnesses.
    pub ignored: u64,
}

impl TestTally {
    /// Adds `line` if it is a `test result:` line.
    pub fn observe(&mut self, line: &str) {
        if let Some(result) = TestResultLine::parse(line) {
            self.harnesses += 1;
            self.passed += result.passed;
            self.failed += result.failed;
            self.ignored += result.ignored;
        }
    }

    /// `passed/failed/ignored`, or `-` when no harness reported.
    pub fn short(&self) -> String {
        if self.harnesses == 0 {
            "-".into()
        } else {
            format!("{}/{}/{}", self.passed, self.failed, self.ignored)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ok_and_failed_lines() {
        let ok = "test result: ok. 12 passed; 0 failed; 3 ignored; 0 measured; 1 filtered out; finished in 0.42s";
        assert_eq!(
            TestResultLine::parse(ok),
            Some(TestResultLine {
                passed: 12,
                failed: 0,
                ignored: 3
            })
        );
        let failed = "test result: FAILED. 4 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.00s\r";
        assert_eq!(
            TestResultLine::parse(failed),
            Some(TestResultLine {
                passed: 4,
                failed: 2,
                ignored: 0
            })
        );
    }

    #[test]
    fn parses_pytest_summaries() {
        let line = "=========== 2 failed, 12 passed, 3 skipped, 1 warning in 1.52s ===========";
        assert_eq!(
            TestResultLine::parse(line),
            Some(TestResultLine {
                passed: 12,
                failed: 2,
                ignored: 3
            })
        );
        assert_eq!(
            TestResultLine::parse("14 passed in 65.20s (0:01:05)"),
            Some(TestResultLine {
                passed: 14,
                failed: 0,
                ignored: 0
            })
        );
    }

    #[test]
    fn rejects_lines_that_are_not_summaries() {
        for line in [
            "",
            "running 3 tests",
            "test ring::wraps ... ok",
            "test result: maybe. 1 passed; 0 failed;",
            "test result: ok. lots passed; 0 failed; 0 ignored",
            "test result: ok. 1 passed",
            "tests/test_share.py::test_bad_input PASSED in 2s",
            "the blob put 3 chunks in 0.1s",
        ] {
            assert_eq!(TestResultLine::parse(line), None, "{line:?}");
        }
    }

    #[test]
    fn tally_sums_harnesses_and_ignores_other_lines() {
        let mut tally = TestTally::default();
        assert_eq!(tally.short(), "-");
        for line in [
            "running 2 tests",
            "test result: ok. 2 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.00s",
            "test result: FAILED. 5 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s",
        ] {
            tally.observe(line);
        }
        assert_eq!(
            tally,
            TestTally {
                harnesses: 2,
                passed: 7,
                failed: 1,
                ignored: 1
            }
        );
        assert_eq!(tally.short(), "7/1/1");
    }
}
