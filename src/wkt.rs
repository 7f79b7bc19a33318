//! `google.protobuf.Timestamp` and `google.protobuf.FieldMask` with proto3-JSON forms that
//! `pbjson-types` gets wrong or lacks: a Timestamp is printed Z-normalized with 0, 3, 6 or 9
//! fractional digits, and a FieldMask is one comma-joined string of lowerCamelCase paths. The
//! other well-known types come from `pbjson-types`.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, SecondsFormat, Utc};
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A point in time: seconds and nanoseconds since the Unix epoch, UTC.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, ::prost::Message)]
pub struct Timestamp {
    /// Seconds since 1970-01-01T00:00:00Z; from 0001-01-01 to 9999-12-31 inclusive.
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    /// Fraction of the second, 0 to 999,999,999.
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}

impl ::prost::Name for Timestamp {
    const NAME: &'static str = "Timestamp";
    const PACKAGE: &'static str = "google.protobuf";
}

/// A time outside what a Timestamp can carry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "timestamp out of range: {seconds}s {nanos}ns (allowed: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999999Z)"
)]
pub struct TimestampOutOfRange {
    seconds: i64,
    nanos: i32,
}

// 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z, the range proto3 JSON allows.
const MIN_SECONDS: i64 = -62_135_596_800;
const MAX_SECONDS: i64 = 253_402_300_799;

impl Timestamp {
    /// The timestamp as a UTC date-time, if it is in the allowed range.
    pub fn to_datetime(self) -> Result<DateTime<Utc>, TimestampOutOfRange> {
        let out_of_range = TimestampOutOfRange { seconds: self.seconds, nanos: self.nanos };
        if !(MIN_SECONDS..=MAX_SECONDS).contains(&self.seconds) || !(0..1_000_000_000).contains(&self.nanos) {
            return Err(out_of_range);
        }
        DateTime::from_timestamp(self.seconds, self.nanos as u32).ok_or(out_of_range)
    }
}

impl From<DateTime<Utc>> for Timestamp {
    fn from(time: DateTime<Utc>) -> Self {
        Timestamp { seconds: time.timestamp(), nanos: time.timestamp_subsec_nanos() as i32 }
    }
}

impl From<SystemTime> for Timestamp {
    fn from(time: SystemTime) -> Self {
        match time.duration_since(UNIX_EPOCH) {
            Ok(after) => Timestamp { seconds: after.as_secs() as i64, nanos: after.subsec_nanos() as i32 },
            Err(before) => {
                let before = before.duration();
                let (seconds, nanos) = (before.as_secs() as i64, before.subsec_nanos() as i32);
                if nanos == 0 {
                    Timestamp { seconds: -seconds, nanos: 0 }
                } else {
                    Timestamp { seconds: -seconds - 1, nanos: 1_000_000_000 - nanos }
                }
            }
        }
    }
}

impl TryFrom<Timestamp> for SystemTime {
    type Error = TimestampOutOfRange;

    fn try_from(timestamp: Timestamp) -> Result<Self, Self::Error> {
        let time = timestamp.to_datetime()?;
        let nanos = Duration::from_nanos(time.timestamp_subsec_nanos() as u64);
        let seconds = time.timestamp();
        Ok(if seconds >= 0 {
            UNIX_EPOCH + Duration::from_secs(seconds as u64) + nanos
        } else {
            UNIX_EPOCH - Duration::from_secs(seconds.unsigned_abs()) + nanos
        })
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let time = self.to_datetime().map_err(serde::ser::Error::custom)?;
        serializer.serialize_str(&time.to_rfc3339_opts(SecondsFormat::AutoSi, true))
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TimestampVisitor;
        impl Visitor<'_> for TimestampVisitor {
            type Value = Timestamp;
            fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str("an RFC 3339 timestamp such as \"2026-11-30T06:18:08Z\"")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<Timestamp, E> {
                let time = DateTime::parse_from_rfc3339(text)
                    .map_err(|error| E::custom(format!("invalid timestamp {text:?}: {error}")))?;
                let timestamp = Timestamp::from(time.with_timezone(&Utc));
                timestamp.to_datetime().map_err(E::custom)?;
                Ok(timestamp)
            }
        }
        deserializer.deserialize_str(TimestampVisitor)
    }
}

/// A set of field paths, `snake_case` segments joined by dots (`spec.release_channel`).
#[derive(Clone, PartialEq, Eq, Hash, ::prost::Message)]
pub struct FieldMask {
    /// The paths.
    #[prost(string, repeated, tag = "1")]
    pub paths: ::prost::alloc::vec::Vec<::prost::alloc::string::String>,
}

impl ::prost::Name for FieldMask {
    const NAME: &'static str = "FieldMask";
    const PACKAGE: &'static str = "google.protobuf";
}

impl FieldMask {
    /// A mask of the given snake_case paths.
    pub fn new<I: IntoIterator<Item = S>, S: Into<String>>(paths: I) -> Self {
        FieldMask { paths: paths.into_iter().map(Into::into).collect() }
    }
}

