//! gzip, as the payload store keeps snapshots (flate2, fast level: compression runs on the
//! publishing task, so it must stay cheap).

use std::io::Read;

use flate2::read::GzDecoder;
use flate2::{Compress, Compression, Crc, FlushCompress, Status};

use crate::error::{Error, Result};

/// Largest payload a snapshot holds once decompressed (16 MiB): a corrupt or hostile blob cannot
/// make a read allocate without bound.
pub const MAX_DECOMPRESSED: u64 = 16 * 1024 * 1024;

/// The gzip header durabus writes: deflate, no flags, no time, fast level, unknown OS.
const HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 4, 255];

thread_local! {
    /// One deflate state per thread, reset between payloads: a new state allocates and clears
    /// a few hundred KiB, which for small payloads costs far more than compressing them.
    static DEFLATE: std::cell::RefCell<Compress> =
        std::cell::RefCell::new(Compress::new(Compression::fast(), false));
}

/// Payloads shorter than this are kept in a gzip member of *stored* deflate blocks: starting a
/// deflate stream clears a few hundred KiB of compressor state, which for a payload of a few
/// hundred bytes costs more than its whole publish (and deflate saves little there: ~15 % on
/// the benchmark's 220-byte payload). From this size on, deflate at the fast level.
pub const DEFLATE_FROM: usize = 512;

/// `text` as a gzip member (header, deflate data, CRC-32 and length), readable by any gzip
/// decoder: deflate-compressed from [`DEFLATE_FROM`] bytes, stored below.
pub fn gzip(text: &[u8]) -> Result<Vec<u8>> {
    if text.len() < DEFLATE_FROM {
        return Ok(stored(text));
    }
    let mut out = Vec::with_capacity(text.len() / 2 + 64);
    out.extend_from_slice(&HEADER);
    DEFLATE.with(|cell| {
        let mut deflate = cell.borrow_mut();
        deflate.reset();
        let mut input = text;
        loop {
            let before = deflate.total_in();
            let status = deflate
                .compress_vec(input, &mut out, FlushCompress::Finish)
                .map_err(|e| Error::Internal(format!("gzip failed: {e}")))?;
            let used = usize::try_from(deflate.total_in() - before).unwrap_or(input.len());
            input = &input[used.min(input.len())..];
            if status == Status::StreamEnd {
                return Ok::<(), Error>(());
            }
            // The output filled up (compress_vec writes only into spare capacity): grow it.
            out.reserve(out.capacity().max(256));
        }
    })?;
    trailer(&mut out, text);
    Ok(out)
}

/// A gzip member of stored (uncompressed) deflate blocks of at most 65,535 bytes each.
fn stored(text: &[u8]) -> Vec<u8> {
    let blocks = text.len() / 65_535 + 1;
    let mut out = Vec::with_capacity(HEADER.len() + text.len() + blocks * 5 + 8);
    out.extend_from_slice(&HEADER);
    let mut chunks = text.chunks(65_535).peekable();
    if chunks.peek().is_none() {
        // An empty payload: one empty final block.
        out.extend_from_slice(&[1, 0, 0, 0xff, 0xff]);
    }
    while let Some(chunk) = chunks.next() {
        // BFINAL on the last block, BTYPE 00 (stored), padded to the byte; then LEN and NLEN.
        out.push(u8::from(chunks.peek().is_none()));
        let len = u16::try_from(chunk.len()).unwrap_or(u16::MAX);
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(chunk);
    }
    trailer(&mut out, text);
    out
}

/// The gzip trailer: CRC-32 of the text, then its length modulo 2^32 (ISIZE).
fn trailer(out: &mut Vec<u8>, text: &[u8]) {
    let mut crc = Crc::new();
    crc.update(text);
    out.extend_from_slice(&crc.sum().to_le_bytes());
    out.extend_from_slice(&(text.len() as u32).to_le_bytes());
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
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_blob_is_standard_gzip() {
        use std::io::Write;
        let text = "{\"order\": 42, \"note\": \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}"
            .repeat(50);
        let blob = gzip(text.as_bytes()).unwrap();
        // What flate2's own encoder reads back, and what it writes, decode the same.
        let mut theirs = flate2::write::GzEncoder::new(Vec::new(), Compression::fast());
        theirs.write_all(text.as_bytes()).unwrap();
        assert_eq!(gunzip(&theirs.finish().unwrap()).unwrap(), text);
        let mut back = String::new();
        flate2::read::GzDecoder::new(&blob[..])
            .read_to_string(&mut back)
            .unwrap();
        assert_eq!(back, text);
        assert_eq!(&blob[..2], &[0x1f, 0x8b]);
        assert!(blob.len() < text.len() / 10, "{}", blob.len());
        // Short payloads are stored, readable by any gzip decoder; every block boundary too.
        for n in [
            0usize,
            1,
            100,
            DEFLATE_FROM - 1,
            DEFLATE_FROM,
            65_535,
            65_536,
            140_000,
        ] {
            let t: String = (0..n).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
            let z = gzip(t.as_bytes()).unwrap();
            let mut back = String::new();
            flate2::read::GzDecoder::new(&z[..])
                .read_to_string(&mut back)
                .unwrap();
            assert_eq!(back, t, "{n}");
            if n < DEFLATE_FROM {
                assert_eq!(z.len(), n + 10 + 5 + 8, "{n}");
            }
        }
        // A large payload goes through several output growths.
        let big: String = (0..200_000u32)
            .map(|i| char::from(b'a' + (i * 7 % 26) as u8))
            .collect();
        assert_eq!(gunzip(&gzip(big.as_bytes()).unwrap()).unwrap(), big);
        assert_eq!(gunzip(&gzip(b"").unwrap()).unwrap(), "");
    }

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
