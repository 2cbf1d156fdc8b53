//! A record's summary block: the figures it measured, one row each, against a floor or peer.
//!
//! ````text
//! ```summary
//! machine: h100
//! figure | value | unit | against | ratio | goal
//! GPU route, kernel thread round trip | 1.55 | us | device floor | 1.23 | <= 1.5
//! 132 x 128 kernel threads -> service | 1740.6 | M tasks/s | - | - | -
//! ```
//! ````
//!
//! `against` names the floor or peer the ratio is taken to (`-`: none); `goal` is the
//! target on the ratio (`<= X` or `>= X`; `-`: none).

/// A ratio's target.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Goal {
    /// `<=` (a cost against its floor) rather than `>=` (a rate against its peer).
    pub at_most: bool,
    pub ratio: f64,
}

/// One figure of a record.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub figure: String,
    pub value: f64,
    pub unit: String,
    pub against: String,
    pub ratio: Option<f64>,
    pub goal: Option<Goal>,
}

/// A record's block.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// The machine kind (`h100`, `h200`, `dev-vm-2core`): one line per kind in the plots.
    pub machine: String,
    pub rows: Vec<Row>,
}

const FENCE: &str = "```summary";
const HEADER: &str = "figure | value | unit | against | ratio | goal";

/// The summary block of a record's text: `None` when it has none; `Err` names the line (from
/// 1) that is not what the format says.
pub fn parse(text: &str) -> Result<Option<Summary>, String> {
    let mut lines = text
        .lines()
        .enumerate()
        .skip_while(|(_, l)| l.trim() != FENCE);
    let Some((fence, _)) = lines.next() else {
        return Ok(None);
    };
    let mut machine = None;
    let mut rows = Vec::new();
    for (i, line) in lines {
        let line = line.trim();
        let bad = |why: &str| format!("line {}: {why}: `{line}`", i + 1);
        if line == "```" {
            let machine = machine.ok_or_else(|| bad("the block names no `machine:`"))?;
            if rows.is_empty() {
                return Err(bad("the block has no rows"));
            }
            return Ok(Some(Summary { machine, rows }));
        }
        if let Some(kind) = line.strip_prefix("machine:") {
            machine = Some(kind.trim().to_owned());
        } else if line != HEADER && !line.is_empty() {
            rows.push(row(line).map_err(|why| bad(&why))?);
        }
    }
    Err(format!(
        "line {}: the summary block is not closed",
        fence + 1
    ))
}

fn row(line: &str) -> Result<Row, String> {
    let cells: Vec<&str> = line.split('|').map(str::trim).collect();
    let [figure, value, unit, against, ratio, goal] = cells[..] else {
        return Err(format!("{} cells, not 6 (`{HEADER}`)", cells.len()));
    };
    let number = |cell: &str, what: &str| {
        cell.parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or_else(|| format!("{what} `{cell}` is not a number"))
    };
    let optional = |cell: &str, what: &str| match cell {
        "-" => Ok(None),
        _ => number(cell, what).map(Some),
    };
    let goal = match goal {
        "-" => None,
        _ => {
            let (at_most, rest) = if let Some(rest) = goal.strip_prefix("<=") {
                (true, rest)
            } else if let Some(rest) = goal.strip_prefix(">=") {
                (false, rest)
            } else {
                return Err(format!("goal `{goal}` is not `<= X`, `>= X` or `-`"));
            };
            Some(Goal {
                at_most,
                ratio: number(rest.trim(), "goal")?,
            })
        }
    };
    if figure.is_empty() {
        return Err("a row without a figure".into());
    }
    Ok(Row {
        figure: figure.to_owned(),
        value: number(value, "value")?,
        unit: unit.to_owned(),
        against: against.to_owned(),
        ratio: optional(ratio, "ratio")?,
        goal,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_is_read_row_by_row() {
        let text = "# A record\n\n```summary\nmachine: h100\n\
                    figure | value | unit | against | ratio | goal\n\
                    round trip | 1.55 | us | device floor | 1.23 | <= 1.5\n\
                    throughput | 1740.6 | M tasks/s | - | - | -\n```\nmore\n";
        let s = parse(text).unwrap().unwrap();
        assert_eq!(s.machine, "h100");
        assert_eq!(s.rows.len(), 2);
        assert_eq!(s.rows[0].ratio, Some(1.23));
        let goal = Goal {
            at_most: true,
            ratio: 1.5,
        };
        assert_eq!(s.rows[0].goal, Some(goal));
        assert_eq!((s.rows[1].ratio, s.rows[1].goal), (None, None));
    }

    #[test]
    fn no_block_is_none_and_a_bad_one_names_its_line() {
        assert_eq!(parse("# A record\nno block\n").unwrap(), None);
        let open = parse("```summary\nmachine: h100\nx | 1 | us | - | - | -\n").unwrap_err();
        assert!(open.contains("not closed"), "{open}");
        let short = parse("```summary\nmachine: h1\nx | 1 | us\n```\n").unwrap_err();
        assert!(
            short.starts_with("line 3:") && short.contains("3 cells"),
            "{short}"
        );
        let goal = parse("```summary\nmachine: h1\nx | 1 | us | f | 1 | < 2\n```\n");
        assert!(goal.unwrap_err().contains("goal `< 2`"));
        let machine = parse("```summary\nx | 1 | us | f | 1 | -\n```\n").unwrap_err();
        assert!(machine.contains("machine"), "{machine}");
    }
}
