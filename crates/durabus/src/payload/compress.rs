//! gzip, as the payload store keeps snapshots (flate2, fast level: compression runs on the
//! publishing task, so it must stay cheap).

use std::io::{Read, Write};

use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;

use crate::error::{Error, Result};

/// Largest payload a snapshot holds once decompressed (16 MiB): a corrupt or hostile blob cannot
/// make a read allocate without bound.
pub const MAX_DECOMPRESSED: u64 = 16 * 1024 * 1024;

/// `text` gzip-compressed.
pub fn gzip(text: &[u8]) -> Result<Vec<u8>> {
    let mut enc = GzEncoder::new(Vec::with_capacity(text.len() / 2 + 32), Compression::fast());
    enc.write_all(text)
        .and_then(|()| enc.finish())
        .map_err(|e| Error::Internal(format!("gzip failed: {e}")))
}

/// The text of a gzip blob. Fails with [`Error::Corrupt`] when it is not gzip, not UTF-8, or
/// larger than [`MAX_DECOMPRESSED`].
pub fn gunzip(blob: &[u8]) -> Result<String> {
    let mut out = Vec::new();
    GzDecoder::new(blob)
        .take(MAX_DECOMPRESSED + 1)
        .read_to_end(&mut out)
        .map_err(|e| Error::corrupt("a payload snapshot", e))?;
    if out.len() as u64 > MAX_DECOMPRESSED {
        return Err(Error::corrupt(
            "a payload snapshot",
            format!("it decompresses to more than {MAX_DECOMPRESSED} bytes"),
        ));
    }
    String::from_utf8(out).map_err(|e| Error::corrupt("a payload snapshot", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn garbage_is_corrupt_not_a_panic() {
        assert!(gunzip(b"not gzip").is_err());
        assert!(gunzip(&[]).is_err());
    }

    proptest! {
        #[test]
        fn round_trips_byte_for_byte(text in "\\PC{0,2000}") {
            let z = gzip(text.as_bytes()).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(gunzip(&z).map_err(|e| TestCaseError::fail(e.to_string()))?, text);
        }
    }
}