/// `display_name` → `displayName`, per dot-separated segment. `None` when the path would not
/// come back unchanged from the camel form (an upper-case letter, or `_` not before a lower-case one).
fn path_to_camel(path: &str) -> Option<String> {
    let mut camel = String::with_capacity(path.len());
    let mut after_underscore = false;
    for character in path.chars() {
        if character.is_ascii_uppercase() {
            return None;
        }
        if character == '_' {
            if after_underscore {
                return None;
            }
            after_underscore = true;
            continue;
        }
        if after_underscore {
            if !character.is_ascii_lowercase() {
                return None;
            }
            camel.push(character.to_ascii_uppercase());
        } else {
            camel.push(character);
        }
        after_underscore = false;
    }
    (!after_underscore).then_some(camel)
}

/// `displayName` → `display_name`; snake_case input passes through unchanged.
fn path_to_snake(path: &str) -> String {
    let mut snake = String::with_capacity(path.len() + 4);
    for character in path.chars() {
        if character.is_ascii_uppercase() {
            snake.push('_');
            snake.push(character.to_ascii_lowercase());
        } else {
            snake.push(character);
        }
    }
    snake
}

impl Serialize for FieldMask {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut joined = Vec::with_capacity(self.paths.len());
        for path in &self.paths {
            let camel = path_to_camel(path)
                .ok_or_else(|| serde::ser::Error::custom(format!("field mask path {path:?} has no JSON form")))?;
            joined.push(camel);
        }
        serializer.serialize_str(&joined.join(","))
    }
}

impl<'de> Deserialize<'de> for FieldMask {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FieldMaskVisitor;
        impl Visitor<'_> for FieldMaskVisitor {
            type Value = FieldMask;
            fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str("a comma-separated list of field paths such as \"policy,displayName\"")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<FieldMask, E> {
                if text.is_empty() {
                    return Ok(FieldMask::default());
                }
                let mut paths = Vec::new();
                for path in text.split(',') {
                    let path = path.trim();
                    if path.is_empty() || path.split('.').any(str::is_empty) {
                        return Err(E::custom(format!("invalid field mask {text:?}: empty path segment")));
                    }
                    paths.push(path_to_snake(path));
                }
                Ok(FieldMask { paths })
            }
        }
        deserializer.deserialize_str(FieldMaskVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json<T: Serialize>(value: &T) -> String {
        serde_json::to_string(value).unwrap()
    }

    #[test]
    fn timestamps_print_z_normalized_with_minimal_fraction_groups() {
        assert_eq!(json(&Timestamp { seconds: 0, nanos: 0 }), r#""1970-01-01T00:00:00Z""#);
        assert_eq!(json(&Timestamp { seconds: 1, nanos: 250_000_000 }), r#""1970-01-01T00:00:01.250Z""#);
        assert_eq!(json(&Timestamp { seconds: 1, nanos: 1_000 }), r#""1970-01-01T00:00:01.000001Z""#);
        assert_eq!(json(&Timestamp { seconds: 1, nanos: 1 }), r#""1970-01-01T00:00:01.000000001Z""#);
    }

    #[test]
    fn timestamps_parse_any_offset() {
        let parsed: Timestamp = serde_json::from_str(r#""2026-12-24T01:00:00+01:00""#).unwrap();
        assert_eq!(json(&parsed), r#""2026-12-24T00:00:00Z""#);
        let error = serde_json::from_str::<Timestamp>(r#""yesterday""#).unwrap_err().to_string();
        assert!(error.contains("yesterday"), "{error}");
    }

    #[test]
    fn timestamps_out_of_range_do_not_serialize() {
        assert!(serde_json::to_string(&Timestamp { seconds: MAX_SECONDS + 1, nanos: 0 }).is_err());
        assert!(serde_json::to_string(&Timestamp { seconds: 0, nanos: -1 }).is_err());
    }

    #[test]
    fn system_time_round_trips_before_and_after_the_epoch() {
        for timestamp in [Timestamp { seconds: -2, nanos: 500 }, Timestamp { seconds: 1_764_483_488, nanos: 7 }] {
            let time = SystemTime::try_from(timestamp).unwrap();
            assert_eq!(Timestamp::from(time), timestamp);
        }
    }

    #[test]
    fn field_masks_are_comma_joined_camel_case() {
        let mask = FieldMask::new(["policy", "identity.runner_group_id"]);
        assert_eq!(json(&mask), r#""policy,identity.runnerGroupId""#);
        let parsed: FieldMask = serde_json::from_str(r#""displayName,spec.release_channel""#).unwrap();
        assert_eq!(parsed.paths, ["display_name", "spec.release_channel"]);
        assert_eq!(serde_json::from_str::<FieldMask>(r#""""#).unwrap(), FieldMask::default());
        assert!(serde_json::from_str::<FieldMask>(r#""policy,,etag""#).is_err());
        assert!(serde_json::to_string(&FieldMask::new(["Bad_Path"])).is_err());
    }
}
