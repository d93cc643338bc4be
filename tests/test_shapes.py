"""Shape rules (ragen_jax/shapes.py): evened chunk lengths (the fewest chunks, as even as the rounding allows) and
the two length-bucket rules."""

import pytest

from ragen_jax.shapes import even_chunk


def test_even_chunk_examples():
    assert [even_chunk(n, 256) for n in (1, 100, 256, 257, 300, 384, 513)] == [1, 100, 256, 129, 150, 192, 171]
    assert [even_chunk(n, 256, 16) for n in (100, 384, 640, 3584, 3712)] == [112, 192, 224, 256, 256]


@pytest.mark.parametrize("multiple", [1, 8, 16])
@pytest.mark.parametrize("most", [1, 7, 16, 100, 256])
def test_even_chunk_keeps_the_fewest_chunks_and_pads_little(most, multiple):
    for n in range(1, 1500, 3):
        size = even_chunk(n, most, multiple)
        count = -(-n // most)
        assert 1 <= size <= most and -(-n // size) == count, (n, most, multiple, size)
        assert count * size - n < count * (multiple + 1), (n, most, multiple, size)  # < multiple + 1 a chunk


def test_even_chunk_rejects_nonpositive_input():
    with pytest.raises(ValueError, match="n, most and multiple >= 1"):
        even_chunk(0, 256)


def test_row_buckets_are_powers_of_two_to_256_then_multiples_of_128():
    from ragen_jax.shapes import ROW_BUCKETS, bucket_length, round_up

    assert [bucket_length(n, **ROW_BUCKETS) for n in (0, 1, 32, 33, 200, 256, 257, 300, 385)] == [
        32, 32, 32, 64, 256, 256, 384, 384, 512]
    assert [round_up(n, 8) for n in (0, 1, 8, 9)] == [0, 8, 8, 16]
