import json

import pytest

from snowir.hw import ConfigError, SnowflakeConfig


def test_defaults_are_the_zc706_build() -> None:
    hw = SnowflakeConfig()
    assert hw.macs == 256
    assert hw.vmacs == 16
    assert hw.icache_instructions * 4 == 4096  # 4 KB of 32-bit instructions
    assert hw.dram_bytes_per_cycle == pytest.approx(16.8)
    assert hw.cycles_to_ms(250_000) == pytest.approx(1.0)


def test_json_round_trip(tmp_path) -> None:
    hw = SnowflakeConfig(cus=2, dram_gbps=8.0, ld_startup_cycles=10)
    path = tmp_path / "hw.json"
    hw.save(path)
    assert SnowflakeConfig.load(path) == hw


@pytest.mark.parametrize(
    "data, message",
    [
        ({"nope": 1}, "unknown hardware parameter 'nope'"),
        ({"cus": "4"}, "parameter 'cus' must be int"),
        ({"cus": 0}, "parameter 'cus' must be positive"),
        ({"registers": 64}, "5-bit register fields"),
        ({"dram_gbps": -1.0}, "bandwidths must be positive"),
    ],
)
def test_bad_config_is_one_line_error(tmp_path, data, message) -> None:
    path = tmp_path / "hw.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=message) as info:
        SnowflakeConfig.load(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_unreadable_config(tmp_path) -> None:
    path = tmp_path / "hw.json"
    path.write_text("{oops")
    with pytest.raises(ConfigError, match="invalid JSON"):
        SnowflakeConfig.load(path)
