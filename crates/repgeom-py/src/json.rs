//! JSON across the boundary: results leave as the serde JSON of the Rust result types (with
//! their layer), metric configurations arrive as JSON objects for the registry's parser.

use crate::errors::Failure;

pub(crate) fn to_json<T: serde::Serialize>(value: &T) -> Result<String, Failure> {
    serde_json::to_string(value).map_err(|e| Failure::Panic(format!("serialising a result: {e}")))
}

/// `{"layer": i, ...rest}` from the JSON object `rest`.
pub(crate) fn with_layer(layer: usize, json: String) -> String {
    match json.strip_prefix('{') {
        Some("}") => format!("{{\"layer\":{layer}}}"),
        Some(rest) => format!("{{\"layer\":{layer},{rest}"),
        None => json,
    }
}

/// Parses metric configurations (`{"metric": name, ...options}` JSON) with the registry's
/// parser (`from_config`), so unknown names and bad options read as they do on the CLI.
pub(crate) fn parse_configs<T>(
    configs: &[String],
    from_config: impl Fn(&serde_json::Map<String, serde_json::Value>) -> repgeom_metrics::Result<T>,
) -> Result<Vec<T>, Failure> {
    configs
        .iter()
        .map(|c| match serde_json::from_str(c) {
            Ok(serde_json::Value::Object(o)) => Ok(from_config(&o)?),
            Ok(_) => Err(Failure::Invalid(format!(
                "metric options {c}: expected a JSON object"
            ))),
            Err(e) => Err(Failure::Invalid(format!("metric options {c}: {e}"))),
        })
        .collect()
}
