import pytest

from memfx.model.errors import ParamError
from memfx.model.units import format_size, parse_size


@pytest.mark.parametrize("text, n", [("48K", 49152), ("48KiB", 49152), ("2m", 2 << 20),
                                     ("1.5G", 3 << 29), ("4096", 4096), (" 64 K ", 65536),
                                     (1234, 1234), ("1T", 1 << 40)])
def test_parse_size(text, n):
    assert parse_size(text) == n


@pytest.mark.parametrize("bad", ["", "K", "12 parsecs", "-5", "1Ki", "1.2.3M", True, -1])
def test_parse_size_rejects(bad):
    with pytest.raises(ParamError):
        parse_size(bad)


@pytest.mark.parametrize("n", [1, 1000, 1024, 49152, 1536 << 10, 3 << 20, 105 << 20, 1 << 40])
def test_exact_sizes_round_trip(n):
    assert parse_size(format_size(n)) == n


def test_large_odd_sizes_are_short():
    assert format_size(24167796736) == "22.5 GiB"
    assert format_size(25276502016) == "23.5 GiB"
