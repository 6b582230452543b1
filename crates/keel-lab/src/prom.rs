//! A small reader of Prometheus' text exposition format (0.0.4), for the few series the lab
//! charts: enough to take a `GET /metrics` answer apart into samples and look them up by name
//! and labels. It is not a validator: `# HELP` and `# TYPE` lines are skipped, timestamps
//! ignored, and what it needs to know about a metric's type comes from the name the caller asks
//! for (`…_sum`, `…_count`).

use std::fmt;

/// One sample line: `name{label="value",…} value [timestamp]`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample {
    /// The series' name (a histogram's `_bucket`, `_sum` and `_count` are names of their own).
    pub(crate) name: String,
    /// The labels, in the order the text gives them, values unescaped.
    pub(crate) labels: Labels,
    /// The value (`+Inf`, `-Inf` and `NaN` included).
    pub(crate) value: f64,
}

impl Sample {
    /// The value of label `key`, if the sample has it.
    pub(crate) fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Whether the sample carries every `(label, value)` of `want` (and maybe others).
    pub(crate) fn has(&self, want: &[(&str, &str)]) -> bool {
        want.iter().all(|(k, v)| self.label(k) == Some(v))
    }
}

/// A line the reader could not take apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParseError {
    /// 1-based line number.
    pub(crate) line: usize,
    /// What was wrong.
    pub(crate) what: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "metrics text, line {}: {}", self.line, self.what)
    }
}

impl std::error::Error for ParseError {}

/// The samples of one scrape.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Metrics {
    /// Every sample kept, in the text's order.
    pub(crate) samples: Vec<Sample>,
}

impl Metrics {
    /// Reads every sample of `text` (the lab keeps only what it charts: [`Metrics::parse_only`]).
    #[cfg(test)]
    pub(crate) fn parse(text: &str) -> Result<Metrics, ParseError> {
        Metrics::parse_only(text, |_| true)
    }

    /// Reads the samples whose name `keep` accepts; other lines are skipped after reading
    /// their name, so a scrape's many uninteresting series cost next to nothing.
    pub(crate) fn parse_only(
        text: &str,
        keep: impl Fn(&str) -> bool,
    ) -> Result<Metrics, ParseError> {
        let mut samples = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let err = |what: &str| ParseError {
                line: i + 1,
                what: format!("{what}: {line:?}"),
            };
            let name_end = line
                .find(|c: char| c == '{' || c.is_whitespace())
                .ok_or_else(|| err("no value"))?;
            let name = &line[..name_end];
            if !valid_name(name) {
                return Err(err("bad metric name"));
            }
            if !keep(name) {
                continue;
            }
            let mut rest = &line[name_end..];
            let mut labels = Vec::new();
            if let Some(after) = rest.strip_prefix('{') {
                let (parsed, after) = parse_labels(after).map_err(|what| err(&what))?;
                labels = parsed;
                rest = after;
            }
            let value = rest
                .split_whitespace()
                .next()
                .ok_or_else(|| err("no value"))?;
            let value = parse_value(value).ok_or_else(|| err("bad value"))?;
            samples.push(Sample {
                name: name.to_string(),
                labels,
                value,
            });
        }
        Ok(Metrics { samples })
    }

    /// The samples named `name` that carry every label of `want`.
    pub(crate) fn matching<'a>(
        &'a self,
        name: &'a str,
        want: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples
            .iter()
            .filter(move |s| s.name == name && s.has(want))
    }

    /// The sum of the samples named `name` that carry every label of `want` (a counter or
    /// histogram over several series, a gauge's states), or `None` if there is none.
    pub(crate) fn sum(&self, name: &str, want: &[(&str, &str)]) -> Option<f64> {
        self.matching(name, want)
            .map(|s| s.value)
            .fold(None, |acc, v| Some(acc.unwrap_or(0.0) + v))
    }
}

/// `[a-zA-Z_:][a-zA-Z0-9_:]*`.
fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// A sample's labels, as [`Sample::labels`] holds them.
type Labels = Vec<(String, String)>;

/// Reads `k="v",…}` (after the `{`): the labels and what follows the `}`.
fn parse_labels(mut s: &str) -> Result<(Labels, &str), String> {
    let mut labels = Vec::new();
    loop {
        s = s.trim_start();
        if let Some(after) = s.strip_prefix('}') {
            return Ok((labels, after));
        }
        let eq = s.find('=').ok_or("label without '='")?;
        let key = s[..eq].trim();
        if !valid_name(key) || key.contains(':') {
            return Err(format!("bad label name {key:?}"));
        }
        s = s[eq + 1..]
            .trim_start()
            .strip_prefix('"')
            .ok_or("label value not quoted")?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err("unterminated label value".into()),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c @ ('\\' | '"'))) => value.push(c),
                    _ => return Err("bad escape in label value".into()),
                },
                Some((_, c)) => value.push(c),
            }
        };
        labels.push((key.to_string(), value));
        s = s[end + 1..].trim_start();
        if let Some(after) = s.strip_prefix(',') {
            s = after;
        } else if !s.starts_with('}') {
            return Err("expected ',' or '}' after a label".into());
        }
    }
}

