"""The reader's UTF-8 check: chunks of mostly-ASCII text are vouched for without being
decoded, never wrongly, and a bad byte is still named by the decoder's own message."""

from __future__ import annotations

import codecs
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from fi_attn_bench.results import marked_stream, reader

REAL = Path(__file__).parent / "fixtures" / "real_csv"
PIECES = [
    b"a",
    b",",
    b"\n",
    "…".encode(),
    "é".encode(),
    "中".encode(),
    "😀".encode(),  # four bytes: left to the decoder
    b"\x80",
    b"\xc0\xaf",  # overlong
    b"\xe0\x80\xaf",  # overlong
    b"\xed\xa0\x80",  # a surrogate
    b"\xe2\x80",  # cut short
    b"\xc3",
    b"\xff",
    b"\xe0\xa0\x80",
    b"\xed\x9f\xbf",
    b"\xc2\x80",
    b"\xdf\xbf",
    b"\xef\xbf\xbf",
]


def _decodes(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@settings(max_examples=3000, deadline=None)
@given(st.one_of(st.lists(st.sampled_from(PIECES), max_size=12).map(b"".join), st.binary()))
def test_a_chunk_vouched_for_always_decodes(data):
    if marked_stream.utf8_sequences_ok(data):
        assert _decodes(data)


def test_the_harness_text_is_vouched_for_without_decoding():
    for path in sorted(REAL.glob("*.csv")):
        data = path.read_bytes()
        assert not data.isascii()  # the kernels cells hold "…"
        assert marked_stream.utf8_sequences_ok(data), path.name


def test_a_bad_byte_after_good_chunks_gets_the_decoders_message(tmp_path):
    """The check skips whole chunks only, so the decoder meets the bad chunk as it did."""
    data = (REAL / "h100_decode_default.csv").read_bytes()
    head, *rows = data.split(b"\n")
    body = b"\n".join(rows[:-1] * (3 * marked_stream.CHUNK_BYTES // len(data) + 1))
    middle = len(body) // 2 + 5
    bad = tmp_path / "bad.csv"
    bad.write_bytes(head + b"\n" + body[:middle] + b"\xff" + body[middle:] + b"\n")
    decoder = codecs.getincrementaldecoder("utf-8")()
    expected = None
    with open(bad, "rb") as handle:
        while chunk := handle.read(marked_stream.CHUNK_BYTES):
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as exc:
                expected = f"unable to read CSV: {exc}"
                break
    read = reader.read_file(bad)
    assert read.file is None and expected is not None
    assert [issue.message for issue in read.issues] == [expected]
