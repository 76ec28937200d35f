//! JSON tables: a pretty-printed array of row objects, floats as numbers when finite, else the
//! strings "NaN", "inf", "-inf" ([`float`], used by `Row`'s float fields).

use std::path::Path;

use super::{ResultsTable, Row};
use crate::error::{Error, Result, io_err};
use crate::io::atomic_write;

impl ResultsTable {
    /// Writes a pretty-printed JSON array of rows atomically.
    pub fn write_json(&self, path: &Path) -> Result<()> {
        let mut buf = serde_json::to_vec_pretty(&self.rows).map_err(|source| Error::Json {
            path: path.to_owned(),
            source,
        })?;
        buf.push(b'\n');
        atomic_write(path, &buf)
    }

    /// Reads a JSON array of rows (see [`ResultsTable::read`]).
    pub(super) fn read_json(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(io_err("read", path))?;
        let rows: Vec<Row> = serde_json::from_slice(&bytes).map_err(|source| Error::Json {
            path: path.to_owned(),
            source,
        })?;
        Self::new(rows)
    }
}

/// JSON floats: numbers when finite, else the strings "NaN", "inf", "-inf".
pub(super) mod float {
    use serde::{Deserialize, Deserializer, Serializer};

    #[derive(Deserialize)]
    #[serde(untagged)]
    pub(super) enum Repr {
        Num(f64),
        Str(String),
    }

    pub(in crate::table) fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        if v.is_finite() {
            s.serialize_f64(*v)
        } else if v.is_nan() {
            s.serialize_str("NaN")
        } else if *v > 0.0 {
            s.serialize_str("inf")
        } else {
            s.serialize_str("-inf")
        }
    }

    pub(super) fn from_repr<E: serde::de::Error>(r: Repr) -> Result<f64, E> {
        match r {
            Repr::Num(v) => Ok(v),
            Repr::Str(s) => match s.as_str() {
                "NaN" | "nan" => Ok(f64::NAN),
                "inf" | "Infinity" => Ok(f64::INFINITY),
                "-inf" | "-Infinity" => Ok(f64::NEG_INFINITY),
                other => Err(E::custom(format!(
                    "expected a number, found string {other:?}"
                ))),
            },
        }
    }

    pub(in crate::table) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        from_repr(Repr::deserialize(d)?)
    }

    /// A map of named floats, each as [`serialize`] writes it.
    pub(in crate::table) mod map {
        use std::collections::BTreeMap;

        use super::Repr;
        use serde::ser::SerializeMap as _;
        use serde::{Deserialize, Deserializer, Serializer};

        /// One value through the float representation.
        struct Float(f64);

        impl serde::Serialize for Float {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                super::serialize(&self.0, s)
            }
        }

        pub(in crate::table) fn serialize<S: Serializer>(
            m: &BTreeMap<String, f64>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            let mut out = s.serialize_map(Some(m.len()))?;
            for (k, v) in m {
                out.serialize_entry(k, &Float(*v))?;
            }
            out.end()
        }

        pub(in crate::table) fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<BTreeMap<String, f64>, D::Error> {
            BTreeMap::<String, Repr>::deserialize(d)?
                .into_iter()
                .map(|(k, r)| super::from_repr(r).map(|v| (k, v)))
                .collect()
        }
    }

    pub(in crate::table) mod opt {
        use super::Repr;
        use serde::{Deserialize, Deserializer, Serializer};

        pub(in crate::table) fn serialize<S: Serializer>(
            v: &Option<f64>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            match v {
                None => s.serialize_none(),
                Some(v) => super::serialize(v, s),
            }
        }

        pub(in crate::table) fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<f64>, D::Error> {
            match Option::<Repr>::deserialize(d)? {
                None => Ok(None),
                Some(r) => super::from_repr(r).map(Some),
            }
        }
    }
}
