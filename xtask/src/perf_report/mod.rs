//! `cargo xtask perf-report [--check]`: reads the records in `docs/perf/`, each one's summary
//! block ([`summary`]), and plots every figure that has a ratio: its ratio over time, a line
//! per machine kind, with its goal ([`svg`]). The plots go to `docs/perf/plots/`, and
//! `docs/perf/README.md`'s plots section shows them. A record without a block is listed as
//! such, never read for figures. `--check` writes nothing and fails where the plots or the
//! section differ from what the records make.

mod summary;
mod svg;

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::XtaskError;

use self::summary::{Goal, Summary};
use self::svg::{day_number, Line, Point};

/// Where the section of docs/perf/README.md that this command writes starts and ends.
const SECTION_START: &str = "<!-- perf-report: written by `cargo xtask perf-report` -->";
const SECTION_END: &str = "<!-- perf-report: end -->";

/// What the records say, figure by figure.
struct Figure {
    against: String,
    /// The latest record's goal.
    goal: Option<Goal>,
    /// Points by machine kind.
    lines: BTreeMap<String, Vec<Point>>,
}

/// The records read: their figures, and the records without a block.
struct Records {
    figures: BTreeMap<String, Figure>,
    without: Vec<String>,
    with: usize,
}

/// Reads every dated record in `dir`.
fn read_records(dir: &Path) -> Result<Records, XtaskError> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(XtaskError::io(dir))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".md") && day_number(n.get(..10).unwrap_or("")).is_some())
        .collect();
    names.sort();
    let mut records = Records {
        figures: BTreeMap::new(),
        without: Vec::new(),
        with: 0,
    };
    for name in names {
        let path = dir.join(&name);
        let text = std::fs::read_to_string(&path).map_err(XtaskError::io(&path))?;
        let bad = |why: String| XtaskError::Check(format!("{}: {why}", path.display()));
        match summary::parse(&text).map_err(bad)? {
            None => records.without.push(name),
            Some(summary) => {
                records.with += 1;
                add(&mut records.figures, &name, summary);
            }
        }
    }
    Ok(records)
}

/// Adds a record's rows that have a ratio (records come in date order).
fn add(figures: &mut BTreeMap<String, Figure>, record: &str, summary: Summary) {
    let date = &record[..10];
    for row in summary.rows {
        let Some(ratio) = row.ratio else { continue };
        let figure = figures.entry(row.figure).or_insert_with(|| Figure {
            against: row.against.clone(),
            goal: None,
            lines: BTreeMap::new(),
        });
        figure.against = row.against;
        figure.goal = row.goal.or(figure.goal);
        figure
            .lines
            .entry(summary.machine.clone())
            .or_default()
            .push(Point {
                day: day_number(date).unwrap_or(0),
                date: date.to_owned(),
                ratio,
                record: record.to_owned(),
            });
    }
}

/// A figure's file name: its words in lower case, joined by `-`.
fn slug(figure: &str) -> String {
    let words: Vec<String> = figure
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .collect();
    words.join("-")
}

/// The README's section: each plot, then the records without a block.
fn section(records: &Records) -> String {
    let mut text = format!(
        "{SECTION_START}\n\nEach figure's ratio to its floor or peer, by record date and machine \
         kind, with its goal (dashed), from the records' `summary` blocks ({} of {} records \
         have one).\n\n",
        records.with,
        records.with + records.without.len()
    );
    for name in records.figures.keys() {
        text.push_str(&format!("![{name}](plots/{}.svg)\n\n", slug(name)));
    }
    if !records.without.is_empty() {
        text.push_str("Records without a summary block (not plotted):\n\n");
        for name in &records.without {
            text.push_str(&format!("- [{name}]({name})\n"));
        }
        text.push('\n');
    }
    text.push_str(SECTION_END);
    text
}

/// `readme` with its section replaced by `section` (or appended, the first time).
fn with_section(readme: &str, section: &str) -> String {
    match (readme.find(SECTION_START), readme.find(SECTION_END)) {
        (Some(start), Some(end)) if start < end => format!(
            "{}{section}{}",
            &readme[..start],
            &readme[end + SECTION_END.len()..]
        ),
        _ => format!("{}\n## Plots\n\n{section}\n", readme.trim_end()),
    }
}

/// Writes (or with `check`, compares) `path`'s `text`; whether it was already so.
fn write_or_check(path: &Path, text: &str, check: bool) -> Result<bool, XtaskError> {
    if std::fs::read_to_string(path).ok().as_deref() == Some(text) {
        return Ok(true);
    }
    if !check {
        std::fs::write(path, text).map_err(XtaskError::io(path))?;
    }
    Ok(false)
}

/// `cargo xtask perf-report [--check]` in the workspace at `root`.
pub fn run(root: &Path, check: bool) -> Result<(), XtaskError> {
    let dir = root.join("docs/perf");
    let records = read_records(&dir)?;
    let plots = dir.join("plots");
    std::fs::create_dir_all(&plots).map_err(XtaskError::io(&plots))?;
    let mut stale = Vec::new();
    for (name, figure) in &records.figures {
        let lines: Vec<Line> = figure
            .lines
            .iter()
            .map(|(machine, points)| Line {
                machine: machine.clone(),
                points: points.clone(),
            })
            .collect();
        let text = svg::plot(name, &figure.against, figure.goal, &lines);
        let path = plots.join(format!("{}.svg", slug(name)));
        if !write_or_check(&path, &text, check)? {
            stale.push(path.display().to_string());
        }
    }
    let readme_path = dir.join("README.md");
    let readme = std::fs::read_to_string(&readme_path).map_err(XtaskError::io(&readme_path))?;
    if !write_or_check(
        &readme_path,
        &with_section(&readme, &section(&records)),
        check,
    )? {
        stale.push(readme_path.display().to_string());
    }
    println!(
        "perf-report: {} records with a summary block, {} figures plotted in {}",
        records.with,
        records.figures.len(),
        plots.display()
    );
    for name in &records.without {
        println!("perf-report: {name}: no summary block (not plotted)");
    }
    match (check, stale.is_empty()) {
        (true, false) => Err(XtaskError::Check(format!(
            "perf-report --check: out of date (run `cargo xtask perf-report`): {}",
            stale.join(", ")
        ))),
        (false, false) => {
            println!("perf-report: wrote {}", stale.join(", "));
            Ok(())
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_words_joined() {
        assert_eq!(
            slug("GPU route: kernel thread -> service"),
            "gpu-route-kernel-thread-service"
        );
    }

    #[test]
    fn the_section_is_replaced_in_place_or_appended() {
        let section = format!("{SECTION_START}\nnew\n{SECTION_END}");
        let first = with_section("# Records\n\ntext\n", &section);
        assert!(
            first.ends_with(&format!("## Plots\n\n{section}\n")),
            "{first}"
        );
        let again = with_section(&first.replace("new", "old"), &section);
        assert_eq!(again, first);
    }
}