/// A sample value: a float, `+Inf`, `-Inf` or `NaN`.
fn parse_value(v: &str) -> Option<f64> {
    match v {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => v.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What keel's admin endpoint renders (metrics-exporter-prometheus), abridged.
    const TEXT: &str = r#"# HELP keel_pool_threads keel-pool threads by state.
# TYPE keel_pool_threads gauge
keel_pool_threads{state="idle"} 2
keel_pool_threads{state="busy"} 98
keel_pool_threads{state="starting"} 0

# TYPE keel_server_handler_seconds histogram
keel_server_handler_seconds_bucket{service="Service1",operation="get_data",le="0.000025"} 0
keel_server_handler_seconds_bucket{service="Service1",operation="get_data",le="+Inf"} 100
keel_server_handler_seconds_sum{service="Service1",operation="get_data"} 200.512
keel_server_handler_seconds_count{service="Service1",operation="get_data"} 100
keel_server_handler_seconds_sum{service="Calculator",operation="add"} 0.5
keel_server_handler_seconds_count{service="Calculator",operation="add"} 1000
keel_host_ready 1
"#;

    #[test]
    fn reads_gauges_and_histograms() {
        let m = Metrics::parse(TEXT).unwrap();
        assert_eq!(m.samples.len(), 10);
        assert_eq!(m.sum("keel_pool_threads", &[]), Some(100.0));
        assert_eq!(m.sum("keel_pool_threads", &[("state", "busy")]), Some(98.0));
        let s1 = [("service", "Service1")];
        assert_eq!(m.sum("keel_server_handler_seconds_sum", &s1), Some(200.512));
        assert_eq!(m.sum("keel_server_handler_seconds_count", &s1), Some(100.0));
        // Every operation together.
        assert_eq!(
            m.sum("keel_server_handler_seconds_count", &[]),
            Some(1100.0)
        );
        assert_eq!(m.sum("keel_host_ready", &[]), Some(1.0));
        let inf = m
            .matching("keel_server_handler_seconds_bucket", &[("le", "+Inf")])
            .next()
            .unwrap();
        assert_eq!(inf.value, 100.0);
        assert_eq!(inf.label("operation"), Some("get_data"));
        // Absent: None, not 0.
        assert_eq!(m.sum("keel_pool_threads", &[("state", "asleep")]), None);
        assert_eq!(m.sum("nothing_here", &[]), None);
    }

    #[test]
    fn keeps_only_what_is_asked_for() {
        let m = Metrics::parse_only(TEXT, |n| n == "keel_pool_threads").unwrap();
        assert_eq!(m.samples.len(), 3);
        assert!(m.samples.iter().all(|s| s.name == "keel_pool_threads"));
    }

    #[test]
    fn labels_escapes_timestamps_and_special_values() {
        let m = Metrics::parse(
            "a{x=\"q\\\"uote\",y=\"back\\\\slash\",z=\"new\\nline\",} 1.5e3 1700000000000\n\
             b{ x = \"}{,\" } -Inf\nc NaN\nd{} 7\ne +Inf\n   \n",
        )
        .unwrap();
        let a = &m.samples[0];
        assert_eq!(a.value, 1500.0);
        assert_eq!(a.label("x"), Some("q\"uote"));
        assert_eq!(a.label("y"), Some("back\\slash"));
        assert_eq!(a.label("z"), Some("new\nline"));
        assert_eq!(m.samples[1].label("x"), Some("}{,"));
        assert_eq!(m.samples[1].value, f64::NEG_INFINITY);
        assert!(m.samples[2].value.is_nan());
        assert!(m.samples[2].labels.is_empty());
        assert_eq!(m.samples[3].value, 7.0);
        assert_eq!(m.samples[4].value, f64::INFINITY);
    }

    #[test]
    fn rejects_what_it_cannot_read() {
        for (text, line) in [
            ("ok 1\nbroken\n", 2),
            ("9lives 1\n", 1),
            ("a{x=1} 2\n", 1),
            ("a{x=\"1\" 2\n", 1),
            ("a{x=\"1} 2\n", 1),
            ("a{x=\"\\t\"} 2\n", 1),
            ("a{x=\"1\"}\n", 1),
            ("a twelve\n", 1),
        ] {
            let e = Metrics::parse(text).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
        }
        assert_eq!(Metrics::parse("").unwrap(), Metrics::default());
    }
}
